"""A sharded kcp on its own cache server, on real pods: ``docs/examples/cache-server.yaml``
applied with kubectl into a namespace, nothing made by hand. The CacheServer's pod runs kcp's
``cache-server`` from the kcp image; both shards start once it is Ready and mount its issued
kubeconfig as ``--cache-kubeconfig`` (the root's embedded cache is off); the root's core
APIExports are read back from the cache server with that kubeconfig's CA; a workspace on each
shard with objects inside (:mod:`testkit.kcpdata`) survives the cache server's pod being
replaced, and so does each shard's.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.kcpdata import KcpData
from testkit.kube import Cluster
from testkit.tools import REPO, log
from testkit.wait import wait_for

from .durability import admin_kubeconfig, replace_all_pods, shard_apis
from .kind import describe_failure, kcp_namespace, pod_ready, pods, port_forward

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

EXAMPLE = REPO / "docs" / "examples" / "cache-server.yaml"
SHARDS = ("root", "shard-1")
START_TIMEOUT = 420


@pytest.fixture
def namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    with kcp_namespace(kind_cluster, "kcp-cache") as name:
        yield name
        kind_cluster.kubectl("delete", "cacheservers", "--all", "-n", name, "--timeout=120s")


def example_in(namespace: str) -> list[dict[str, Any]]:
    """The example's objects, moved into ``namespace``."""
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d["kind"] != "Namespace"]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    return docs


def phase(cluster: Cluster, namespace: str, kind: str, name: str) -> str:
    return cluster.kubectl("get", kind, name, "-n", namespace, "-o", "jsonpath={.status.phase}")


def all_ready(cluster: Cluster, namespace: str) -> bool:
    return phase(cluster, namespace, "cacheserver", "cache") == "Ready" and all(
        phase(cluster, namespace, "shard", name) == "Ready" for name in SHARDS
    )


def cached_exports(cluster: Cluster, namespace: str) -> list[str]:
    """The APIExports the root shard wrote into the cache server, read as the shards read it
    (the issued kubeconfig's CA verifies the cache server's certificate)."""
    encoded = cluster.kubectl(
        "get", "secret", "cache-cache-kubeconfig", "-n", namespace,
        "-o", "jsonpath={.data.kubeconfig}",
    )  # fmt: skip
    config = json.loads(base64.b64decode(encoded))
    ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"])
    context = ssl.create_default_context(cadata=ca.decode())
    context.check_hostname = False
    path = "/services/cache/shards/root/clusters/*/apis/apis.kcp.io/v1alpha1/apiexports"
    with port_forward(cluster, namespace, "cache-cache") as port:
        request = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            items = json.loads(answer.read())["items"]
    return sorted(item["metadata"]["name"] for item in items)


def replace_cache_pod(cluster: Cluster, namespace: str) -> float:
    """Delete the cache server's pod; the seconds until a new one is Ready."""
    started = time.monotonic()
    old = {p["metadata"]["name"] for p in pods(cluster, namespace, "cache")}
    cluster.kubectl("delete", "pods", "-n", namespace, *old, "--wait=false")

    def replaced() -> bool:
        current = pods(cluster, namespace, "cache")
        fresh = [p for p in current if p["metadata"]["name"] not in old]
        return len(current) == 1 and len(fresh) == 1 and pod_ready(fresh[0])

    wait_for(replaced, START_TIMEOUT, "the cache server's pod replaced and Ready", interval=2)
    return time.monotonic() - started


def test_shards_run_on_the_cache_server_and_keep_their_data_when_it_restarts(
    kind_cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    kubectl = kind_cluster.kubectl
    started = time.monotonic()
    kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(example_in(ns)))
    try:
        wait_for(lambda: all_ready(kind_cluster, ns), START_TIMEOUT, "all Ready", interval=3)
        log(f"CacheServer and both Shards Ready {time.monotonic() - started:.0f}s after apply")
        listed = kubectl("get", "shards,cacheservers", "-n", ns)
        log(listed)
        cache_pod = pods(kind_cluster, ns, "cache")
        assert len(cache_pod) == 1
        assert pod_ready(cache_pod[0])
        assert cache_pod[0]["spec"]["containers"][0]["command"] == ["/cache-server"]
        for name in SHARDS:
            pod = pods(kind_cluster, ns, name)[0]
            args = pod["spec"]["containers"][0]["args"]
            assert any(arg.startswith("--cache-kubeconfig=") for arg in args), name
        exports = cached_exports(kind_cluster, ns)
        log(f"APIExports of the root in the cache server: {exports}")
        assert {"tenancy.kcp.io", "shards.core.kcp.io"} <= set(exports)

        kubeconfig = admin_kubeconfig(kind_cluster, ns, "root", tmp_path)
        with shard_apis(kind_cluster, ns, kubeconfig, SHARDS) as apis:
            data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="cache")
            took = replace_cache_pod(kind_cluster, ns)
            log(f"cache server pod replaced and Ready in {took:.0f}s")
            wait_for(lambda: all_ready(kind_cluster, ns), START_TIMEOUT, "all Ready again")
            data.assert_intact(apis, "after the cache server's pod was replaced")
            took = replace_all_pods(
                kind_cluster, ns, SHARDS, 1, START_TIMEOUT,
                lambda: kubectl("delete", "pods", "-n", ns, "-l", "app.kubernetes.io/name=kcp"),
            )  # fmt: skip
            log(f"both shards' pods replaced in {took:.0f}s")
            data.assert_intact(apis, "after both shards' pods were replaced")
        assert {"tenancy.kcp.io", "shards.core.kcp.io"} <= set(cached_exports(kind_cluster, ns))
    except BaseException:
        print(describe_failure(kind_cluster, ns))
        print(kubectl("get", "cacheservers", "-n", ns, "-o", "yaml"))
        raise
