"""spec.backup on a real API server: what the CRD takes (an external etcd too) and refuses,
the sidecar only once the named claim exists (TargetNotFound before, the running Deployment
untouched), a bad schedule reported naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from testkit.kube import KubectlError, condition
from testkit.operator_process import OperatorProcess
from testkit.wait import wait_for

from .shards import Kubectl, apply, get, patch_spec, shard, wait_ready

pytestmark = pytest.mark.e2e

BACKUP: dict[str, Any] = {"claimRef": {"name": "kcp-backups"}, "schedule": "0 3 * * *"}
CLAIM = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "kcp-backups"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}


def containers(kubectl: Kubectl, ns: str, name: str) -> list[str]:
    template = get(kubectl, ns, "deployment", f"{name}-kcp")["spec"]["template"]
    return [c["name"] for c in template["spec"]["containers"]]


def backed_up(kubectl: Kubectl, ns: str, name: str) -> tuple[str, str]:
    cond = condition(get(kubectl, ns, "shard", name), "BackedUp")
    return str(cond.get("status")), str(cond.get("reason"))


def test_the_crd_takes_backups_of_an_external_etcd_and_refuses_bad_retention(
    kubectl: Kubectl, namespace: str, crds: list[str]
) -> None:
    external = shard("ext", "0.34.0", etcd={"endpoints": ["https://etcd:2379"]}, backup=BACKUP)
    apply(kubectl, namespace, external)
    assert get(kubectl, namespace, "shard", "ext")["spec"]["backup"]["claimRef"] == {
        "name": "kcp-backups"
    }
    no_keep = shard("db", "0.34.0", backup={**BACKUP, "retention": {"keep": 0}})
    with pytest.raises(KubectlError, match=r"spec\.backup\.retention\.keep"):
        apply(kubectl, namespace, no_keep)


def test_the_sidecar_comes_with_its_claim_and_a_bad_schedule_is_named(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, shard("db", "0.34.0"))
    wait_ready(kubectl, namespace, "db", "0.34.0")
    before = get(kubectl, namespace, "deployment", "db-kcp")["metadata"]["generation"]

    patch_spec(kubectl, namespace, "db", {"backup": BACKUP})
    wait_for(
        lambda: backed_up(kubectl, namespace, "db") == ("False", "TargetNotFound"),
        30, "BackedUp=False TargetNotFound",
    )  # fmt: skip
    assert containers(kubectl, namespace, "db") == ["kcp"]
    assert get(kubectl, namespace, "deployment", "db-kcp")["metadata"]["generation"] == before

    apply(kubectl, namespace, CLAIM)
    wait_for(
        lambda: containers(kubectl, namespace, "db") == ["kcp", "backup"],
        60, "the backup sidecar in the pod template",
    )  # fmt: skip
    wait_ready(kubectl, namespace, "db", "0.34.0")
    status = get(kubectl, namespace, "shard", "db")["status"]
    assert status["backup"]["schedule"] == "0 3 * * *"
    assert status["backup"]["nextScheduledTime"].endswith("T03:00:00Z")

    patch_spec(kubectl, namespace, "db", {"backup": {**BACKUP, "schedule": "61 * * * *"}})

    def invalid() -> bool:
        ready = condition(get(kubectl, namespace, "shard", "db"), "Degraded")
        return "spec.backup.schedule" in str(ready.get("message"))

    wait_for(invalid, 30, "Degraded naming spec.backup.schedule")
    assert containers(kubectl, namespace, "db") == ["kcp", "backup"]


S3 = {
    "endpoint": "https://s3.eu-west-1.amazonaws.com",
    "bucket": "kcp-backups",
    "region": "eu-west-1",
    "credentialsSecretRef": {"name": "kcp-backup-s3"},
}


def test_the_crd_takes_a_bucket_and_refuses_a_bad_endpoint(
    kubectl: Kubectl, namespace: str, crds: list[str]
) -> None:
    apply(kubectl, namespace, shard("s3", "0.34.0", backup={"s3": S3}))
    assert get(kubectl, namespace, "shard", "s3")["spec"]["backup"]["s3"] == S3
    bad = shard("bad", "0.34.0", backup={"s3": {**S3, "endpoint": "ftp://store"}})
    with pytest.raises(KubectlError, match=r"spec\.backup\.s3\.endpoint"):
        apply(kubectl, namespace, bad)


def test_a_bucket_adds_the_sidecar_at_once_its_keys_unread_and_two_targets_are_named(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    """No claim to wait for: the sidecar comes with the block, mounting the keys' Secret (which
    does not exist: optional, never read, no SecretNotFound); both targets: Degraded naming
    spec.backup, the Deployment as it was."""
    apply(kubectl, namespace, shard("db", "0.34.0", backup={"s3": S3}))
    wait_ready(kubectl, namespace, "db", "0.34.0")
    assert containers(kubectl, namespace, "db") == ["kcp", "backup"]
    volumes = get(kubectl, namespace, "deployment", "db-kcp")["spec"]["template"]["spec"]
    keys = next(v for v in volumes["volumes"] if v["name"] == "s3-credentials")
    assert keys["secret"] == {"secretName": "kcp-backup-s3", "optional": True, "defaultMode": 420}
    degraded = condition(get(kubectl, namespace, "shard", "db"), "Degraded")
    assert degraded.get("status") == "False", degraded
    before = get(kubectl, namespace, "deployment", "db-kcp")["metadata"]["generation"]

    patch_spec(kubectl, namespace, "db", {"backup": {"s3": S3, **BACKUP}})

    def refused() -> bool:
        found = condition(get(kubectl, namespace, "shard", "db"), "Degraded")
        return "spec.backup: set exactly one target" in str(found.get("message"))

    wait_for(refused, 30, "Degraded naming spec.backup")
    assert get(kubectl, namespace, "deployment", "db-kcp")["metadata"]["generation"] == before
