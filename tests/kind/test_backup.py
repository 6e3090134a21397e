"""Backups of a shard's embedded etcd on real pods: root and shard-1 with workspaces, then
``spec.backup`` set (the one rollout that adds the backup sidecar, every object kept through
it), then a backup of each taken on demand (``kcp-shard-operator backup``) from the running
shard, verified by the operator and again here (``etcdutl snapshot status`` and sha256 of the
file on the claim), listed in the status and by ``kcp-shard-operator backups``, counted in the
metrics. The shard is untouched by the backup: the same pods, no restart, every object there.
Then the figures: a backup of the root with ``BACKUP_WORKSPACES`` (default 100) more
workspaces, its duration and size. Last, both shards restored from their first backups: the
root by the operator (``kcp-shard-operator restore``: stopped, a Job, started again), shard-1
by hand as docs/backups.md describes (operator and shard stopped, ``etcdutl snapshot restore``
in a Job, the Deployment made again); every object made before them back with its UID and
content, the workspaces made after them gone, both shards Ready and DataVerified on the same
data UID.
Then a schedule (every minute) with ``retention.keep: 1`` on the restored shard-1: a scheduled
backup is taken and the listed one's file is removed from the claim.
The figures go to ``bench/results/backup.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcp_shard_operator.core.backup.spec import BACKUP_ANNOTATION, DEFAULT_BACKUP_IMAGE
from testkit.kcpapi import ShardAPI
from testkit.kcpdata import OWNER, OWNER_ANNOTATION, WORKSPACES_PATH, KcpData
from testkit.kube import Cluster
from testkit.tools import log
from testkit.wait import wait_for
from tests.e2e.pki import Pki, shard_secrets

from .backups import namespace_with_backup_image
from .durability import CLI, OPERATOR_SELECTOR, RESULTS, pki_kubeconfig, shard_apis
from .kind import (
    OLD,
    OPERATOR_NAMESPACE,
    RELEASE,
    condition_of,
    describe_failure,
    operator_metrics,
    pod_ready,
    pods,
    shard_object,
    shard_spec,
    wait_version,
)

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

SHARDS = ("root", "shard-1")
CLAIM = "kcp-backups"
ROLL_TIMEOUT = 600
BACKUP_TIMEOUT = 300
WORKSPACES = int(os.environ.get("BACKUP_WORKSPACES", "100"))


@pytest.fixture
def backup_namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    with namespace_with_backup_image(kind_cluster, "kcp-backup") as namespace:
        yield namespace


def _claim(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def _containers(cluster: Cluster, namespace: str, shard: str) -> list[str]:
    out = cluster.kubectl(
        "get", "deployment", f"{shard}-kcp", "-n", namespace,
        "-o", "jsonpath={.spec.template.spec.containers[*].name}",
    )  # fmt: skip
    return out.split()


def _pod_state(cluster: Cluster, namespace: str, shard: str) -> dict[str, int]:
    """Pod name -> restarts of its containers."""
    return {
        pod["metadata"]["name"]: sum(
            c.get("restartCount", 0) for c in pod["status"].get("containerStatuses") or []
        )
        for pod in pods(cluster, namespace, shard)
    }


def _with_sidecar(cluster: Cluster, namespace: str, shard: str, before: set[str]) -> bool:
    state = _pod_state(cluster, namespace, shard)
    obj = shard_object(cluster, namespace, shard)
    ready = (obj.get("status") or {}).get("readyReplicas") == 1
    return (
        "backup" in _containers(cluster, namespace, shard)
        and len(state) == 1
        and not set(state) & before
        and ready
    )


def _cli(cluster: Cluster, *args: str, timeout: float = BACKUP_TIMEOUT) -> str:
    done = subprocess.run(
        [CLI, *args], env=dict(cluster.env), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _in_sidecar(cluster: Cluster, namespace: str, pod: str, *command: str) -> str:
    return cluster.kubectl("exec", "-n", namespace, pod, "-c", "backup", "--", *command)


def _check_file(cluster: Cluster, namespace: str, shard: str, entry: dict[str, Any]) -> None:
    """The file on the claim is the one the status records: etcdutl reads the same revision
    and keys, sha256sum the same digest."""
    (pod,) = _pod_state(cluster, namespace, shard)
    path = f"/backups/{entry['path']}"
    status = json.loads(
        _in_sidecar(cluster, namespace, pod, "/etcdutl", "snapshot", "status", path, "-w", "json")
    )
    assert (status["revision"], status["totalKey"]) == (entry["revision"], entry["keys"])
    digest = _in_sidecar(cluster, namespace, pod, "/busybox", "sha256sum", path).split()[0]
    assert digest == entry["sha256"]


def _more_workspaces(api: ShardAPI, count: int) -> float:
    """``count`` workspaces made in root (not waited for); seconds it took."""
    started = time.monotonic()
    for index in range(count):
        api.create(
            WORKSPACES_PATH,
            {
                "apiVersion": "tenancy.kcp.io/v1alpha1",
                "kind": "Workspace",
                "metadata": {
                    "name": f"bulk-{index:04d}",
                    "annotations": {OWNER_ANNOTATION: OWNER},
                },
            },
        )
    return time.monotonic() - started


def _scheduled_only(cluster: Cluster, namespace: str, shard: str) -> bool:
    backups = (shard_object(cluster, namespace, shard).get("status") or {}).get("backups") or []
    return len(backups) == 1 and backups[0].get("trigger") == "Scheduled"


def _data_verified(cluster: Cluster, namespace: str, shard: str) -> bool:
    return condition_of(cluster, namespace, shard, "DataVerified").get("status") == "True"


def _restore_job(shard: str, path: str) -> dict[str, Any]:
    """The Job of docs/backups.md, Restore."""
    script = (
        "cd /var/lib/kcp/etcd-server\n"
        f"/busybox sha256sum /backups/{path}\n"
        f"/etcdutl snapshot restore /backups/{path} --data-dir restore.tmp "
        "--name default --initial-cluster default=https://localhost:2380 "
        "--initial-advertise-peer-urls https://localhost:2380\n"
        "/busybox mv member member.before-restore-$(/busybox date +%s)\n"
        "/busybox mv restore.tmp/member member\n"
        "/busybox rmdir restore.tmp\n"
    )
    container = {
        "name": "restore",
        "image": DEFAULT_BACKUP_IMAGE,
        "command": ["/busybox", "sh", "-ec", script],
        "volumeMounts": [
            {"name": "data", "mountPath": "/var/lib/kcp"},
            {"name": "backups", "mountPath": "/backups", "readOnly": True},
        ],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"restore-{shard}"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "fsGroup": 65532},
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "data",
                            "persistentVolumeClaim": {"claimName": f"{shard}-kcp-data"},
                        },
                        {"name": "backups", "persistentVolumeClaim": {"claimName": CLAIM}},
                    ],
                }
            },
        },
    }


def _restore(cluster: Cluster, namespace: str, backups: dict[str, dict[str, Any]]) -> float:
    """Every shard of ``backups`` restored from its backup as docs/backups.md says; seconds
    from stopping the operator to every shard Ready again. The operator runs again after it,
    also when a step failed (the namespace's teardown needs it)."""
    kubectl = cluster.kubectl
    started = time.monotonic()
    operator = ("-n", OPERATOR_NAMESPACE, f"deployment/{RELEASE}")
    kubectl("scale", *operator, "--replicas=0")
    try:
        _restore_stopped(cluster, namespace, backups)
    finally:
        kubectl("scale", *operator, "--replicas=1")
    # The Shards' statuses still say Ready from before: wait for the new pods themselves.
    wait_for(
        lambda: all(_serving(cluster, namespace, shard) for shard in backups),
        ROLL_TIMEOUT, "a ready pod of each restored shard", interval=2,
    )  # fmt: skip
    wait_version(cluster, namespace, tuple(backups), OLD, ROLL_TIMEOUT)
    return time.monotonic() - started


def _serving(cluster: Cluster, namespace: str, shard: str) -> bool:
    found = pods(cluster, namespace, shard)
    return bool(found) and all(pod_ready(pod) for pod in found)


def _restore_stopped(cluster: Cluster, namespace: str, backups: dict[str, dict[str, Any]]) -> None:
    """The restore's steps while the operator is scaled to zero."""
    kubectl = cluster.kubectl
    # Its pod goes first: until then it would bring the shards' replicas back.
    wait_for(
        lambda: not kubectl("get", "pods", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_SELECTOR,
                            "-o", "name").strip(),
        120, "the operator's pod gone", interval=2,
    )  # fmt: skip
    for shard in backups:
        kubectl("scale", "-n", namespace, f"deployment/{shard}-kcp", "--replicas=0")
    wait_for(
        lambda: not any(pods(cluster, namespace, shard) for shard in backups),
        180, "the shards' pods gone", interval=2,
    )  # fmt: skip
    jobs = [_restore_job(shard, entry["path"]) for shard, entry in backups.items()]
    kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all(jobs))
    for shard in backups:
        kubectl(
            "wait", "-n", namespace, "--for=condition=complete", f"job/restore-{shard}",
            "--timeout=300s", timeout=320,
        )  # fmt: skip
        log(kubectl("logs", "-n", namespace, f"job/restore-{shard}"))
        kubectl("delete", "-n", namespace, "deployment", f"{shard}-kcp")


def test_a_backup_of_a_running_shard_is_verified_and_leaves_it_untouched(
    kind_cluster: Cluster, backup_namespace: str, tmp_path: Path
) -> None:
    ns, kubectl = backup_namespace, kind_cluster.kubectl
    pki = Pki.create(tmp_path / "pki")
    secrets = shard_secrets(pki, ns, "root", ["shard-1"])
    kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all([*secrets, _claim(ns)]))
    shards = [
        shard_spec("root", ns, OLD, f"v{OLD}"),
        shard_spec("shard-1", ns, OLD, f"v{OLD}", "root"),
    ]
    kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(shards))
    figures: dict[str, Any] = {}
    try:
        wait_version(kind_cluster, ns, SHARDS, OLD, ROLL_TIMEOUT)
        with shard_apis(kind_cluster, ns, pki_kubeconfig(pki, tmp_path), SHARDS) as apis:
            data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="backup")

            # spec.backup: the one rollout that adds the sidecar; every object survives it.
            before = {name for shard in SHARDS for name in _pod_state(kind_cluster, ns, shard)}
            started = time.monotonic()
            backup = {"backup": {"claimRef": {"name": CLAIM}, "retention": {"keep": 3}}}
            for shard in SHARDS:
                kubectl("patch", "shard", shard, "-n", ns, "--type=merge", "-p",
                        json.dumps({"spec": backup}))  # fmt: skip
            wait_for(
                lambda: all(_with_sidecar(kind_cluster, ns, s, before) for s in SHARDS),
                ROLL_TIMEOUT, "both shards rolled out with the backup sidecar", interval=3,
            )  # fmt: skip
            wait_version(kind_cluster, ns, SHARDS, OLD, ROLL_TIMEOUT)
            figures["sidecar rollout seconds"] = round(time.monotonic() - started, 1)
            assert data.verify(apis, "the backup sidecar added") == []

            # A backup of each, on demand, from the running shard.
            running = {shard: _pod_state(kind_cluster, ns, shard) for shard in SHARDS}
            for shard in SHARDS:
                started = time.monotonic()
                printed = _cli(kind_cluster, "backup", shard, "-n", ns)
                took = time.monotonic() - started
                obj = shard_object(kind_cluster, ns, shard)
                status = obj["status"]
                (entry,) = status["backups"]
                log(f"backup of {shard}: {entry} ({took:.1f}s through the CLI)\n{printed}")
                assert entry["name"] in printed
                assert entry["trigger"] == "OnDemand"
                assert entry["kcpVersion"] == OLD
                assert entry["dataUID"] == status["dataUID"]
                assert entry["keys"] > 0
                assert entry["size"] > 0
                assert entry["path"] == f"{shard}/{entry['name']}.db"
                backed_up = condition_of(kind_cluster, ns, shard, "BackedUp")
                assert (backed_up["status"], backed_up["reason"]) == ("True", "Succeeded")
                assert (
                    status["backup"]["lastRequest"]
                    == (obj["metadata"]["annotations"][BACKUP_ANNOTATION])
                )
                _check_file(kind_cluster, ns, shard, entry)
                figures[f"{shard} snapshot"] = {
                    "seconds": entry["durationSeconds"],
                    "bytes": entry["size"],
                    "keys": entry["keys"],
                    "cli seconds": round(took, 1),
                }
            # The shards were not touched: the same pods, no restart, every object there.
            assert {s: _pod_state(kind_cluster, ns, s) for s in SHARDS} == running
            assert data.verify(apis, "a backup of each shard") == []

            listed = _cli(kind_cluster, "backups", "-n", ns)
            log(f"kcp-shard-operator backups -n {ns}:\n{listed}")
            assert all(f"\n{shard} " in "\n" + listed for shard in SHARDS)

            scrape = operator_metrics(kind_cluster)
            for shard in SHARDS:
                labels = {"namespace": ns, "shard": shard}
                last = scrape.value(
                    "kcp_shard_operator_backup_last_success_timestamp_seconds", **labels
                )
                assert last is not None
                assert abs(last - time.time()) < 600
                size = scrape.value("kcp_shard_operator_backup_last_size_bytes", **labels)
                assert size == figures[f"{shard} snapshot"]["bytes"]
            succeeded = scrape.total(
                "kcp_shard_operator_backups_total", trigger="OnDemand", outcome="Succeeded"
            )
            assert succeeded >= len(SHARDS)

            first = {
                shard: shard_object(kind_cluster, ns, shard)["status"]["backups"][0]
                for shard in SHARDS
            }
            data_uids = {
                shard: shard_object(kind_cluster, ns, shard)["status"]["dataUID"]
                for shard in SHARDS
            }

            # Figures: the root with more workspaces.
            made = _more_workspaces(apis["root"], WORKSPACES)
            printed = _cli(kind_cluster, "backup", "root", "-n", ns)
            entries = shard_object(kind_cluster, ns, "root")["status"]["backups"]
            assert len(entries) == 2
            figures[f"root snapshot with {WORKSPACES} more workspaces"] = {
                "seconds": entries[0]["durationSeconds"],
                "bytes": entries[0]["size"],
                "keys": entries[0]["keys"],
                "workspaces made in seconds": round(made, 1),
            }
            _check_file(kind_cluster, ns, "root", entries[0])
            assert {s: _pod_state(kind_cluster, ns, s) for s in SHARDS} == running
            assert data.verify(apis, "a backup with more workspaces") == []

            # The restore of both shards from their first backups: the root by the operator
            # (kcp-shard-operator restore), shard-1 by hand as docs/backups.md says.
            started = time.monotonic()
            before = set(_pod_state(kind_cluster, ns, "root"))
            printed = _cli(kind_cluster, "restore", "root", "-n", ns,
                           "--backup", first["root"]["name"], timeout=ROLL_TIMEOUT)  # fmt: skip
            log(f"kcp-shard-operator restore root: {printed}")
            wait_for(
                lambda: _serving(kind_cluster, ns, "root")
                and not set(_pod_state(kind_cluster, ns, "root")) & before,
                ROLL_TIMEOUT, "the restored root's new pod ready", interval=2,
            )  # fmt: skip
            figures["restore seconds (root, kcp-shard-operator restore)"] = round(
                time.monotonic() - started, 1
            )
            restored = shard_object(kind_cluster, ns, "root")["status"]["restore"]
            assert (restored["phase"], restored["backup"]) == ("Done", first["root"]["name"])
            assert condition_of(kind_cluster, ns, "root", "Restored")["status"] == "True"
            figures["restore seconds (shard-1 by hand, operator stopped to Ready)"] = round(
                _restore(kind_cluster, ns, {"shard-1": first["shard-1"]}), 1
            )
            assert data.verify(apis, "both shards restored from their first backups") == []
            assert apis["root"].get(f"{WORKSPACES_PATH}/bulk-0000") is None
            for shard in SHARDS:
                wait_for(
                    partial(_data_verified, kind_cluster, ns, shard),
                    120, f"{shard} DataVerified after the restore", interval=3,
                )  # fmt: skip
                verified = condition_of(kind_cluster, ns, shard, "DataVerified")
                assert verified["status"] == "True", verified
                status = shard_object(kind_cluster, ns, shard)["status"]
                assert status["dataUID"] == data_uids[shard] == first[shard]["dataUID"]

            # A schedule on the restored shard-1, with retention keeping one backup: the
            # scheduled backup replaces the listed one, whose file goes from the claim.
            running = {"shard-1": _pod_state(kind_cluster, ns, "shard-1")}
            scheduled = {"backup": {**backup["backup"], "schedule": "* * * * *",
                                    "retention": {"keep": 1}}}  # fmt: skip
            kubectl("patch", "shard", "shard-1", "-n", ns, "--type=merge", "-p",
                    json.dumps({"spec": scheduled}))  # fmt: skip
            wait_for(
                partial(_scheduled_only, kind_cluster, ns, "shard-1"),
                BACKUP_TIMEOUT, "a scheduled backup of shard-1, the only one listed", interval=3,
            )  # fmt: skip
            (latest,) = shard_object(kind_cluster, ns, "shard-1")["status"]["backups"]
            _check_file(kind_cluster, ns, "shard-1", latest)
            (pod,) = _pod_state(kind_cluster, ns, "shard-1")
            listed = _in_sidecar(kind_cluster, ns, pod, "/busybox", "ls", "/backups/shard-1")
            log(f"/backups/shard-1 after retention: {listed.split()}")
            assert f"{latest['name']}.db" in listed.split()
            assert f"{first['shard-1']['name']}.db" not in listed.split()
            assert {"shard-1": _pod_state(kind_cluster, ns, "shard-1")} == running
            assert data.verify(apis, "a scheduled backup and retention") == []
        log(f"backup figures: {json.dumps(figures, indent=1)}")
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "backup.json").write_text(json.dumps(figures, indent=1) + "\n")
    except BaseException:
        print(describe_failure(kind_cluster, ns))
        raise
