"""Kubeconfig against a real API server: the CRD refuses what its schema and rules refuse; the
operator (kwok runs no kcp: --no-kcp-checks) issues alice's kubeconfig once the root Shard and
the FrontProxy are up, renews it when its validity is shortened, shows it in ``kubectl get``,
never writes over a Secret it did not make, and the Secret goes with the Kubeconfig. The real
kcp's answers (403 elsewhere, the audit log, expiry) are in tests/kind/test_user_access.py."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml

from testkit.kube import KubectlError
from testkit.wait import wait_for

from .shards import Kubectl, apply, front_proxy, get, shard, wait_ready

pytestmark = pytest.mark.e2e
VERSION = "0.27.1"


def kubeconfig(name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "username": name,
        "groups": ["team-a"],
        "target": {"frontProxyRef": {"name": "kcp"}},
        "workspace": "root:team-a",
        "clusterRoles": ["cluster-admin"],
        **spec,
    }
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "Kubeconfig",
        "metadata": {"name": name},
        "spec": body,
    }


def condition(kubectl: Kubectl, namespace: str, name: str, type_: str) -> dict[str, Any]:
    status = get(kubectl, namespace, "kubeconfig", name).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


@pytest.mark.parametrize(
    ("obj", "words"),
    [
        (kubeconfig("a", renewBefore="2h", validity="1h"), "spec.renewBefore must be shorter"),
        (kubeconfig("a", target={}), "spec.target needs exactly one of frontProxyRef and shardRef"),
        (kubeconfig("a", workspace="team-a"), "spec.workspace"),
        (kubeconfig("a", username=""), "spec.username"),
    ],
)
def test_the_api_server_refuses_what_the_schema_refuses(
    crds: list[str], kubectl: Kubectl, namespace: str, obj: dict[str, Any], words: str
) -> None:
    assert "kubeconfigs.kcpshard.dev" in crds
    with pytest.raises(KubectlError) as err:
        apply(kubectl, namespace, obj)
    assert words in str(err.value)


def test_alices_kubeconfig_is_issued_renewed_listed_and_goes_with_its_object(
    operator_process: Any, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, kubeconfig("alice", validity="1h", renewBefore="10m"))
    wait_for(
        lambda: condition(kubectl, namespace, "alice", "Issued").get("reason") == "TargetNotFound",
        60,
        "alice's Kubeconfig names its missing FrontProxy",
    )
    assert (
        "spec.target.frontProxyRef" in condition(kubectl, namespace, "alice", "Issued")["message"]
    )
    apply(kubectl, namespace, shard("root", VERSION), front_proxy("kcp", VERSION))
    wait_ready(kubectl, namespace, "root", VERSION)
    wait_for(
        lambda: condition(kubectl, namespace, "alice", "Ready").get("status") == "True",
        90,
        "alice's Kubeconfig Ready",
    )
    status = get(kubectl, namespace, "kubeconfig", "alice")["status"]
    assert condition(kubectl, namespace, "alice", "Bound")["reason"] == "NotVerified"
    secret = get(kubectl, namespace, "secret", "alice-kubeconfig")
    config = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    server = f"https://kcp-front-proxy.{namespace}.svc:6443/clusters/root:team-a"
    assert config["clusters"][0]["cluster"]["server"] == server == status["server"]
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "Kubeconfig"
    row = kubectl("get", "kubeconfigs", "-n", namespace).splitlines()
    assert row[0].split() == [
        "NAME",
        "USER",
        "WORKSPACE",
        "SECRET",
        "EXPIRES",
        "READY",
        "PHASE",
        "AGE",
    ]
    assert row[1].split()[:4] == ["alice", "alice", "root:team-a", "alice-kubeconfig"]

    body = json.dumps({"spec": {"validity": "30m"}})
    kubectl("patch", "kubeconfig", "alice", "-n", namespace, "--type=merge", "-p", body)
    wait_for(
        lambda: (
            get(kubectl, namespace, "kubeconfig", "alice")["status"]["notAfter"]
            < status["notAfter"]
        ),
        60,
        "alice's kubeconfig renewed for the shorter validity",
    )
    reasons = kubectl(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=alice",
        "-o", "jsonpath={.items[*].reason}",
    ).split()  # fmt: skip
    assert {"CertificateIssued", "CertificateRenewed"} <= set(reasons), reasons

    kubectl(
        "create",
        "secret",
        "generic",
        "bob-kubeconfig",
        "-n",
        namespace,
        "--from-literal=kubeconfig=mine",
    )
    apply(kubectl, namespace, kubeconfig("bob"))
    wait_for(
        lambda: (
            condition(kubectl, namespace, "bob", "Issued").get("reason") == "CertificateConflict"
        ),
        60,
        "bob's Kubeconfig refuses the Secret it did not make",
    )
    kept = get(kubectl, namespace, "secret", "bob-kubeconfig")["data"]["kubeconfig"]
    assert base64.b64decode(kept) == b"mine"

    kubectl("delete", "kubeconfig", "alice", "-n", namespace, "--timeout=60s")
    wait_for(
        lambda: "alice-kubeconfig" not in kubectl("get", "secrets", "-n", namespace, "-o", "name"),
        60,
        "alice's Secret garbage-collected",
    )
