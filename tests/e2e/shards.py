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
from testkit.wait import wait_for

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


def claims_settled(kubectl: Kubectl) -> bool:
    """Whether every PersistentVolumeClaim of the cluster is Bound and no namespace is being
    deleted (an earlier test's): the PersistentVolume controllers then write no claim (they
    bind claims and release the finalizers of deleted ones, and the API server's counters
    cannot tell their writes from the operator's)."""
    namespaces = json.loads(kubectl("get", "namespaces", "-o", "json"))["items"]
    if any((n.get("status") or {}).get("phase") == "Terminating" for n in namespaces):
        return False
    claims = json.loads(kubectl("get", "pvc", "--all-namespaces", "-o", "json"))["items"]
    return all(
        (c.get("status") or {}).get("phase") == "Bound"
        and not c["metadata"].get("deletionTimestamp")
        for c in claims
    )


def wait_settled(kubectl: Kubectl, ns: str, name: str, version: str) -> None:
    """Ready, and every claim of the cluster bound (:func:`claims_settled`): from then on the
    API server's write counters show only what the operator does to the Shard's children."""
    wait_ready(kubectl, ns, name, version)
    wait_for(
        lambda: claims_settled(kubectl),
        90,
        "every claim of the cluster bound, no namespace terminating",
    )


def patch_spec(kubectl: Kubectl, ns: str, name: str, spec: dict[str, Any]) -> None:
    kubectl("patch", "-n", ns, "shard", name, "--type=merge", "-p", json.dumps({"spec": spec}))


def events(kubectl: Kubectl, ns: str, name: str) -> list[str]:
    out = kubectl(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json"
    )
    return [item["reason"] for item in json.loads(out)["items"]]


def plan_json(cluster: Cluster, *args: str) -> dict[str, Any]:
    """``kcp-shard-operator plan <args> -o json`` against ``cluster``, parsed."""
    exe = Path(sys.executable).parent / "kcp-shard-operator"
    proc = subprocess.run(
        [str(exe), "plan", *args, "-o", "json"],
        env=dict(cluster.env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    found: dict[str, Any] = json.loads(proc.stdout)
    return found
