"""Backups into a real S3-compatible store on kind, and a restore from one.

SeaweedFS (``weed server -s3``, Apache-2.0, built from its Go module by ``hack/image.sh s3``)
runs as a Deployment in the test's namespace, with an S3 identity whose keys the Shards'
Secret holds. root (with a FrontProxy, on the operator's own PKI) and shard-1, both with
``spec.backup.s3`` from the start; workspaces and objects on both, and ``BACKUP_WORKSPACES``
(default 100) more workspaces in root. A backup of each is taken on demand
(``kcp-shard-operator backup``) from the running shard, verified, uploaded; the objects are
then listed and stat'ed through the S3 API (``s3copy list``/``stat`` in the
sidecar): the key and the sha256 the status records, with the manifest beside it. A workspace
is made after the backup; the root is restored from its object (``kcp-shard-operator
restore``: the Job downloads it, checks its sha256, restores): every object made before it is
back with its UID and content (every workspace of root with its UID), the later workspace
gone, root Ready and DataVerified=True.
Last, spec.backup.s3.bucket names a bucket that does not exist: the backup asked for fails
with ``BackedUp=False TargetNotFound`` naming the field, nothing in the real bucket is deleted,
the status keeps its backups and the shard's pod runs on untouched. The figures (upload and
download seconds, sizes) go to ``bench/results/backup-s3.json``.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcp_shard_operator.core.backup.spec import DEFAULT_BACKUP_IMAGE
from testkit.kcpapi import ShardAPI
from testkit.kcpdata import OWNER, OWNER_ANNOTATION, WORKSPACES_PATH, KcpData
from testkit.kube import Cluster, shard_ready
from testkit.tools import HACK, log, pinned_version, run_visible
from testkit.wait import wait_for

from .durability import CLI, RESULTS, admin_kubeconfig, front_proxy_kubeconfig, shard_apis
from .kind import (
    FRONT_PROXY,
    OLD,
    condition_of,
    describe_failure,
    kcp_image,
    kcp_namespace,
    kcp_object,
    pods,
    shard_object,
)
from .test_backup import WORKSPACES, _more_workspaces

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

SHARDS = ("root", "shard-1")
BUCKET = "kcp-backups"
KEYS_SECRET = "s3-keys"
ACCESS_KEY = "kcp-backup"
SECRET_KEY = "kcp-backup-secret-key-for-the-test"
STORE = "seaweedfs"
BACKUP_IMAGE = f"{DEFAULT_BACKUP_IMAGE}-s3"
"""The backup image (hack/image.sh backup) under a tag of this test's own: other worktrees
build the default tag from their sources at the same time."""
START_TIMEOUT = 600
RESTORE_TIMEOUT = 900
BACKUP_TIMEOUT = 300


def _store_image() -> str:
    """The image of ``hack/image.sh s3`` (not among ``image.sh names``: no other test loads it)."""
    commit = pinned_version("SEAWEEDFS_VERSION").rsplit("-", 1)[-1]
    return f"kcp-shard-operator-kind/seaweedfs:{commit}"


@pytest.fixture
def s3_namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    started = time.monotonic()
    run_visible([str(HACK / "image.sh"), "s3"])
    run_visible(
        [str(HACK / "image.sh"), "backup"], env={**os.environ, "BACKUP_IMAGE": BACKUP_IMAGE}
    )
    log(f"weed and backup images built in {time.monotonic() - started:.0f}s")
    name = kind_cluster.kubectl("config", "view", "-o", "jsonpath={.contexts[0].context.cluster}")
    node = name.removeprefix("kind-")
    run_visible([str(HACK / "kind.sh"), "load", node, BACKUP_IMAGE, _store_image()])
    with kcp_namespace(kind_cluster, "kcp-s3") as namespace:
        yield namespace


def _store(namespace: str) -> list[dict[str, Any]]:
    """SeaweedFS: master, volume server, filer and S3 gateway in one pod; one S3 identity."""
    identities = {
        "identities": [
            {
                "name": "kcp-backup",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    labels = {"app.kubernetes.io/name": STORE}
    args = [
        "-logtostderr", "server", "-dir=/data", "-ip.bind=0.0.0.0", "-s3",
        "-s3.config=/etc/seaweedfs/s3.json", "-s3.port.iceberg=0", "-s3.port.lance=0",
        "-master.volumeSizeLimitMB=64", "-volume.max=8",
    ]  # fmt: skip
    container = {
        "name": "weed",
        "image": _store_image(),
        "imagePullPolicy": "Never",
        "args": args,
        "ports": [{"containerPort": 8333, "name": "s3"}],
        "readinessProbe": {"tcpSocket": {"port": 8333}, "periodSeconds": 2},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "config", "mountPath": "/etc/seaweedfs", "readOnly": True},
        ],
    }
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "seaweedfs-s3"},
         "stringData": {"s3.json": json.dumps(identities)}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": KEYS_SECRET},
         "stringData": {"accessKeyID": ACCESS_KEY, "secretAccessKey": SECRET_KEY}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": STORE, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                            "fsGroup": 65532},
                        "containers": [container],
                        "volumes": [
                            {"name": "data", "emptyDir": {}},
                            {"name": "tmp", "emptyDir": {}},
                            {"name": "config", "secret": {"secretName": "seaweedfs-s3"}},
                        ],
                    },
                },
            },
        },
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": STORE},
         "spec": {"selector": labels, "ports": [{"name": "s3", "port": 8333}]}},
    ]  # fmt: skip


def _target(namespace: str, bucket: str = BUCKET) -> dict[str, Any]:
    return {
        "endpoint": f"http://{STORE}.{namespace}.svc:8333",
        "bucket": bucket,
        "credentialsSecretRef": {"name": KEYS_SECRET},
    }


def _objects(namespace: str) -> list[dict[str, Any]]:
    """root and shard-1 backed up to the bucket, FrontProxy ``kcp``: the operator's PKI."""
    repository, _ = kcp_image()
    image = {"repository": repository, "tag": f"v{OLD}", "pullPolicy": "Never"}
    backup = {"s3": _target(namespace), "image": BACKUP_IMAGE, "retention": {"keep": 3}}
    specs = [
        ("Shard", "root", {"version": OLD, "image": image, "backup": backup}),
        ("Shard", "shard-1", {"version": OLD, "image": image, "rootShardRef": {"name": "root"},
                              "backup": backup}),
        ("FrontProxy", FRONT_PROXY,
         {"version": OLD, "image": image, "rootShardRef": {"name": "root"}, "replicas": 1}),
    ]  # fmt: skip
    return [
        {"apiVersion": "kcpshard.dev/v1alpha1", "kind": kind, "metadata": {"name": name},
         "spec": spec}
        for kind, name, spec in specs
    ]  # fmt: skip


def _make_bucket(cluster: Cluster, namespace: str) -> None:
    """The bucket, made with weed's own shell (the operator never makes one)."""

    def made() -> bool:
        out = subprocess.run(
            ["kubectl", "exec", "-i", "-n", namespace, f"deployment/{STORE}", "--",
             "/weed", "shell", "-master=localhost:9333"],
            input=f"s3.bucket.create -name {BUCKET}\ns3.bucket.list\n", env=dict(cluster.env),
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        log(f"weed shell: {out.stdout.strip()[-300:]} {out.stderr.strip()[-300:]}")
        return out.returncode == 0 and BUCKET in out.stdout

    wait_for(made, 120, f"bucket {BUCKET} made", interval=3)


def _s3copy(cluster: Cluster, namespace: str, shard: str, *args: str) -> list[dict[str, Any]]:
    """s3copy in ``shard``'s backup sidecar against the test's bucket: its JSON lines."""
    (pod,) = (p["metadata"]["name"] for p in pods(cluster, namespace, shard, "kcp"))
    out = cluster.kubectl(
        "exec", "-n", namespace, pod, "-c", "backup", "--", "/s3copy",
        f"--endpoint=http://{STORE}.{namespace}.svc:8333", f"--bucket={BUCKET}",
        "--credentials=/s3/credentials", *args,
    )  # fmt: skip
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _listed(cluster: Cluster, namespace: str) -> dict[str, int]:
    """Every object of the bucket (listed through the S3 API): key -> size."""
    found = _s3copy(cluster, namespace, "root", "list", "")
    return {str(item["key"]): int(item["size"]) for item in found}


def _cli(cluster: Cluster, *args: str, timeout: float = BACKUP_TIMEOUT) -> tuple[int, str]:
    done = subprocess.run(
        [CLI, *args], env=dict(cluster.env), capture_output=True, text=True, timeout=timeout
    )
    return done.returncode, done.stdout + done.stderr


def _pod_state(cluster: Cluster, namespace: str, shard: str) -> dict[str, int]:
    """Pod name -> restarts of its containers."""
    return {
        pod["metadata"]["name"]: sum(
            c.get("restartCount", 0) for c in pod["status"].get("containerStatuses") or []
        )
        for pod in pods(cluster, namespace, shard, "kcp")
    }


def _backups(cluster: Cluster, namespace: str, shard: str) -> list[dict[str, Any]]:
    return list((shard_object(cluster, namespace, shard).get("status") or {}).get("backups") or [])


def _workspace_uids(root: ShardAPI) -> dict[str, str]:
    found = root.get(WORKSPACES_PATH) or {"items": []}
    return {item["metadata"]["name"]: item["metadata"]["uid"] for item in found["items"]}


def _verified(cluster: Cluster, namespace: str, shard: str) -> bool:
    return condition_of(cluster, namespace, shard, "DataVerified").get("status") == "True"


def _parse(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_backups_go_to_a_real_s3_store_and_the_root_comes_back_from_one(
    kind_cluster: Cluster, s3_namespace: str, tmp_path: Path
) -> None:
    ns, kubectl = s3_namespace, kind_cluster.kubectl
    figures: dict[str, Any] = {"store": "SeaweedFS (weed server -s3)"}
    try:
        kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(_store(ns)))
        kubectl("rollout", "status", "-n", ns, f"deployment/{STORE}", "--timeout=180s",
                timeout=200)  # fmt: skip
        _make_bucket(kind_cluster, ns)
        kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(_objects(ns)))
        wait_for(
            lambda: all(shard_ready(shard_object(kind_cluster, ns, s), OLD) for s in SHARDS)
            and kcp_object(kind_cluster, ns, "frontproxy", FRONT_PROXY)
            .get("status", {}).get("phase") == "Ready",
            START_TIMEOUT, "root, shard-1 and the FrontProxy Ready", interval=3,
        )  # fmt: skip
        assert _listed(kind_cluster, ns) == {}, "the bucket starts empty"
        front = ("kcp-front-proxy", front_proxy_kubeconfig(kind_cluster, ns, tmp_path))
        root_admin = admin_kubeconfig(kind_cluster, ns, "root", tmp_path)
        with shard_apis(kind_cluster, ns, root_admin, SHARDS, front) as apis:
            data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="s3")
            figures["workspaces"] = WORKSPACES
            figures["workspaces made in seconds"] = round(
                _more_workspaces(apis["root"], WORKSPACES), 1
            )
            uids = _workspace_uids(apis["root"])
            assert len(uids) >= WORKSPACES
            recorded = shard_object(kind_cluster, ns, "root")["status"]["dataUID"]

            # A backup of each shard, on demand, from the running pod, into the bucket.
            running = {shard: _pod_state(kind_cluster, ns, shard) for shard in SHARDS}
            entries = {}
            for shard in SHARDS:
                started = time.monotonic()
                code, printed = _cli(kind_cluster, "backup", shard, "-n", ns)
                assert code == 0, printed
                took = time.monotonic() - started
                (entry,) = _backups(kind_cluster, ns, shard)
                log(f"backup of {shard} ({took:.1f}s through the CLI): {entry}")
                key = f"{ns}/{shard}/{entry['name']}.db"
                assert "claim" not in entry
                assert (entry["bucket"], entry["key"]) == (BUCKET, key)
                assert entry["location"] == f"s3://{BUCKET}/{key}"
                assert entry["keys"] > 0
                assert entry["size"] > 0
                backed_up = condition_of(kind_cluster, ns, shard, "BackedUp")
                assert (backed_up["status"], backed_up["reason"]) == ("True", "Succeeded")
                assert entry["location"] in backed_up["message"]
                entries[shard] = entry
                figures[f"{shard} backup"] = {
                    "bytes": entry["size"],
                    "keys": entry["keys"],
                    "snapshot seconds": entry["durationSeconds"],
                    "upload seconds": entry["uploadSeconds"],
                    "cli seconds": round(took, 1),
                }
            # In the bucket, as the S3 API lists them: each backup and its manifest, the
            # sha256 of the status in the object's metadata; nothing left on scratch.
            listed = _listed(kind_cluster, ns)
            log(f"the bucket {BUCKET}: {listed}")
            for entry in entries.values():
                manifest = entry["key"].removesuffix(".db") + ".json"
                assert listed[entry["key"]] == entry["size"]
                assert manifest in listed
                (stat,) = _s3copy(kind_cluster, ns, "root", "stat", entry["key"])
                assert stat["sha256"] == entry["sha256"]
                described = _s3copy(kind_cluster, ns, "root", "cat", manifest)
                assert described[0]["backup"]["name"] == entry["name"]
            assert len(listed) == 2 * len(SHARDS)
            scratch = _scratch(kind_cluster, ns, "root")
            assert scratch == "", f"the sidecar's scratch volume keeps {scratch!r}"
            assert {s: _pod_state(kind_cluster, ns, s) for s in SHARDS} == running
            assert data.verify(apis, "a backup of each shard into the bucket") == []
            code, table = _cli(kind_cluster, "backups", "-n", ns)
            log(f"kcp-shard-operator backups:\n{table}")
            assert f"s3://{BUCKET}" in table

            # Made after the backup: gone once the root is restored from it.
            apis["root"].create(
                WORKSPACES_PATH,
                {"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace",
                 "metadata": {"name": "after-the-backup",
                              "annotations": {OWNER_ANNOTATION: OWNER}}},
            )  # fmt: skip
            assert apis["root"].get(f"{WORKSPACES_PATH}/after-the-backup") is not None

            started = time.monotonic()
            code, printed = _cli(
                kind_cluster, "restore", "root", "-n", ns, "--backup", entries["root"]["name"],
                "--timeout", str(RESTORE_TIMEOUT), timeout=RESTORE_TIMEOUT + 30,
            )  # fmt: skip
            assert code == 0, printed
            log(f"kcp-shard-operator restore root: {printed.strip()}")
            restored = shard_object(kind_cluster, ns, "root")["status"]["restore"]
            assert (restored["phase"], restored["backup"]) == ("Done", entries["root"]["name"])
            figures["restore request to Done seconds"] = round(time.monotonic() - started, 1)
            job = kcp_object(kind_cluster, ns, "job", restored["job"])
            figures["restore Job seconds"] = (
                _parse(job["status"]["completionTime"]) - _parse(job["status"]["startTime"])
            ).total_seconds()
            logs = kubectl("logs", "-n", ns, f"job/{restored['job']}")
            log(f"the restore Job's log:\n{logs}")
            (download,) = (json.loads(line) for line in logs.splitlines() if '"sha256"' in line)
            assert download["sha256"] == entries["root"]["sha256"]
            figures["download seconds"] = round(float(download["seconds"]), 3)
            wait_for(
                lambda: shard_ready(shard_object(kind_cluster, ns, "root"), OLD)
                and _verified(kind_cluster, ns, "root") and _verified(kind_cluster, ns, "shard-1"),
                START_TIMEOUT, "root Ready and both shards DataVerified after the restore",
                interval=2,
            )  # fmt: skip
            figures["restore request to root Ready and DataVerified seconds"] = round(
                time.monotonic() - started, 1
            )
            assert shard_object(kind_cluster, ns, "root")["status"]["dataUID"] == recorded
            assert data.verify(apis, "root restored from its backup in the bucket") == []
            assert _workspace_uids(apis["root"]) == uids
            assert apis["root"].get(f"{WORKSPACES_PATH}/after-the-backup") is None

            # A bucket that does not exist: the condition names it, nothing is deleted.
            before = _listed(kind_cluster, ns)
            backups = _backups(kind_cluster, ns, "root")
            running = {"root": _pod_state(kind_cluster, ns, "root")}
            patch = {"spec": {"backup": {"s3": _target(ns, "no-such-bucket")}}}
            kubectl("patch", "shard", "root", "-n", ns, "--type=merge", "-p", json.dumps(patch))
            code, printed = _cli(kind_cluster, "backup", "root", "-n", ns)
            log(f"kcp-shard-operator backup root (bucket no-such-bucket): {printed.strip()}")
            assert code == 1
            failed = condition_of(kind_cluster, ns, "root", "BackedUp")
            assert (failed["status"], failed["reason"]) == ("False", "TargetNotFound")
            assert "no-such-bucket (spec.backup.s3.bucket) does not exist" in failed["message"]
            assert _listed(kind_cluster, ns) == before
            assert _backups(kind_cluster, ns, "root") == backups
            assert {"root": _pod_state(kind_cluster, ns, "root")} == running
            assert shard_ready(shard_object(kind_cluster, ns, "root"), OLD)
            assert data.verify(apis, "a backup to a bucket that does not exist") == []
        log(f"S3 backup figures: {json.dumps(figures, indent=1)}")
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "backup-s3.json").write_text(json.dumps(figures, indent=1) + "\n")
    except BaseException:
        print(describe_failure(kind_cluster, ns))
        raise


def _scratch(cluster: Cluster, namespace: str, shard: str) -> str:
    """The files left on the sidecar's scratch volume (none: each is removed once uploaded)."""
    (pod,) = (p["metadata"]["name"] for p in pods(cluster, namespace, shard, "kcp"))
    return cluster.kubectl(
        "exec", "-n", namespace, pod, "-c", "backup", "--",
        "/busybox", "find", "/backups", "-type", "f",
    ).strip()  # fmt: skip
