"""The data volume of shards on embedded etcd on a real API server: the claim is created,
bound, kept when the Shard goes (or deleted with it when asked), never shrunk or moved, and
bad storage is refused by the CRD or reported naming the claim. Prints the measured times."""

from __future__ import annotations

import time
from typing import Any

import pytest

from testkit.kube import KubectlError, condition
from testkit.operator_process import OperatorProcess
from testkit.tools import log
from testkit.wait import wait_for

from .shards import Kubectl, apply, events, get, patch_spec, shard, wait_ready

pytestmark = pytest.mark.e2e


def claim_of(kubectl: Kubectl, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return get(kubectl, ns, "pvc", f"{name}-kcp-data")
    except KubectlError as err:
        if "NotFound" in str(err):
            return None
        raise


def absent(kubectl: Kubectl, ns: str, kind: str, name: str) -> bool:
    return not kubectl("get", "-n", ns, kind, name, "--ignore-not-found", "-o", "name").strip()


def durable(kubectl: Kubectl, ns: str, name: str) -> tuple[str, str]:
    cond = condition(get(kubectl, ns, "shard", name), "DataDurable")
    return str(cond.get("status")), str(cond.get("reason"))


def degraded_reason(kubectl: Kubectl, ns: str, name: str) -> str | None:
    cond = condition(get(kubectl, ns, "shard", name), "Degraded")
    return str(cond.get("reason")) if cond.get("status") == "True" else None


def test_a_retained_claim_outlives_its_shard_and_is_used_again(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, shard("db", "0.34.0"))
    wait_ready(kubectl, namespace, "db", "0.34.0")
    wait_for(
        lambda: durable(kubectl, namespace, "db") == ("True", "ClaimBound"),
        30,
        "DataDurable=True ClaimBound",
    )
    claim = claim_of(kubectl, namespace, "db")
    assert claim is not None
    assert claim["status"]["phase"] == "Bound"
    assert "ownerReferences" not in claim["metadata"]
    assert claim["spec"]["storageClassName"] == "standard"
    deployment = get(kubectl, namespace, "deployment", "db-kcp")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "db-kcp-data"}} in volumes

    kubectl("delete", "shard", "db", "-n", namespace, "--timeout=60s")
    wait_for(lambda: absent(kubectl, namespace, "deployment", "db-kcp"), 60, "Deployment gone")
    kept = claim_of(kubectl, namespace, "db")
    assert kept is not None
    assert kept["metadata"]["uid"] == claim["metadata"]["uid"]
    assert kept["spec"]["volumeName"] == claim["spec"]["volumeName"]

    apply(kubectl, namespace, shard("db", "0.34.0"))
    wait_ready(kubectl, namespace, "db", "0.34.0")
    again = claim_of(kubectl, namespace, "db")
    assert again is not None
    assert again["metadata"]["uid"] == claim["metadata"]["uid"]
    assert again["spec"]["volumeName"] == claim["spec"]["volumeName"]


def test_delete_policy_deletes_the_claim_with_the_shard(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, shard("tmp", "0.34.0", storage={"whenDeleted": "Delete"}))
    wait_ready(kubectl, namespace, "tmp", "0.34.0")
    claim = claim_of(kubectl, namespace, "tmp")
    assert claim is not None
    assert [o["kind"] for o in claim["metadata"]["ownerReferences"]] == ["Shard"]
    kubectl("delete", "shard", "tmp", "-n", namespace, "--timeout=60s")
    wait_for(lambda: claim_of(kubectl, namespace, "tmp") is None, 60, "claim deleted with Shard")


def test_bad_storage_is_refused_or_reported_and_nothing_is_deleted(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    refused = [
        (shard("s", "0.34.0", storage={"size": "ten"}), "must be a positive quantity"),
        (shard("s", "0.34.0", storage={"size": "0"}), "must be a positive quantity"),
        (shard("s", "0.34.0", storage={"storageClassName": "No_Such"}), "storageClassName"),
        (
            shard("s", "0.34.0", etcd={"endpoints": ["https://e:2379"]}, storage={"size": "1Gi"}),
            "spec.storage applies to embedded etcd only",
        ),
    ]
    for obj, message in refused:
        with pytest.raises(KubectlError) as err:
            apply(kubectl, namespace, obj)
        assert message in str(err.value)

    started = time.monotonic()
    apply(kubectl, namespace, shard("noclass", "0.34.0", storage={"storageClassName": "nope"}))
    wait_for(
        lambda: degraded_reason(kubectl, namespace, "noclass") == "StorageClassNotFound",
        40,
        "Degraded=True StorageClassNotFound",
    )
    reported = time.monotonic() - started
    obj = get(kubectl, namespace, "shard", "noclass")
    assert obj["status"]["phase"] == "Degraded"
    assert "PersistentVolumeClaim noclass-kcp-data" in condition(obj, "Degraded")["message"]
    assert durable(kubectl, namespace, "noclass") == ("False", "ClaimNotBound")

    apply(kubectl, namespace, shard("big", "0.34.0"))
    wait_ready(kubectl, namespace, "big", "0.34.0")
    before = claim_of(kubectl, namespace, "big")
    assert before is not None
    started = time.monotonic()
    patch_spec(kubectl, namespace, "big", {"storage": {"size": "5Gi"}})
    wait_for(
        lambda: degraded_reason(kubectl, namespace, "big") == "StorageChangeRefused",
        40,
        "Degraded=True StorageChangeRefused",
    )
    refused_in = time.monotonic() - started
    message = condition(get(kubectl, namespace, "shard", "big"), "Degraded")["message"]
    assert "cannot shrink to 5Gi" in message
    after = claim_of(kubectl, namespace, "big")
    assert after is not None
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["spec"]["resources"] == before["spec"]["resources"]
    log(f"StorageClassNotFound reported in {reported:.1f}s; shrink refused in {refused_in:.1f}s")


def test_an_ephemeral_shard_says_its_data_does_not_survive(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, shard("scratch", "0.34.0", storage={"ephemeral": True}))
    wait_ready(kubectl, namespace, "scratch", "0.34.0")
    assert durable(kubectl, namespace, "scratch") == ("False", "Ephemeral")
    assert claim_of(kubectl, namespace, "scratch") is None
    wait_for(lambda: "Ephemeral" in events(kubectl, namespace, "scratch"), 15, "Ephemeral Event")
