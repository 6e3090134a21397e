"""A pass over a Shard with spec.backup: the sidecar once its claim exists, a backup taken on
demand through the sidecar, verified and recorded; a full volume or a bad snapshot deletes
nothing and leaves the shard's Deployment alone."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import generate_latest

from kcp_shard_operator.core.api.meta import VERSION_ANNOTATION
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.spec import BACKUP_ANNOTATION
from kcp_shard_operator.core.shard.meta import selector_labels
from kcp_shard_operator.kube.client import Ran
from testkit.operator_metrics import parse
from tests.conftest import NO_PKI, make, shard_object
from tests.fake_kube import Effects, FakeKube, context, respec, run, settle, watched
from tests.unit.backup.test_snapshot import DF, ENDPOINT_STATUS, SNAPSHOT_STATUS
from tests.unit.controller.test_pass import condition, status

BACKUP: dict[str, Any] = {"claimRef": {"name": "backups"}, "retention": {"keep": 2}}
CLAIM: JSON = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "backups", "namespace": "ns"},
}
DIGEST = "ab" * 32
NOW = datetime.datetime(2026, 12, 7, 11, 7, 0, tzinfo=datetime.UTC)


@dataclass
class Sidecar:
    """The backup sidecar's tools as the operator reaches them, answers by tool."""

    answers: dict[str, Ran] = field(default_factory=dict)
    ran: list[list[str]] = field(default_factory=list)

    def __call__(self, namespace: str, pod: str, container: str, command: list[str]) -> Ran:
        assert (namespace, pod, container) == ("ns", "root-pod", "backup")
        self.ran.append(command)
        tool = _tool(command).removeprefix("/etcdctl ").removeprefix("/etcdutl ")
        default = {
            "df": Ran(0, DF, ""),
            "endpoint status": Ran(0, ENDPOINT_STATUS, ""),
            "snapshot status": Ran(0, SNAPSHOT_STATUS, ""),
            "sha256sum": Ran(0, f"{DIGEST}  {command[-1]}\n", ""),
            "stat": Ran(0, "1323040\n", ""),
        }
        return self.answers.get(tool) or default.get(tool) or Ran(0, "", "")

    def tools(self) -> list[str]:
        return [_tool(command) for command in self.ran]


def _tool(command: list[str]) -> str:
    """``df`` for busybox's applets, ``/etcdctl snapshot save`` for etcd's tools."""
    if command[0] == "/busybox":
        return command[1]
    words = [word for word in command[1:] if not word.startswith(("-", "/"))]
    return " ".join([command[0], *words[:2]])


def shard() -> JSON:
    return shard_object(**NO_PKI, backup=BACKUP)


def pod(ready: bool = True) -> JSON:
    labels = selector_labels(make(shard()))
    states = [
        {"name": "kcp", "ready": ready, "state": {"running": {}}},
        {"name": "backup", "ready": True, "state": {"running": {}}},
    ]
    conditions = [{"type": "Ready", "status": str(ready)}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "root-pod", "namespace": "ns", "labels": labels},
        "status": {"phase": "Running", "conditions": conditions, "containerStatuses": states},
    }


def containers(kube: FakeKube) -> list[str]:
    template = kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["template"]
    return [c["name"] for c in template["spec"]["containers"]]


def annotate(ctx: Any, kube: FakeKube, value: str) -> None:
    obj = kube.objects[("Shard", "ns", "root")]
    obj["metadata"]["annotations"] = {BACKUP_ANNOTATION: value}
    watched(ctx, kube.put(obj))


def running(
    sidecar: Sidecar, *objects: JSON, root: JSON | None = None
) -> tuple[Any, FakeKube, Effects]:
    """``root`` (default: :func:`shard`) rolled out, its pod's sidecar answering as ``sidecar``."""
    kube = FakeKube(root or shard(), CLAIM, *objects)
    effects = Effects()
    ctx = context(kube, effects)
    kube.containers = sidecar
    ctx.wall_clock = lambda: NOW
    settle(ctx, kube, "root")
    watched(ctx, pod())
    return ctx, kube, effects


def test_without_its_claim_the_shard_gets_no_sidecar_and_says_why() -> None:
    kube = FakeKube(shard())
    ctx = context(kube)
    run(ctx, "root")
    assert containers(kube) == ["kcp"]
    assert condition(kube, "root", "BackedUp") == ("False", "TargetNotFound")
    kube.put(CLAIM)
    run(ctx, "root")
    assert containers(kube) == ["kcp", "backup"]


def test_an_on_demand_backup_is_taken_verified_and_listed_once() -> None:
    sidecar = Sidecar()
    ctx, kube, effects = running(sidecar)
    deployment = dict(kube.objects[("Deployment", "ns", "root-kcp")])
    annotate(ctx, kube, "first")
    run(ctx, "root")
    run(ctx, "root")
    assert sidecar.tools() == [
        "/etcdctl endpoint status",
        "df",
        "mkdir",
        "/etcdctl snapshot save",
        "/etcdutl snapshot status",
        "sha256sum",
        "stat",
        "sh",
    ]
    backups = status(kube, "root")["backups"]
    assert [b["name"] for b in backups] == ["root-20261207T110700Z"]
    assert backups[0] | {"durationSeconds": 0} == {
        "name": "root-20261207T110700Z",
        "time": "2026-12-07T11:07:00Z",
        "trigger": "OnDemand",
        "kcpVersion": "0.34.0",
        "claim": "backups",
        "path": "root/root-20261207T110700Z.db",
        "size": 1323040,
        "sha256": DIGEST,
        "etcdHash": 1532794802,
        "revision": 447,
        "keys": 249,
        "durationSeconds": 0,
    }
    assert status(kube, "root")["backup"]["lastRequest"] == "first"
    assert condition(kube, "root", "BackedUp") == ("True", "Succeeded")
    assert [e.reason for _, e in effects.events if e.reason.startswith("Backup")] == []
    assert [e.reason for _, e in effects.events].count("BackedUp") == 1
    # The request is answered: no second backup, and the shard's Deployment was not touched.
    run(ctx, "root")
    assert len(sidecar.ran) == 8
    assert kube.objects[("Deployment", "ns", "root-kcp")] == deployment
    assert ctx.metrics.backups.labels("OnDemand", "Succeeded")._value.get() == 1


def test_retention_removes_the_oldest_beyond_keep() -> None:
    sidecar = Sidecar()
    ctx, kube, _ = running(sidecar)
    for hour, token in ((11, "a"), (12, "b"), (13, "c")):
        ctx.wall_clock = lambda hour=hour: NOW.replace(hour=hour)
        annotate(ctx, kube, token)
        run(ctx, "root")
        run(ctx, "root")
    names = [b["name"] for b in status(kube, "root")["backups"]]
    assert names == ["root-20261207T130700Z", "root-20261207T120700Z"]
    assert sidecar.ran[-1] == [
        "/busybox", "rm", "-f",
        "/backups/root/root-20261207T110700Z.db", "/backups/root/root-20261207T110700Z.json",
    ]  # fmt: skip


def test_a_full_volume_takes_no_snapshot_and_deletes_nothing() -> None:
    small = (
        "Filesystem 1K-blocks Used Available Use% Mounted on\n/dev/x 2000 1000 1000 50% /backups\n"
    )
    sidecar = Sidecar({"df": Ran(0, small, "")})
    ctx, kube, effects = running(sidecar)
    annotate(ctx, kube, "first")
    run(ctx, "root")
    run(ctx, "root")
    assert sidecar.tools() == ["/etcdctl endpoint status", "df"]
    assert condition(kube, "root", "BackedUp") == ("False", "VolumeFull")
    assert "backups" not in status(kube, "root")
    assert [e.reason for _, e in effects.events].count("BackupFailed") == 1


def test_a_snapshot_that_fails_verification_is_set_aside_not_listed() -> None:
    broken = Ran(1, "", "Error: snapshot file integrity check failed")
    sidecar = Sidecar({"snapshot status": broken})
    ctx, kube, _ = running(sidecar)
    annotate(ctx, kube, "first")
    run(ctx, "root")
    run(ctx, "root")
    assert sidecar.ran[-1][1:3] == ["mv", "/backups/root/root-20261207T110700Z.db"]
    assert condition(kube, "root", "BackedUp") == ("False", "VerificationFailed")
    assert "backups" not in status(kube, "root")


def test_no_backup_while_kcp_is_not_ready() -> None:
    sidecar = Sidecar()
    ctx, kube, _ = running(sidecar)
    watched(ctx, pod(ready=False))
    annotate(ctx, kube, "first")
    run(ctx, "root")
    assert sidecar.ran == []
    watched(ctx, pod())
    run(ctx, "root")
    assert len(sidecar.ran) == 8


def test_a_minor_upgrade_waits_for_the_backup_taken_before_it() -> None:
    sidecar = Sidecar()
    kube = FakeKube(shard_object(**NO_PKI, backup=BACKUP, version="0.27.1"), CLAIM)
    ctx = context(kube)
    kube.containers = sidecar
    ctx.wall_clock = lambda: NOW
    settle(ctx, kube, "root")
    assert status(kube, "root")["version"] == "0.27.1"
    watched(ctx, pod())
    respec(ctx, kube, "root", version="0.28.0")
    run(ctx, "root")
    assert condition(kube, "root", "Progressing") == ("False", "WaitingForBackups")
    template = kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "0.27.1"
    assert "/etcdctl snapshot save" in sidecar.tools()
    run(ctx, "root")  # records the backup: the upgrade goes on
    (entry,) = status(kube, "root")["backups"]
    assert (entry["trigger"], entry["upgradeTo"], entry["kcpVersion"]) == (
        "BeforeUpgrade",
        "0.28",
        "0.27.1",
    )
    run(ctx, "root")
    template = kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "0.28.0"
    assert len(sidecar.tools()) == 8


def test_the_schedule_takes_a_backup_once_its_time_has_come() -> None:
    sidecar = Sidecar()
    kube = FakeKube(shard_object(**NO_PKI, backup={**BACKUP, "schedule": "0 * * * *"}), CLAIM)
    ctx = context(kube)
    kube.containers = sidecar
    ctx.wall_clock = lambda: NOW
    settle(ctx, kube, "root")
    watched(ctx, pod())
    run(ctx, "root")
    assert status(kube, "root")["backup"]["nextScheduledTime"] == "2026-12-07T12:00:00Z"
    assert sidecar.ran == []
    ctx.wall_clock = lambda: NOW.replace(hour=12, minute=0, second=30)
    run(ctx, "root")
    run(ctx, "root")
    (entry,) = status(kube, "root")["backups"]
    assert entry["trigger"] == "Scheduled"
    assert status(kube, "root")["backup"]["nextScheduledTime"] == "2026-12-07T13:00:00Z"
    scrape = parse(generate_latest(ctx.metrics.registry).decode())
    labels = {"namespace": "ns", "shard": "root"}
    assert scrape.value("kcp_shard_operator_backup_last_size_bytes", **labels) == 1323040
    assert scrape.value("kcp_shard_operator_backups_kept", **labels) == 1
    last = datetime.datetime(2026, 12, 7, 12, 0, 30, tzinfo=datetime.UTC).timestamp()
    found = scrape.value("kcp_shard_operator_backup_last_success_timestamp_seconds", **labels)
    assert found == last
    assert (
        scrape.value("kcp_shard_operator_backups_total", trigger="Scheduled", outcome="Succeeded")
        == 1
    )


def test_a_backup_records_the_installation_it_belongs_to() -> None:
    """The root's data UID names the installation: a restore of the backup into another one
    is refused."""
    sidecar = Sidecar()
    kube = FakeKube({**shard(), "status": {"dataUID": "uid-of-the-root"}}, CLAIM)
    ctx = context(kube)
    kube.containers = sidecar
    ctx.wall_clock = lambda: NOW
    settle(ctx, kube, "root")
    watched(ctx, pod())
    annotate(ctx, kube, "first")
    run(ctx, "root")
    run(ctx, "root")
    (entry,) = status(kube, "root")["backups"]
    assert entry["installation"] == "uid-of-the-root"
