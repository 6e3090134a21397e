"""The operator's identity-cache cleanup against a real kcp shard.

Shard objects live in the kwok cluster (their pods are simulated); the operator reaches the
real ``shard-1`` of :mod:`tests.e2e.kcp` through the kubeconfig in
``spec.adminKubeconfigSecretRef``. The upgrade of the real shard is played by restarting it
on the stand-in binary (kcp without the identitycache controller) before the Shard's
version is raised, the order in which a real rollout replaces the pods.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.kube import condition
from testkit.operator_process import RESYNC_WINDOW, OperatorProcess
from testkit.tools import log
from testkit.wait import wait_for

from .kcp import ShardedKcp, identity, root_state
from .shards import Kubectl, apply, events, get, patch_spec, placeholder_secrets, shard, wait_ready

pytest_plugins = ("tests.e2e.kcp_fixture",)
pytestmark = [pytest.mark.e2e, pytest.mark.kcp_checks]

CLEANED = "IdentityCacheCleaned"
ADMIN_SECRET = "shard-1-admin"


def admin_secret(kubectl: Kubectl, ns: str, kubeconfig: str) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": ADMIN_SECRET},
        "stringData": {"kubeconfig": kubeconfig},
    }
    apply(kubectl, ns, secret)
    placeholder_secrets(kubectl, ns, "cache-kubeconfig", "root-admin-kubeconfig")


def shards(version: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A root Shard and shard-1, whose admin kubeconfig Secret reaches the real shard-1; the
    operator issues nothing (the real shards have their own PKI)."""
    own_pki = {"issue": False}
    return shard("root", version, pki=own_pki), shard(
        "shard-1",
        version,
        pki=own_pki,
        rootShardRef={"name": "root"},
        cache={"kubeconfigSecretRef": {"name": "cache-kubeconfig"}},
        rootShardKubeconfigSecretRef={"name": "root-admin-kubeconfig"},
        adminKubeconfigSecretRef={"name": ADMIN_SECRET},
    )


def wait_cleaned(kubectl: Kubectl, ns: str, reason: str) -> dict[str, Any]:
    """Wait for IdentityCacheCleaned with ``reason`` on shard-1 and return it."""

    def seen() -> dict[str, Any] | None:
        cond = cleaned(kubectl, ns)
        return cond if cond.get("reason") == reason else None

    found: dict[str, Any] = wait_for(seen, 90, f"IdentityCacheCleaned {reason} on shard-1")
    return found


def cleaned(kubectl: Kubectl, ns: str) -> dict[str, Any]:
    return condition(get(kubectl, ns, "shard", "shard-1"), CLEANED)


def test_operator_cleans_only_after_the_upgrade(
    sharded_kcp: ShardedKcp,
    standin_binary: Path,
    operator_process: OperatorProcess,
    kubectl: Kubectl,
    namespace: str,
) -> None:
    present = wait_for(sharded_kcp.configmap, 60, "apiexport-identity-cache on shard-1")
    root_before = root_state(sharded_kcp)
    admin_secret(kubectl, namespace, sharded_kcp.shard.admin_kubeconfig.read_text())
    apply(kubectl, namespace, *shards("0.32.3"))
    wait_ready(kubectl, namespace, "root", "0.32.3")
    wait_ready(kubectl, namespace, "shard-1", "0.32.3")
    # Left alone over at least one resync pass: no condition, the same ConfigMap.
    time.sleep(RESYNC_WINDOW)
    assert cleaned(kubectl, namespace) == {}, "a shard on an old version is left alone"
    assert identity(sharded_kcp.configmap()) == identity(present)

    old_binary = sharded_kcp.shard.binary
    try:
        log(f"shard-1 on the stand-in after {sharded_kcp.restart_shard(standin_binary):.1f}s")
        patch_spec(kubectl, namespace, "root", {"version": "0.34.0"})
        wait_ready(kubectl, namespace, "root", "0.34.0")
        patch_spec(kubectl, namespace, "shard-1", {"version": "0.34.0"})
        wait_ready(kubectl, namespace, "shard-1", "0.34.0")
        done = wait_cleaned(kubectl, namespace, "Deleted")
        assert done["status"] == "True"
        assert identity(present)[0] in done["message"]
        assert sharded_kcp.configmap() is None
        assert "Deleted" in events(kubectl, namespace, "shard-1")
        assert cleaned(kubectl, namespace).get("status") == "True"
        assert root_state(sharded_kcp) == root_before
    finally:
        log(f"shard-1 back on the old kcp in {sharded_kcp.restart_shard(old_binary):.1f}s")


def test_operator_reports_forbidden_without_leaking_credentials(
    sharded_kcp: ShardedKcp,
    operator_process: OperatorProcess,
    kubectl: Kubectl,
    namespace: str,
) -> None:
    present = wait_for(sharded_kcp.configmap, 60, "apiexport-identity-cache on shard-1")
    config = yaml.safe_load(sharded_kcp.shard.admin_kubeconfig.read_text())
    config["contexts"] = [c for c in config["contexts"] if c["name"] != "shard-base"]
    config["current-context"] = "base"
    admin_secret(kubectl, namespace, yaml.safe_dump(config))
    apply(kubectl, namespace, *shards("0.34.0"))
    denied = wait_cleaned(kubectl, namespace, "Forbidden")
    # kcp serves, but the operator cannot verify it with these credentials: the phase says so.
    obj = get(kubectl, namespace, "shard", "shard-1")
    assert obj["status"]["phase"] == "Degraded"
    assert condition(obj, "Degraded")["reason"] == "Forbidden"
    assert condition(obj, "Ready")["status"] == "True"
    assert denied["status"] == "False"
    assert "group system:masters" in denied["message"]
    assert identity(sharded_kcp.configmap()) == identity(present)
    shown = json.dumps(get(kubectl, namespace, "shard", "shard-1")) + kubectl(
        "get", "events", "-n", namespace, "-o", "json"
    )
    assert "Forbidden" in events(kubectl, namespace, "shard-1")
    for user in config["users"]:
        assert user["user"]["token"] not in shown
        assert user["user"]["token"] not in operator_process.log_tail(10_000)
