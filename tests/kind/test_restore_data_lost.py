"""A root whose claim was lost, restored from its scheduled backup on real pods.

A root (backed up every minute, ``retention.keep: 3``), shard-1 and a FrontProxy, on the
operator's own PKI; workspaces and objects on both shards, some made through the front-proxy,
and ``BACKUP_WORKSPACES`` (default 100) more workspaces in root. Once a Scheduled backup
taken after all of them is listed, the root's claim is deleted and its pod with it: the
operator makes the claim again, empty, and kcp starts on an empty etcd (the root's
workspaces gone): ``DataLost``, and no backup of the empty etcd is taken (``BackedUp=False
DataLost``), so none of the listed ones is deleted. Then ``kcp-shard-operator restore``
from the newest listed backup: Stopping, Restoring (the Job), Starting, Done; the root
Ready, ``DataLost`` cleared by itself (the recorded data UID is the backup's), shard-1
``DataVerified=True`` (the root lists it again), every object back with its UID and content,
read through the front-proxy too. The timeline and the figures (sizes, the restore from the
request to Ready and DataVerified, the Job alone) are printed and written to
``bench/results/restore-data-lost-<workspaces>.json``.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcp_shard_operator.core.backup.restore import Phase
from testkit.kcpapi import ShardAPI, UnreachableError
from testkit.kcpdata import WORKSPACES_PATH, KcpData
from testkit.kube import Cluster, shard_ready
from testkit.tools import log
from testkit.wait import wait_for

from .backups import backed_up_root, kcp_spec, namespace_with_backup_image, restore_printed
from .durability import RESULTS, admin_kubeconfig, front_proxy_kubeconfig, shard_apis
from .kind import (
    FRONT_PROXY,
    OLD,
    condition_of,
    describe_failure,
    kcp_object,
    pods,
    shard_object,
)
from .test_backup import CLAIM, WORKSPACES, _claim, _in_sidecar, _more_workspaces

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

SHARDS = ("root", "shard-1")
START_TIMEOUT = 600
LOST_TIMEOUT = 300
RESTORE_TIMEOUT = 900
KEEP = 3


@pytest.fixture
def restore_namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    with namespace_with_backup_image(kind_cluster, "kcp-restore") as namespace:
        yield namespace


def _objects() -> list[dict[str, Any]]:
    """root backed up every minute, shard-1, FrontProxy ``kcp``: the operator's PKI."""
    root = backed_up_root(CLAIM, {"schedule": "* * * * *", "retention": {"keep": KEEP}})
    specs: list[tuple[str, str, dict[str, Any]]] = [
        ("Shard", "shard-1", {"rootShardRef": {"name": "root"}}),
        ("FrontProxy", FRONT_PROXY, {"rootShardRef": {"name": "root"}, "replicas": 1}),
    ]
    return [root] + [
        {"apiVersion": "kcpshard.dev/v1alpha1", "kind": kind, "metadata": {"name": name},
         "spec": {**kcp_spec(), **spec}}
        for kind, name, spec in specs
    ]  # fmt: skip


class Timeline:
    """What happened, in seconds from the claim's deletion; printed at the end."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.events: list[tuple[float, str]] = []

    def mark(self, what: str) -> float:
        at = time.monotonic() - self.started
        self.events.append((at, what))
        log(f"[{at:7.1f}s] {what}")
        return at

    def text(self) -> str:
        return "\n".join(f"{at:8.1f} s  {what}" for at, what in self.events)


def _backups(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return list((shard_object(cluster, ns, "root").get("status") or {}).get("backups") or [])


def _parse(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _scheduled_after(cluster: Cluster, ns: str, moment: datetime.datetime) -> bool:
    return any(
        entry.get("trigger") == "Scheduled" and _parse(entry["time"]) >= moment
        for entry in _backups(cluster, ns)
    )


def _workspace_uids(root: ShardAPI) -> dict[str, str]:
    """The root's workspaces by name: their UIDs (read again while the forward reconnects)."""

    def listed() -> dict[str, Any] | None:
        try:
            return root.get(WORKSPACES_PATH) or {"items": []}
        except UnreachableError:
            return None

    found = wait_for(listed, 60, "the root's workspaces listed", interval=2)
    return {item["metadata"]["name"]: item["metadata"]["uid"] for item in found["items"]}


def _claim_uid(cluster: Cluster, ns: str) -> str | None:
    out = subprocess.run(
        ["kubectl", "get", "pvc", "root-kcp-data", "-n", ns, "-o", "jsonpath={.metadata.uid}"],
        env=dict(cluster.env), capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _reason(cluster: Cluster, ns: str, shard: str, type_: str) -> str:
    return str(condition_of(cluster, ns, shard, type_).get("reason", ""))


def _verified(cluster: Cluster, ns: str, shard: str) -> bool:
    return condition_of(cluster, ns, shard, "DataVerified").get("status") == "True"


def _restore(cluster: Cluster, ns: str, backup: str, timeline: Timeline) -> float:
    """``kcp-shard-operator restore`` of root, the phases it prints marked as they come; when
    it was requested (on the timeline)."""
    requested = timeline.mark(
        f"restore requested: kcp-shard-operator restore root --backup {backup}"
    )
    args = ["root", "-n", ns, "--backup", backup, "--timeout", str(RESTORE_TIMEOUT)]
    printed = restore_printed(cluster, args, timeline, RESTORE_TIMEOUT + 30)
    phases = [line.split("  root: ", 1)[1].split(":", 1)[0] for line in printed]
    order = [phase.value for phase in Phase]
    assert phases == sorted(set(phases), key=order.index), printed
    assert phases[-1] == "Done", printed
    timeline.mark("kcp-shard-operator restore returned")
    return requested


def _job_seconds(cluster: Cluster, ns: str) -> float:
    """The restore Job's run, from its start to its completion (to the second)."""
    name = shard_object(cluster, ns, "root")["status"]["restore"]["job"]
    job = kcp_object(cluster, ns, "job", name)
    status = job["status"]
    return (_parse(status["completionTime"]) - _parse(status["startTime"])).total_seconds()


def test_a_root_on_an_empty_claim_is_restored_from_its_scheduled_backup(
    kind_cluster: Cluster, restore_namespace: str, tmp_path: Path
) -> None:
    ns, kubectl = restore_namespace, kind_cluster.kubectl
    kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all([_claim(ns), *_objects()]))
    figures: dict[str, Any] = {"workspaces": WORKSPACES}
    try:
        wait_for(
            lambda: all(shard_ready(shard_object(kind_cluster, ns, s), OLD) for s in SHARDS)
            and kcp_object(kind_cluster, ns, "frontproxy", FRONT_PROXY)
            .get("status", {}).get("phase") == "Ready",
            START_TIMEOUT, "root, shard-1 and the FrontProxy Ready", interval=3,
        )  # fmt: skip
        front = ("kcp-front-proxy", front_proxy_kubeconfig(kind_cluster, ns, tmp_path))
        root_admin = admin_kubeconfig(kind_cluster, ns, "root", tmp_path)
        with shard_apis(kind_cluster, ns, root_admin, SHARDS, front) as apis:
            data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="lost")
            figures["workspaces made in seconds"] = round(
                _more_workspaces(apis["root"], WORKSPACES), 1
            )
            made = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
            uids = _workspace_uids(apis["root"])
            assert len(uids) >= WORKSPACES
            recorded = shard_object(kind_cluster, ns, "root")["status"]["dataUID"]
            wait_for(
                lambda: _scheduled_after(kind_cluster, ns, made),
                180, "a Scheduled backup of root taken after the data was made", interval=3,
            )  # fmt: skip
            log(
                f"root's backups: {[(b['name'], b['trigger']) for b in _backups(kind_cluster, ns)]}"
            )

            # The claim lost: deleted with its pod (the claim's protection holds it until
            # the pod is gone), made again by the operator, empty.
            timeline = Timeline()
            deleted = datetime.datetime.now(datetime.UTC)
            claim_uid = _claim_uid(kind_cluster, ns)
            kubectl("delete", "pvc", "root-kcp-data", "-n", ns, "--wait=false")
            for pod in pods(kind_cluster, ns, "root", "kcp"):
                kubectl("delete", "pod", pod["metadata"]["name"], "-n", ns, "--wait=false")
            timeline.mark("claim root-kcp-data and the root's pod deleted")
            wait_for(
                lambda: _claim_uid(kind_cluster, ns) not in (None, claim_uid),
                LOST_TIMEOUT, "the claim made again", interval=1,
            )  # fmt: skip
            timeline.mark("claim root-kcp-data made again by the operator (empty)")
            wait_for(
                lambda: _reason(kind_cluster, ns, "root", "DataVerified") == "DataLost",
                LOST_TIMEOUT, "root DataLost", interval=2,
            )  # fmt: skip
            timeline.mark("root DataLost (DataVerified=False, Degraded=True, Ready=False)")
            wait_for(
                lambda: _reason(kind_cluster, ns, "shard-1", "DataVerified") == "RootDataLost",
                LOST_TIMEOUT, "shard-1 RootDataLost", interval=2,
            )  # fmt: skip
            timeline.mark("shard-1 RootDataLost (the empty root does not list it)")
            assert shard_object(kind_cluster, ns, "root")["status"]["dataUID"] == recorded
            assert not set(_workspace_uids(apis["root"])) & set(uids), "the root is empty"
            # The next scheduled backup is refused: the empty etcd is not backed up.
            wait_for(
                lambda: _reason(kind_cluster, ns, "root", "BackedUp") == "DataLost",
                120, "the schedule's backup refused while DataLost", interval=2,
            )  # fmt: skip
            timeline.mark("scheduled backup refused: BackedUp=False DataLost")
            listed = _backups(kind_cluster, ns)
            assert all(entry["dataUID"] == recorded for entry in listed), listed
            newest = listed[0]
            assert made <= _parse(newest["time"]) < deleted, "no backup of the empty etcd"
            (pod,) = (p["metadata"]["name"] for p in pods(kind_cluster, ns, "root", "kcp"))
            path = f"/backups/{newest['path'].removesuffix('.db')}.json"
            described = json.loads(_in_sidecar(kind_cluster, ns, pod, "/busybox", "cat", path))
            assert described["backup"] == newest, "the claim's manifest of the backup"
            assert described["shard"]["name"] == "root"
            figures["backup"] = {
                key: newest[key] for key in ("name", "size", "keys", "durationSeconds")
            }

            requested = _restore(kind_cluster, ns, newest["name"], timeline)
            figures["restore request to Done (kcp-shard-operator restore) seconds"] = round(
                timeline.events[-1][0] - requested, 1
            )
            figures["restore Job seconds"] = _job_seconds(kind_cluster, ns)
            wait_for(
                lambda: shard_ready(shard_object(kind_cluster, ns, "root"), OLD),
                START_TIMEOUT, "root Ready after the restore", interval=1,
            )  # fmt: skip
            ready = timeline.mark("root Ready")
            wait_for(
                lambda: _verified(kind_cluster, ns, "root"),
                180, "root DataVerified after the restore", interval=1,
            )  # fmt: skip
            verified = timeline.mark("root DataVerified=True (DataLost cleared)")
            wait_for(
                lambda: _verified(kind_cluster, ns, "shard-1"),
                180, "shard-1 DataVerified after the restore", interval=1,
            )  # fmt: skip
            timeline.mark("shard-1 DataVerified=True (the root lists it)")
            figures["restore request to root Ready seconds"] = round(ready - requested, 1)
            figures["restore request to root DataVerified seconds"] = round(verified - requested, 1)

            status = shard_object(kind_cluster, ns, "root")["status"]
            assert status["dataUID"] == recorded == newest["dataUID"]
            assert (status["restore"]["phase"], status["restore"]["backup"]) == (
                "Done", newest["name"]
            )  # fmt: skip
            assert condition_of(kind_cluster, ns, "root", "Degraded")["status"] == "False"
            assert data.verify(apis, "root restored from its scheduled backup") == []
            assert _workspace_uids(apis["root"]) == uids
        log(f"timeline:\n{timeline.text()}")
        figures["timeline"] = [[round(at, 1), what] for at, what in timeline.events]
        log(f"restore figures: {json.dumps(figures, indent=1)}")
        RESULTS.mkdir(parents=True, exist_ok=True)
        out = RESULTS / f"restore-data-lost-{WORKSPACES}.json"
        out.write_text(json.dumps(figures, indent=1) + "\n")
    except BaseException:
        print(describe_failure(kind_cluster, ns))
        raise
