"""Shard objects and kubectl helpers shared by the operator e2e tests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from testkit.kube import Cluster, shard_ready
from testkit.wait import WaitTimeoutError, wait_for

from .pki import secret

Kubectl = Callable[..., str]


def shard(name: str, version: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"version": version, "replicas": 1}
    body.update(spec)
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "Shard",
        "metadata": {"name": name},
        "spec": body,
    }


def cache_server(name: str, version: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "CacheServer",
        "metadata": {"name": name},
        "spec": {"version": version, **spec},
    }


def front_proxy(name: str, version: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "FrontProxy",
        "metadata": {"name": name},
        "spec": {"version": version, "rootShardRef": {"name": "root"}, **spec},
    }


def apply(kubectl: Kubectl, ns: str, *objs: dict[str, Any]) -> None:
    kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(objs))


def placeholder_secrets(kubectl: Kubectl, ns: str, *names: str) -> None:
    """Secrets a Shard mounts whose content nothing reads here (kwok runs no kcp): a Shard with
    a missing Secret is ``Degraded``, never Ready."""
    apply(kubectl, ns, *(secret(name, {"kubeconfig": "placeholder"}) for name in names))


def get(kubectl: Kubectl, ns: str, kind: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kubectl("get", "-n", ns, kind, name, "-o", "json"))
    return result


def kcp_container(kubectl: Kubectl, ns: str, shard_name: str) -> dict[str, Any]:
    """The kcp container of the Shard's Deployment as the API server has it."""
    deployment = get(kubectl, ns, "deployment", f"{shard_name}-kcp")
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def wait_ready(kubectl: Kubectl, ns: str, name: str, version: str, timeout: float = 90) -> None:
    wait_for(
        lambda: shard_ready(get(kubectl, ns, "shard", name), version),
        timeout,
        f"Shard {name} Ready at kcp {version}",
    )


def unsettled(kubectl: Kubectl) -> list[str]:
    """What keeps the cluster's PersistentVolume controllers writing claims: namespaces being
    deleted (an earlier test's; with why, as their conditions say) and claims not Bound or being
    deleted. Once empty, the API server's counters cannot mix those writes with the operator's."""
    found = []
    for ns in json.loads(kubectl("get", "namespaces", "-o", "json"))["items"]:
        status = ns.get("status") or {}
        if status.get("phase") == "Terminating":
            true = [c for c in status.get("conditions") or [] if c["status"] == "True"]
            why = "; ".join(c.get("message", "") for c in true)
            found.append(f"namespace {ns['metadata']['name']} terminating: {why}")
    for claim in json.loads(kubectl("get", "pvc", "--all-namespaces", "-o", "json"))["items"]:
        meta = claim["metadata"]
        phase = (claim.get("status") or {}).get("phase")
        if phase != "Bound" or meta.get("deletionTimestamp"):
            deleting = " (being deleted)" if meta.get("deletionTimestamp") else ""
            found.append(f"claim {meta['namespace']}/{meta['name']} {phase}{deleting}")
    return found


def wait_settled(kubectl: Kubectl, ns: str, name: str, version: str) -> None:
    """Ready, and nothing :func:`unsettled`: from then on the API server's write counters show
    only what the operator does to the Shard's children."""
    wait_ready(kubectl, ns, name, version)
    left: list[str] = []

    def settled() -> bool:
        left[:] = unsettled(kubectl)
        return not left

    try:
        wait_for(settled, 90, "every claim of the cluster bound, no namespace terminating")
    except WaitTimeoutError as err:
        raise WaitTimeoutError(f"{err}; still: {left}") from None


def patch_spec(kubectl: Kubectl, ns: str, name: str, spec: dict[str, Any]) -> None:
    kubectl("patch", "-n", ns, "shard", name, "--type=merge", "-p", json.dumps({"spec": spec}))


def events(kubectl: Kubectl, ns: str, name: str) -> list[str]:
    out = kubectl(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json"
    )
    return [item["reason"] for item in json.loads(out)["items"]]


def plan_json(cluster: Cluster, *args: str, exit_code: int = 0) -> dict[str, Any]:
    """``kcp-shard-operator plan <args> -o json`` against ``cluster``, parsed; it must exit
    ``exit_code``."""
    exe = Path(sys.executable).parent / "kcp-shard-operator"
    proc = subprocess.run(
        [str(exe), "plan", *args, "-o", "json"],
        env=dict(cluster.env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == exit_code, proc.stderr
    found: dict[str, Any] = json.loads(proc.stdout)
    return found
