"""Backups of a Shard on an external etcd: the sidecar mounts the client TLS Secret kcp mounts
(not kcp's root directory), the snapshot is taken from the first healthy endpoint and says
which, a Shard whose endpoints are all down gets no snapshot, and a restore is refused with
nothing touched (the operator does not run that etcd)."""

from __future__ import annotations

from typing import Any

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.restore import refusal
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.kube.client import Ran
from tests.conftest import NO_PKI, RELEASE, make, shard_object
from tests.fake_kube import Effects, FakeKube, context, run, settle, watched
from tests.unit.backup.test_pass_backup import BACKUP, CLAIM, Sidecar, annotate, pod
from tests.unit.backup.test_pass_restore import ENTRY, ask, deployment
from tests.unit.backup.test_snapshot import HEALTH
from tests.unit.controller.test_pass import condition, status

ENDPOINTS = ["https://etcd-0.etcd:2379", "https://etcd-1.etcd:2379", "https://etcd-2.etcd:2379"]
ETCD: JSON = {"endpoints": ENDPOINTS, "prefix": "/root", "tlsSecretRef": {"name": "etcd-client"}}


def sidecar_of(etcd: JSON) -> tuple[JSON, JSON]:
    """The rendered backup sidecar of a root shard on ``etcd``, and its pod spec."""
    shard = make(shard_object(etcd=etcd, backup=BACKUP))
    pod_spec = render_shard(shard, None, RELEASE).deployment["spec"]["template"]["spec"]
    (sidecar,) = [c for c in pod_spec["containers"] if c["name"] == "backup"]
    return sidecar, pod_spec


def test_the_sidecar_mounts_the_etcd_client_tls_kcp_mounts_and_not_the_root_directory() -> None:
    sidecar, pod_spec = sidecar_of(ETCD)
    assert sidecar["volumeMounts"] == [
        {"name": "etcd-tls", "mountPath": "/etc/kcp/etcd", "readOnly": True},
        {"name": "backups", "mountPath": "/backups"},
    ]
    (kcp,) = [c for c in pod_spec["containers"] if c["name"] == "kcp"]
    assert {"name": "etcd-tls", "mountPath": "/etc/kcp/etcd", "readOnly": True} in kcp[
        "volumeMounts"
    ]
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    assert volumes["etcd-tls"]["secret"]["secretName"] == "etcd-client"
    assert volumes["backups"]["persistentVolumeClaim"] == {"claimName": "backups"}
    plain, _ = sidecar_of({"endpoints": ["http://etcd:2379"]})
    assert plain["volumeMounts"] == [{"name": "backups", "mountPath": "/backups"}]


def test_spec_backup_is_taken_with_an_external_etcd() -> None:
    """The spec's rules (the CRD's CEL rules, checked again on parsing) hold."""
    spec = make(shard_object(etcd=ETCD, backup=BACKUP)).spec
    assert spec.backup is not None
    assert not spec.embedded_etcd


def external(sidecar: Sidecar, **spec: Any) -> tuple[Any, FakeKube, Effects]:
    """A root shard on a plain-HTTP external etcd (the TLS mount is the render's test) with
    spec.backup, its pod running."""
    etcd = {"endpoints": ENDPOINTS, "prefix": "/root"}
    kube = FakeKube(shard_object(**NO_PKI, etcd=etcd, backup=BACKUP, **spec), CLAIM)
    effects = Effects()
    ctx = context(kube, effects)
    kube.containers = sidecar
    settle(ctx, kube, "root")
    watched(ctx, pod())
    return ctx, kube, effects


def test_a_backup_is_taken_from_the_first_healthy_endpoint_and_says_which() -> None:
    sidecar = Sidecar({"endpoint health": Ran(1, HEALTH, "Error: unhealthy cluster")})
    ctx, kube, effects = external(sidecar)
    annotate(ctx, kube, "first")
    run(ctx, "root")
    run(ctx, "root")
    assert sidecar.tools()[:4] == [
        "/etcdctl endpoint health",
        "/etcdctl endpoint status",
        "df",
        "mkdir",
    ]
    assert sidecar.ran[0][1] == f"--endpoints={','.join(ENDPOINTS)}"
    saves = [c for c in sidecar.ran if c[-3:-1] == ["snapshot", "save"]]
    assert [c[1] for c in saves] == ["--endpoints=https://etcd-1.etcd:2379"]
    (entry,) = status(kube, "root")["backups"]
    assert entry["endpoint"] == "https://etcd-1.etcd:2379"
    assert (entry["keys"], entry["revision"], entry["sha256"]) == (249, 447, "ab" * 32)
    assert condition(kube, "root", "BackedUp") == ("True", "Succeeded")
    backed_up = [e for _, e in effects.events if e.reason == "BackedUp"]
    assert "from https://etcd-1.etcd:2379 verified" in backed_up[0].message


def test_no_snapshot_when_no_endpoint_is_healthy() -> None:
    down = (
        '[{"endpoint":"https://etcd-0.etcd:2379","health":false,"error":"connection refused"},'
        '{"endpoint":"https://etcd-1.etcd:2379","health":false,"error":"connection refused"},'
        '{"endpoint":"https://etcd-2.etcd:2379","health":false,"error":"connection refused"}]'
    )
    sidecar = Sidecar({"endpoint health": Ran(1, down, "Error: unhealthy cluster")})
    ctx, kube, _ = external(sidecar)
    annotate(ctx, kube, "first")
    run(ctx, "root")
    run(ctx, "root")
    assert sidecar.tools() == ["/etcdctl endpoint health"]
    assert condition(kube, "root", "BackedUp") == ("False", "SnapshotFailed")
    found = next(
        c for c in status(kube, "root")["conditions"] if c["type"] == "BackedUp"
    )  # fmt: skip
    assert found["message"].startswith("no healthy endpoint of spec.etcd.endpoints")
    assert "backups" not in status(kube, "root")


def test_a_restore_of_a_shard_on_an_external_etcd_is_refused_and_nothing_is_touched() -> None:
    sidecar = Sidecar()
    ctx, kube, _ = external(sidecar, version="0.27.1")
    obj = kube.objects[("Shard", "ns", "root")]
    watched(ctx, kube.put({**obj, "status": {**obj["status"], "backups": [ENTRY]}}))
    before = dict(deployment(kube))
    ask(ctx, kube, ENTRY["name"])
    run(ctx, "root")
    assert condition(kube, "root", "Restored") == ("False", "RestoreRefused")
    message = status(kube, "root")["restore"]["message"]
    assert message == (
        "the shard runs on an external etcd (spec.etcd.endpoints), which the operator does "
        "not run: restore backup root-20261207T110700Z by hand with etcdutl on that etcd's "
        "members (docs/backups.md#an-external-etcd); nothing done"
    )
    assert deployment(kube) == before
    assert not [key for key in kube.objects if key[0] == "Job"]
    assert sidecar.ran == []


def test_the_refusal_comes_before_any_other_check() -> None:
    why = refusal({"backups": []}, "any", "0.27.1", False, external_etcd=True)
    assert why is not None
    assert why.startswith("the shard runs on an external etcd")
