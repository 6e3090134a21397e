"""A Shard made again after it was deleted with its status, asked to restore a backup its
status does not list: the manifest read through its backup sidecar, checked, imported into
status.backups (marked, never removed by retention) and restored as in place; a manifest
missing or bad is refused naming it, nothing touched."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kcp_shard_operator.core.api.meta import VERSION_ANNOTATION
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.manifest import manifest
from kcp_shard_operator.core.backup.restore import RESTORE_ANNOTATION
from kcp_shard_operator.core.shard.meta import selector_labels
from kcp_shard_operator.kube.client import Ran, UnreachableError
from tests.conftest import NO_PKI, make, non_root_object, shard_object
from tests.fake_kube import SECRETS, Effects, FakeKube, context, run, settle, watched
from tests.unit.backup.test_pass_backup import BACKUP, CLAIM
from tests.unit.backup.test_pass_restore import ENTRY
from tests.unit.controller.test_pass import condition, status

MANIFEST_PATH = "/backups/root/root-20261207T110700Z.json"
TAKEN = {**ENTRY, "revision": 520, "keys": 271, "installation": "uid-of-the-backup"}


@dataclass
class Claim:
    """The backup claim as the sidecar's ``cat`` reads it: path -> content."""

    files: dict[str, str] = field(default_factory=dict)
    ran: list[tuple[str, list[str]]] = field(default_factory=list)

    def __call__(self, namespace: str, pod: str, container: str, command: list[str]) -> Ran:
        assert (namespace, container) == ("ns", "backup")
        self.ran.append((pod, command))
        assert command[:2] == ["/busybox", "cat"], command
        found = self.files.get(command[2])
        if found is None:
            return Ran(1, "", f"cat: can't open '{command[2]}': No such file or directory\n")
        return Ran(0, found, "")


def pod_of(obj: JSON) -> JSON:
    name = obj["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-pod",
            "namespace": "ns",
            "labels": selector_labels(make(obj)),
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "kcp", "ready": True, "state": {"running": {}}},
                {"name": "backup", "ready": True, "state": {"running": {}}},
            ],
        },
    }


def made_again(
    obj: JSON, claim: Claim, *others: JSON, backup: str = ENTRY["name"]
) -> tuple[Any, FakeKube, Effects]:
    """``obj`` made with the restore annotation, and status only of its new empty data, beside
    ``others`` (Shards among them settled first): the first pass renders it, then its pod runs
    (with the backup sidecar)."""
    obj["metadata"]["annotations"] = {RESTORE_ANNOTATION: backup}
    kube = FakeKube({**obj, "status": {"dataUID": "uid-of-the-empty-etcd"}}, CLAIM, *others)
    kube.containers = claim
    effects = Effects()
    ctx = context(kube, effects)
    name = obj["metadata"]["name"]
    settle(ctx, kube, *[other["metadata"]["name"] for other in others if other["kind"] == "Shard"])
    settle(ctx, kube, name)
    # No pod yet: nothing read, nothing answered.
    assert claim.ran == []
    assert "restore" not in status(kube, name)
    watched(ctx, pod_of(obj))
    run(ctx, name)
    return ctx, kube, effects


def deployment(kube: FakeKube, name: str) -> JSON:
    found: JSON = kube.objects[("Deployment", "ns", f"{name}-kcp")]
    return found


def jobs(kube: FakeKube) -> list[JSON]:
    return [obj for key, obj in kube.objects.items() if key[0] == "Job"]


def test_a_backup_of_root_seeds_a_new_shard_root_2_and_is_restored_as_in_place() -> None:
    claim = Claim({MANIFEST_PATH: json.dumps(manifest(TAKEN, "root", "ns", "uid-old-root"))})
    obj = shard_object("root-2", **NO_PKI, backup=BACKUP, version="0.27.1")
    ctx, kube, effects = made_again(obj, claim)
    assert claim.ran == [("root-2-pod", ["/busybox", "cat", MANIFEST_PATH])]
    (imported,) = status(kube, "root-2")["backups"]
    assert imported == {
        **TAKEN,
        "claim": "backups",
        "importedFrom": {"name": "root", "namespace": "ns", "uid": "uid-old-root"},
    }
    record = status(kube, "root-2")["restore"]
    assert record["phase"] == "Stopping"
    assert record["message"].startswith(
        "backup root-20261207T110700Z imported from its manifest on PersistentVolumeClaim "
        "backups (taken of Shard ns/root); restoring backup"
    )
    run(ctx, "root-2")
    assert deployment(kube, "root-2")["spec"]["replicas"] == 0
    watched(ctx, kube.roll_out("ns", "root-2-kcp"))
    ctx.store.deleted("Pod", "ns", "root-2-pod")
    run(ctx, "root-2")
    (job,) = jobs(kube)
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert f"{'ab' * 32}  /backups/root/root-20261207T110700Z.db" in script
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert [v["persistentVolumeClaim"]["claimName"] for v in volumes] == [
        "root-2-kcp-data",
        "backups",
    ]
    kube.put({**job, "status": {"succeeded": 1}})
    run(ctx, "root-2")
    assert status(kube, "root-2")["dataUID"] == "uid-of-the-backup"
    run(ctx, "root-2")
    assert deployment(kube, "root-2")["spec"]["replicas"] == 1
    template = deployment(kube, "root-2")["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "0.27.1"
    watched(ctx, kube.roll_out("ns", "root-2-kcp"))
    run(ctx, "root-2")
    assert condition(kube, "root-2", "Restored") == ("True", "Done")
    assert "Restored" in [event.reason for _, event in effects.events]
    # Still listed, still marked: retention of root-2 never removes root's files.
    (kept,) = status(kube, "root-2")["backups"]
    assert kept["importedFrom"]["name"] == "root"
    # Read once: the answered annotation reads nothing again.
    run(ctx, "root-2")
    assert len(claim.ran) == 1


def refused_untouched(kube: FakeKube, name: str, before: JSON) -> str:
    """The refusal's message, once nothing was stopped, made or listed."""
    assert condition(kube, name, "Restored") == ("False", "RestoreRefused")
    assert deployment(kube, name) == before
    assert jobs(kube) == []
    assert "backups" not in status(kube, name)
    return str(status(kube, name)["restore"]["message"])


def test_a_missing_manifest_is_refused_naming_it_and_nothing_is_touched() -> None:
    claim = Claim()
    obj = shard_object(**NO_PKI, backup=BACKUP, version="0.27.1")
    ctx, kube, _ = made_again(obj, claim)
    before = dict(deployment(kube, "root"))
    run(ctx, "root")
    message = refused_untouched(kube, "root", before)
    assert (
        "backup 'root-20261207T110700Z' is not in status.backups and its manifest "
        "root/root-20261207T110700Z.json on PersistentVolumeClaim backups could not be read "
        "(cat: can't open" in message
    )
    assert len(claim.ran) == 1


def test_a_bad_manifest_is_refused_naming_the_field_and_nothing_is_touched() -> None:
    spoiled = manifest({**TAKEN, "sha256": "not-a-digest"}, "root", "ns", "uid-old-root")
    claim = Claim({MANIFEST_PATH: json.dumps(spoiled)})
    obj = shard_object(**NO_PKI, backup=BACKUP, version="0.27.1")
    ctx, kube, _ = made_again(obj, claim)
    before = dict(deployment(kube, "root"))
    run(ctx, "root")
    message = refused_untouched(kube, "root", before)
    assert message == (
        "the manifest root/root-20261207T110700Z.json on PersistentVolumeClaim backups of "
        "backup 'root-20261207T110700Z' cannot be used: backup.sha256 'not-a-digest' is not 64 "
        "hex digits; nothing done"
    )


def test_an_imported_backup_of_another_kcp_version_is_refused_unlisted() -> None:
    claim = Claim({MANIFEST_PATH: json.dumps(manifest(TAKEN, "root", "ns", "uid-old-root"))})
    obj = shard_object(**NO_PKI, backup=BACKUP, version="0.28.0")
    ctx, kube, _ = made_again(obj, claim)
    before = dict(deployment(kube, "root"))
    run(ctx, "root")
    assert "set spec.version (and spec.image.tag, if set) to 0.27.1" in (
        refused_untouched(kube, "root", before)
    )


def test_a_new_shard_is_refused_a_backup_of_another_installation_than_its_roots() -> None:
    taken = {**TAKEN, "name": "shard-1-20261207T110700Z", "path": "shard-1/x.db"}
    path = "/backups/shard-1/shard-1-20261207T110700Z.json"
    claim = Claim({path: json.dumps(manifest(taken, "shard-1", "ns", "uid-old-shard-1"))})
    root = shard_object(**NO_PKI, version="0.27.1")
    obj = non_root_object(**NO_PKI, backup=BACKUP, version="0.27.1")
    ctx, kube, _ = made_again(
        obj,
        claim,
        {**root, "status": {"dataUID": "uid-of-another-root"}},
        *SECRETS,
        backup=taken["name"],
    )
    before = dict(deployment(kube, "shard-1"))
    run(ctx, "shard-1")
    assert "is of another installation (its root shard's data UID was uid-of-the-backup" in (
        refused_untouched(kube, "shard-1", before)
    )


@dataclass
class Unreachable(Claim):
    """The claim behind an exec that gets no answer the first time."""

    failures: int = 1

    def __call__(self, namespace: str, pod: str, container: str, command: list[str]) -> Ran:
        if self.failures:
            self.failures -= 1
            raise UnreachableError("https://api:6443", "connection reset")
        return super().__call__(namespace, pod, container, command)


def test_an_exec_without_an_answer_answers_nothing_and_the_next_pass_reads_again() -> None:
    claim = Unreachable({MANIFEST_PATH: json.dumps(manifest(TAKEN, "root", "ns", "uid-old-root"))})
    obj = shard_object(**NO_PKI, backup=BACKUP, version="0.27.1")
    ctx, kube, _ = made_again(obj, claim)
    assert "restore" not in status(kube, "root")
    assert deployment(kube, "root")["spec"]["replicas"] == 1
    run(ctx, "root")
    assert status(kube, "root")["restore"]["phase"] == "Stopping"
    assert status(kube, "root")["backups"][0]["importedFrom"]["uid"] == "uid-old-root"
