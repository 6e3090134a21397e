"""Helpers for kcp shards as real pods on kind: images, Shard objects on an etcd pod,
version bumps and waits, reaching kcp."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from testkit.kube import (
    Cluster,
    condition,
    create_namespace,
    delete_namespace,
    delete_operated,
    shard_ready,
)
from testkit.operator_metrics import Scrape, parse
from testkit.process import free_port
from testkit.tools import HACK, log, pinned_version, run_visible
from testkit.wait import wait_for
from tests.e2e.pki import (
    CACHE_KUBECONFIG_SECRET,
    CLIENT_CA_SECRET,
    Pki,
    shard_secrets,
)

RELEASE = "kcp-shard-operator"
OPERATOR_NAMESPACE = "kcp-shard-operator"
METRICS_PATH = (
    f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/services/{RELEASE}-metrics:metrics/proxy/metrics"
)
"""The operator's /metrics through its chart's Service (the API server's service proxy)."""
KCP_PORT = 6443
OLD = pinned_version("KCP_VERSION").removeprefix("v")
"""The kcp the kind tests start on (hack/versions.env)."""
NEW = pinned_version("KCP_UPGRADE_VERSION").removeprefix("v")
"""The next minor release they upgrade to."""


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


def load_kcp_image(cluster: Cluster, target: str, version_key: str) -> str:
    """Build the kcp image of ``hack/image.sh TARGET`` and load it into the kind node; the
    kcp version it runs (``version_key`` of hack/versions.env, without the ``v``)."""
    run_visible([str(HACK / "image.sh"), target])
    version = pinned_version(version_key).removeprefix("v")
    repository, _ = kcp_image()
    name = cluster.kubectl("config", "view", "-o", "jsonpath={.contexts[0].context.cluster}")
    image = f"{repository}:v{version}"
    run_visible([str(HACK / "kind.sh"), "load", name.removeprefix("kind-"), image])
    return version


def shard_spec(
    name: str, namespace: str, version: str, tag: str, root: str | None = None
) -> dict[str, Any]:
    """A Shard on a locally built kcp image with the Secrets of :func:`pki.shard_secrets`.

    Its admin kubeconfig (``system:masters``, trusted by every shard of the PKI) is also its
    logical-cluster-admin kubeconfig: without one, kcp connects to other shards with its
    loopback credentials, which no other shard accepts, and a workspace scheduled onto
    another shard never gets its LogicalCluster there."""
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
        "externalURL": f"https://{name}-kcp.{namespace}.svc:{KCP_PORT}",
        "logicalClusterAdminKubeconfigSecretRef": {"name": f"{name}-admin-kubeconfig"},
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


ETCD_IMAGE = "registry.k8s.io/etcd:3.6.5-0"
ETCD_TLS_DIRECTORY = "/etc/etcd/tls"


def etcd_pod(tls_secret: str | None = None) -> list[dict[str, Any]]:
    """A one-member etcd (Deployment ``etcd``, on an emptyDir) and its Service ``etcd`` on port
    2379; with ``tls_secret`` (``ca.crt``, ``tls.crt``, ``tls.key``), serving TLS and taking
    only clients whose certificate that CA signed."""
    scheme = "https" if tls_secret else "http"
    command = [
        "/usr/local/bin/etcd", "--data-dir=/var/lib/etcd", "--name=etcd",
        f"--listen-client-urls={scheme}://0.0.0.0:2379",
        f"--advertise-client-urls={scheme}://etcd:2379",
    ]  # fmt: skip
    mounts: list[dict[str, Any]] = [{"name": "data", "mountPath": "/var/lib/etcd"}]
    volumes: list[dict[str, Any]] = [{"name": "data", "emptyDir": {}}]
    if tls_secret:
        command += [
            f"--cert-file={ETCD_TLS_DIRECTORY}/tls.crt", f"--key-file={ETCD_TLS_DIRECTORY}/tls.key",
            f"--trusted-ca-file={ETCD_TLS_DIRECTORY}/ca.crt", "--client-cert-auth=true",
        ]  # fmt: skip
        mounts.append({"name": "tls", "mountPath": ETCD_TLS_DIRECTORY, "readOnly": True})
        volumes.append({"name": "tls", "secret": {"secretName": tls_secret}})
    container = {
        "name": "etcd",
        "image": ETCD_IMAGE,
        "imagePullPolicy": "Never",
        "command": command,
        "ports": [{"containerPort": 2379}],
        "volumeMounts": mounts,
    }
    labels = {"app": "etcd"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "etcd"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [container], "volumes": volumes},
            },
        },
    }
    return [deployment, etcd_service("etcd", labels)]


def etcd_service(name: str, selector: dict[str, str]) -> dict[str, Any]:
    """A Service ``name`` on etcd's client port for the pods of ``selector``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": selector, "ports": [{"port": 2379, "targetPort": 2379}]},
    }


def start_etcd_pod(cluster: Cluster, namespace: str, objects: list[dict[str, Any]]) -> None:
    """Apply ``objects`` (:func:`etcd_pod` and what goes with it) and wait for the etcd."""
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all(objects))
    cluster.kubectl(
        "rollout", "status", "-n", namespace, "deployment/etcd", "--timeout=120s", timeout=150
    )


def shards_on_etcd_pod(
    cluster: Cluster, namespace: str, pki: Pki, version: str, replicas: int
) -> list[dict[str, Any]]:
    """An etcd pod and the Secrets of a root shard and shard-1 in ``namespace``; the two Shard
    objects at kcp ``version`` with ``replicas`` each on that etcd (not applied yet)."""
    start_etcd_pod(cluster, namespace, etcd_pod())
    secrets = shard_secrets(pki, namespace, "root", ["shard-1"])
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all(secrets))
    shards = []
    for name in ("root", "shard-1"):
        obj = shard_spec(
            name, namespace, version, f"v{version}", root=None if name == "root" else "root"
        )
        obj["spec"]["replicas"] = replicas
        endpoint = f"http://etcd.{namespace}.svc:2379"
        obj["spec"]["etcd"] = {"endpoints": [endpoint], "prefix": f"/{name}"}
        shards.append(obj)
    return shards


def installation_on_etcd_pod(
    cluster: Cluster, namespace: str, version: str, replicas: int, servers: bool = False
) -> list[dict[str, Any]]:
    """An etcd pod in ``namespace``, and a whole installation at kcp ``version`` on the
    operator's own PKI (not applied yet): CacheServer ``cache``, root and shard-1 with
    ``replicas`` each on that etcd and on the cache server, FrontProxy ``kcp``; with
    ``servers``, a VirtualWorkspaceServer of two replicas for each shard (named as it)."""
    start_etcd_pod(cluster, namespace, etcd_pod())
    repository, _ = kcp_image()
    image = {"repository": repository, "tag": f"v{version}", "pullPolicy": "Never"}
    on_cache = {"cache": {"serverRef": {"name": CACHE}}}
    objects: list[dict[str, Any]] = [
        _kcp_object("CacheServer", CACHE, {"version": version, "image": image}),
    ]
    for name in ("root", "shard-1"):
        spec: dict[str, Any] = {
            "version": version,
            "image": image,
            "replicas": replicas,
            "etcd": {"endpoints": [f"http://etcd.{namespace}.svc:2379"], "prefix": f"/{name}"},
            **on_cache,
        }
        if name != "root":
            spec["rootShardRef"] = {"name": "root"}
        objects.append(_kcp_object("Shard", name, spec))
        if servers:
            server = {"version": version, "image": image, "shardRef": {"name": name}}
            objects.append(_kcp_object("VirtualWorkspaceServer", name, server))
    proxy = {"version": version, "image": image, "rootShardRef": {"name": "root"}}
    objects.append(_kcp_object("FrontProxy", FRONT_PROXY, proxy))
    return objects


def _kcp_object(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


INSTALLATION = (("cacheserver", "cache"), ("shard", "root"), ("shard", "shard-1"))
CACHE = "cache"
FRONT_PROXY = "kcp"
"""The names of the installation's CacheServer and FrontProxy."""


def _installation(cluster: Cluster, namespace: str) -> list[tuple[str, str]]:
    """The CacheServer, both Shards, the VirtualWorkspaceServers there are and the
    FrontProxy, as (kind, name)."""
    servers = cluster.kubectl(
        "get", "virtualworkspaceservers", "-n", namespace, "-o", "name"
    ).split()
    found = [("virtualworkspaceserver", name.rpartition("/")[2]) for name in servers]
    return [*INSTALLATION, *found, ("frontproxy", FRONT_PROXY)]


def bump_installation(cluster: Cluster, namespace: str, version: str) -> None:
    """Set kcp ``version`` (and its image tag) on the CacheServer, both Shards, the
    VirtualWorkspaceServers and the FrontProxy at once, as a user upgrading the whole
    installation does."""
    patch = json.dumps({"spec": {"version": version, "image": {"tag": f"v{version}"}}})
    for kind, name in _installation(cluster, namespace):
        cluster.kubectl("patch", kind, name, "-n", namespace, "--type=merge", "-p", patch)


def installation_ready(cluster: Cluster, namespace: str, version: str) -> bool:
    """The CacheServer, both Shards, the VirtualWorkspaceServers and the FrontProxy Ready at
    kcp ``version``."""
    return all(
        shard_ready(kcp_object(cluster, namespace, kind, name), version)
        for kind, name in _installation(cluster, namespace)
    )


def kcp_object(cluster: Cluster, namespace: str, kind: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(
        cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json")
    )
    return obj


@contextmanager
def kcp_namespace(cluster: Cluster, prefix: str) -> Iterator[str]:
    """A fresh namespace for a test's Shards; afterwards its FrontProxies, Shards and
    CacheServers deleted while the operator runs (it removes their finalizers), then the
    namespace."""
    name = create_namespace(cluster, prefix)
    yield name
    delete_operated(cluster, name, timeout=120)
    delete_namespace(cluster, name)


def shard_object(cluster: Cluster, namespace: str, shard: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(
        cluster.kubectl("get", "shard", shard, "-n", namespace, "-o", "json")
    )
    return obj


def condition_of(cluster: Cluster, namespace: str, shard: str, type_: str) -> dict[str, Any]:
    return condition(shard_object(cluster, namespace, shard), type_)


def wait_version(
    cluster: Cluster, namespace: str, shards: tuple[str, ...], version: str, timeout: float
) -> None:
    def done() -> bool:
        return all(shard_ready(shard_object(cluster, namespace, s), version) for s in shards)

    wait_for(done, timeout, f"Shards {', '.join(shards)} Ready at kcp {version}", interval=3)


def wait_refused(cluster: Cluster, namespace: str, shards: tuple[str, ...], timeout: float) -> None:
    """Every Shard of ``shards`` reporting ``Degraded=True DowngradeRefused``."""

    def done() -> bool:
        return all(
            condition_of(cluster, namespace, shard, "Degraded").get("reason") == "DowngradeRefused"
            for shard in shards
        )

    wait_for(done, timeout, f"{', '.join(shards)} reporting DowngradeRefused", interval=2)


def wait_degraded_cleared(
    cluster: Cluster, namespace: str, shards: tuple[str, ...], timeout: float
) -> None:
    """Every Shard of ``shards`` reporting ``Degraded=False``."""

    def done() -> bool:
        return all(
            condition_of(cluster, namespace, shard, "Degraded").get("status") == "False"
            for shard in shards
        )

    wait_for(done, timeout, f"Degraded cleared on {', '.join(shards)}", interval=2)


def bump(cluster: Cluster, namespace: str, shards: tuple[str, ...], version: str) -> None:
    """Set the Shards' kcp version and image tag."""
    for shard in shards:
        patch = {"spec": {"version": version, "image": {"tag": f"v{version}"}}}
        cluster.kubectl(
            "patch", "shard", shard, "-n", namespace, "--type=merge", "-p", json.dumps(patch)
        )


def operator_metrics(cluster: Cluster) -> Scrape:
    """A scrape of the in-cluster operator's /metrics through its Service."""
    return parse(cluster.kubectl("get", "--raw", METRICS_PATH, timeout=15))


def readyz_via_service(cluster: Cluster, namespace: str, shard: str) -> str:
    """kcp's answer to /readyz through the shard's Service (the API server's service proxy)."""
    path = f"/api/v1/namespaces/{namespace}/services/https:{shard}-kcp:{KCP_PORT}/proxy/readyz"
    return cluster.kubectl("get", "--raw", path, timeout=15).strip()


class Forward:
    """``kubectl port-forward`` to one Service; :meth:`restart` starts it again (the pod it
    forwarded to may be gone: kubectl forwards to one pod and exits with it)."""

    def __init__(self, cluster: Cluster, namespace: str, service: str) -> None:
        self.cluster, self.namespace, self.service = cluster, namespace, service
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def url(self) -> str:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
        return f"https://127.0.0.1:{self.port}"

    def restart(self) -> None:
        with self._lock:
            self._close()
            self._start()

    def _start(self) -> None:
        self.port = free_port()
        self._proc = subprocess.Popen(
            [
                "kubectl", "port-forward", "-n", self.namespace, f"svc/{self.service}",
                f"{self.port}:{KCP_PORT}",
            ],
            env=dict(self.cluster.env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

        def listening() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", self.port)) == 0

        wait_for(listening, 30, f"port-forward to {self.namespace}/{self.service}")

    def _close(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)
            self._proc = None

    def close(self) -> None:
        with self._lock:
            self._close()


@contextmanager
def port_forward(cluster: Cluster, namespace: str, service: str) -> Iterator[int]:
    """A :class:`Forward` to the Service for the block; yields the local port."""
    forward = Forward(cluster, namespace, service)
    try:
        forward.url()
        yield forward.port
    finally:
        forward.close()


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


def pods(
    cluster: Cluster, namespace: str, shard: str, name: str | None = None
) -> list[dict[str, Any]]:
    """The pods of instance ``shard`` (of app ``name`` when given: kcp-front-proxy...)."""
    selector = f"app.kubernetes.io/instance={shard}"
    if name is not None:
        selector += f",app.kubernetes.io/name={name}"
    out = cluster.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def pod_ready(pod: dict[str, Any]) -> bool:
    return condition(pod, "Ready").get("status") == "True"


def describe_failure(cluster: Cluster, namespace: str) -> str:
    """Pods, events and kcp logs of ``namespace`` and the operator's log, for a failed test."""
    parts = []
    for args in (
        ("get", "pods,shards,cacheservers,vws,frontproxies", "-n", namespace, "-o", "wide"),
        ("get", "events", "-n", namespace, "--sort-by=.lastTimestamp"),
        ("logs", "-n", namespace, "-l", "app.kubernetes.io/part-of=kcp", "--tail=30", "--prefix"),
        ("logs", "-n", OPERATOR_NAMESPACE, "deploy/kcp-shard-operator", "--tail=40"),
    ):
        try:
            parts.append(cluster.kubectl(*args, timeout=30))
        except Exception as err:
            parts.append(f"kubectl {' '.join(args)}: {err}")
    return "\n".join(parts)


def timed(what: str, started: float) -> None:
    log(f"{what} after {time.monotonic() - started:.0f}s")
