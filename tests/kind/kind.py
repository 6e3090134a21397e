"""Helpers for kcp shards as real pods on kind: images, Shard objects, reaching kcp."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from testkit.kube import Cluster, condition
from testkit.process import free_port
from testkit.tools import HACK, log
from testkit.wait import wait_for
from tests.e2e.pki import (
    CACHE_KUBECONFIG_SECRET,
    CLIENT_CA_SECRET,
    Pki,
)

RELEASE = "kcp-shard-operator"
OPERATOR_NAMESPACE = "kcp-shard-operator"
KCP_PORT = 6443


def image_names() -> list[str]:
    """The operator image, the kcp image and the stand-in's (``hack/image.sh names``)."""
    out = subprocess.run(
        [str(HACK / "image.sh"), "names"], check=True, capture_output=True, text=True
    ).stdout
    return out.split()


def kcp_image(tag_suffix: str = "") -> tuple[str, str]:
    """Repository and tag of a locally built kcp image."""
    repository, tag = image_names()[1].rsplit(":", 1)
    return repository, tag + tag_suffix


def shard_spec(name: str, version: str, tag: str, root: str | None = None) -> dict[str, Any]:
    """A Shard on a locally built kcp image with the Secrets of :func:`pki.shard_secrets`."""
    repository, _ = kcp_image()
    spec: dict[str, Any] = {
        "version": version,
        "replicas": 1,
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "tls": {
            "servingCertSecretRef": {"name": f"{name}-serving-cert"},
            "clientCASecretRef": {"name": CLIENT_CA_SECRET},
        },
        "adminKubeconfigSecretRef": {"name": f"{name}-admin-kubeconfig"},
    }
    if root is not None:
        spec["rootShardRef"] = {"name": root}
        spec["cache"] = {"kubeconfigSecretRef": {"name": CACHE_KUBECONFIG_SECRET}}
        spec["rootShardKubeconfigSecretRef"] = {"name": f"{root}-admin-kubeconfig"}
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "Shard",
        "metadata": {"name": name},
        "spec": spec,
    }


def readyz_via_service(cluster: Cluster, namespace: str, shard: str) -> str:
    """kcp's answer to /readyz through the shard's Service (the API server's service proxy)."""
    path = f"/api/v1/namespaces/{namespace}/services/https:{shard}-kcp:{KCP_PORT}/proxy/readyz"
    return cluster.kubectl("get", "--raw", path, timeout=15).strip()


@contextmanager
def port_forward(cluster: Cluster, namespace: str, service: str) -> Iterator[int]:
    """``kubectl port-forward`` to the Service; yields the local port."""
    port = free_port()
    proc = subprocess.Popen(
        ["kubectl", "port-forward", "-n", namespace, f"svc/{service}", f"{port}:{KCP_PORT}"],
        env=dict(cluster.env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(listening, 30, f"port-forward to {namespace}/{service}")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def kcp_get(pki: Pki, port: int, path: str) -> tuple[int, dict[str, Any]]:
    """GET ``path`` from kcp on 127.0.0.1:``port`` as the admin of :class:`Pki`."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    crt, key = pki.admin()
    context.load_cert_chain(str(crt), str(key))
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, {"text": err.read().decode(errors="replace")}


def pods(cluster: Cluster, namespace: str, shard: str) -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "get", "pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={shard}", "-o", "json"
    )
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def pod_ready(pod: dict[str, Any]) -> bool:
    return condition(pod, "Ready").get("status") == "True"


def describe_failure(cluster: Cluster, namespace: str) -> str:
    """Pods, events and kcp logs of ``namespace`` and the operator's log, for a failed test."""
    parts = []
    for args in (
        ("get", "pods,shards", "-n", namespace, "-o", "wide"),
        ("get", "events", "-n", namespace, "--sort-by=.lastTimestamp"),
        ("logs", "-n", namespace, "-l", "app.kubernetes.io/name=kcp", "--tail=30", "--prefix"),
        ("logs", "-n", OPERATOR_NAMESPACE, "deploy/kcp-shard-operator", "--tail=40"),
    ):
        try:
            parts.append(cluster.kubectl(*args, timeout=30))
        except Exception as err:
            parts.append(f"kubectl {' '.join(args)}: {err}")
    return "\n".join(parts)


def timed(what: str, started: float) -> None:
    log(f"{what} after {time.monotonic() - started:.0f}s")
