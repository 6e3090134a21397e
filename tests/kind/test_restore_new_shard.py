"""A root deleted with its status and its data claim, made again from its backup on real pods.

A root shard on the operator's own PKI with ``spec.backup``, workspaces and objects in it
(testkit's KcpData and ``NEW_SHARD_WORKSPACES``, default 20, more workspaces), backed up with
``kcp-shard-operator backup``. Then the Shard is deleted, and its data claim: nothing is left
of it but the backup and its manifest on the backup claim, which
``kcp-shard-operator backups --claim`` lists (the pod it ran gone). The Shard is made again,
same name, with the annotation ``kcpshard.dev/restore`` naming that backup, which its new status
does not list: the operator reads the manifest through the new pod's backup sidecar, imports
the entry (``importedFrom`` the deleted Shard) and restores it as in place. Checked: the
restore Done, the root Ready and ``DataVerified=True`` on the backup's data UID, every
workspace and object back with its UID and content, ``backups`` naming the deleted Shard the
imported backup was taken of. The timeline is printed.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcp_shard_operator.core.backup.listing import LISTING_NAME
from kcp_shard_operator.core.backup.restore import RESTORE_ANNOTATION
from testkit.kcpdata import KcpData
from testkit.kube import Cluster, shard_ready
from testkit.wait import wait_for

from .backups import backed_up_root, namespace_with_backup_image
from .durability import admin_kubeconfig, shard_apis
from .kind import OLD, condition_of, describe_failure, shard_object
from .test_backup import CLAIM, _claim, _cli, _more_workspaces
from .test_restore_data_lost import Timeline, _workspace_uids

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

LISTING = f"app.kubernetes.io/name={LISTING_NAME}"
"""The pods of ``kcp-shard-operator backups --claim``: none is left once it has answered."""
WORKSPACES = int(os.environ.get("NEW_SHARD_WORKSPACES", "20"))
START_TIMEOUT = 600
GONE_TIMEOUT = 180
RESTORE_TIMEOUT = 900


@pytest.fixture
def new_shard_namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    with namespace_with_backup_image(kind_cluster, "kcp-new-shard") as namespace:
        yield namespace


def _exists(cluster: Cluster, ns: str, kind: str, name: str) -> bool:
    found = subprocess.run(
        ["kubectl", "get", kind, name, "-n", ns, "-o", "name"],
        env=dict(cluster.env), capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return found.returncode == 0


def _restore(cluster: Cluster, ns: str) -> dict[str, Any]:
    return dict((shard_object(cluster, ns, "root").get("status") or {}).get("restore") or {})


def test_a_deleted_root_made_again_is_restored_from_the_manifest_on_its_backup_claim(
    kind_cluster: Cluster, new_shard_namespace: str, tmp_path: Path
) -> None:
    ns, kubectl = new_shard_namespace, kind_cluster.kubectl
    root = backed_up_root(CLAIM)
    kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all([_claim(ns), root]))
    try:
        wait_for(
            lambda: shard_ready(shard_object(kind_cluster, ns, "root"), OLD)
            and "backups" not in (shard_object(kind_cluster, ns, "root").get("status") or {}),
            START_TIMEOUT, "root Ready", interval=3,
        )  # fmt: skip
        with shard_apis(
            kind_cluster, ns, admin_kubeconfig(kind_cluster, ns, "root", tmp_path), ("root",)
        ) as apis:
            data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="new")
            _more_workspaces(apis["root"], WORKSPACES)
            uids = _workspace_uids(apis["root"])
            assert len(uids) >= WORKSPACES
        _cli(kind_cluster, "backup", "root", "-n", ns)
        (entry,) = shard_object(kind_cluster, ns, "root")["status"]["backups"]
        recorded = shard_object(kind_cluster, ns, "root")["status"]["dataUID"]
        assert entry["dataUID"] == recorded

        timeline = Timeline()
        kubectl("delete", "shard", "root", "-n", ns, "--wait=true", "--timeout=180s")
        timeline.mark("Shard root deleted")
        kubectl("delete", "pvc", "root-kcp-data", "-n", ns, "--ignore-not-found", "--wait=false")
        wait_for(
            lambda: not _exists(kind_cluster, ns, "pvc", "root-kcp-data")
            and not _exists(kind_cluster, ns, "deployment", "root-kcp"),
            GONE_TIMEOUT, "the data claim and the Deployment gone", interval=2,
        )  # fmt: skip
        timeline.mark("claim root-kcp-data gone: only the backup claim is left")
        listed = _cli(kind_cluster, "backups", "--claim", CLAIM, "-n", ns)
        timeline.mark(f"kcp-shard-operator backups --claim {CLAIM}:\n{listed}")
        _, row = listed.splitlines()
        assert row.split()[:3] == ["root", entry["name"], entry["time"]]
        assert row.split()[-2:] == [entry["path"], "-"]
        assert not kubectl("get", "pods", "-n", ns, "-o", "name", "-l", LISTING)

        again = backed_up_root(CLAIM, annotations={RESTORE_ANNOTATION: entry["name"]})
        kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(again))
        timeline.mark(f"Shard root made again with {RESTORE_ANNOTATION}: {entry['name']}")
        seen = ""

        def restored() -> bool:
            nonlocal seen
            record = _restore(kind_cluster, ns)
            if record.get("phase") and record.get("phase") != seen:
                seen = str(record["phase"])
                timeline.mark(f"status.restore.phase {seen}: {record.get('message')}")
            assert record.get("phase") not in ("Refused", "Failed"), record
            return record.get("phase") == "Done"

        wait_for(restored, RESTORE_TIMEOUT, "the restore Done", interval=1)
        wait_for(
            lambda: shard_ready(shard_object(kind_cluster, ns, "root"), OLD),
            START_TIMEOUT, "root Ready after the restore", interval=1,
        )  # fmt: skip
        timeline.mark("root Ready")
        wait_for(
            lambda: condition_of(kind_cluster, ns, "root", "DataVerified").get("status")
            == "True",
            180, "root DataVerified after the restore", interval=1,
        )  # fmt: skip
        timeline.mark("root DataVerified=True")
        status = shard_object(kind_cluster, ns, "root")["status"]
        assert status["dataUID"] == recorded
        assert condition_of(kind_cluster, ns, "root", "Restored")["status"] == "True"
        (imported,) = status["backups"]
        assert imported["importedFrom"]["name"] == "root"
        _, row = _cli(kind_cluster, "backups", "root", "-n", ns).splitlines()
        assert row.split()[-1] == f"{ns}/root", row
        assert {k: imported[k] for k in ("name", "sha256", "path", "dataUID")} == {
            k: entry[k] for k in ("name", "sha256", "path", "dataUID")
        }
        with shard_apis(
            kind_cluster, ns, admin_kubeconfig(kind_cluster, ns, "root", tmp_path), ("root",)
        ) as apis:
            assert data.verify(apis, "root made again from its backup") == []
            assert _workspace_uids(apis["root"]) == uids
        print(f"timeline:\n{timeline.text()}")
    except BaseException:
        print(describe_failure(kind_cluster, ns))
        raise
