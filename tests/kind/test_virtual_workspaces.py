"""Standalone virtual-workspace servers on real pods: ``docs/examples/virtual-workspaces.yaml``
(a CacheServer, a root Shard, shard-1, a VirtualWorkspaceServer for each shard and a
FrontProxy) applied with kubectl into a namespace, nothing made by hand.

Each server's pods run kcp's ``virtual-workspaces`` from the kcp image; once a server is Ready
its shard rolls with its in-process virtual workspaces off and advertises the server's URL.
Then, through the front-proxy as its users' admin: a workspace on each shard is made Ready
(kcp's APIBinding initializer runs in the virtual-workspace server now), and an APIExport with
a resource, an APIBinding to it and an APIExportEndpointSlice in a workspace on shard-1 and
in one on the root. The URL shard-1's slice lists is its server's, and listing the resource
there is served by that server (its access log shows the request); the root's is listed
through the front-proxy (``/services/`` goes to the root's server: kcp's front-proxy has one
backend per path) and served by the root's server. The data made on both shards is intact
throughout, and once shard-1's server is deleted shard-1 runs its virtual workspaces itself
again, its data intact.

The switch is measured on the root, the shard whose virtual workspaces the front-proxy
reaches: a pod in the cluster lists the Widgets at the root's virtual-workspace URL through
the front-proxy every second (:class:`reader.FrontProxyReader`) while the root's server is
deleted (standalone -> in-process) and made again (in-process -> standalone); the failed
reads and the longest outage of each switch are printed and written to
``bench/results/virtual-workspaces-switch.json``. Every pod's log goes to the test's
``tmp_path`` (``kcp-logs/``) before the namespace is deleted.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from testkit.kcpapi import ShardAPI
from testkit.kcpdata import FRONT_PROXY, KcpData
from testkit.kube import Cluster
from testkit.tools import REPO, log
from testkit.wait import wait_for

from .durability import RESULTS, admin_kubeconfig, front_proxy_kubeconfig, shard_apis
from .kind import Forward, describe_failure, kcp_namespace, pod_ready, pods
from .reader import FrontProxyReader, Read, failures, longest_failure
from .virtualworkspaces import (
    container_args,
    exported,
    rolled_out,
    save_logs,
    served,
    services_backend,
    widgets_at,
    widgets_path,
)

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

EXAMPLE = REPO / "docs" / "examples" / "virtual-workspaces.yaml"
SHARDS = ("root", "shard-1")
START_TIMEOUT = 480
STANDALONE = "--run-virtual-workspaces=false"
SERVER_NAME = "kcp-virtual-workspaces"
FRONT_PROXY_DEPLOYMENT = "kcp-front-proxy"
READER_SECRET = "kcp-front-proxy-admin-kubeconfig"
"""The users' admin kubeconfig of FrontProxy ``kcp`` (its server is the front-proxy's Service)."""
SETTLE = 5
"""Reads after a switch has rolled out, before its window closes."""


@pytest.fixture
def namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    with kcp_namespace(kind_cluster, "kcp-vw") as name:
        yield name
        kind_cluster.kubectl("delete", "cacheservers", "--all", "-n", name, "--timeout=120s")


def example_in(namespace: str) -> list[dict[str, Any]]:
    """The example's objects in ``namespace``; the servers log every request (``--v=4``:
    the access log the test reads)."""
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d["kind"] != "Namespace"]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "VirtualWorkspaceServer":
            doc["spec"]["extraArgs"] = ["--v=4"]
    return docs


def phase(cluster: Cluster, namespace: str, kind: str, name: str) -> str:
    return cluster.kubectl("get", kind, name, "-n", namespace, "-o", "jsonpath={.status.phase}")


def installation_ready(cluster: Cluster, namespace: str, standalone: dict[str, bool]) -> bool:
    """Everything Ready, each shard rolled out with its virtual workspaces where
    ``standalone`` says."""
    names = [("cacheserver", "cache"), ("frontproxy", "kcp")]
    names += [("shard", name) for name in SHARDS]
    names += [("virtualworkspaceserver", name) for name, on in standalone.items() if on]
    if any(phase(cluster, namespace, kind, name) != "Ready" for kind, name in names):
        return False
    for shard in SHARDS:
        deployment = f"{shard}-kcp"
        if (STANDALONE in container_args(cluster, namespace, deployment)) != standalone[shard]:
            return False
        if not rolled_out(cluster, namespace, deployment):
            return False
    return True


def switched(cluster: Cluster, namespace: str, standalone: dict[str, bool]) -> bool:
    """:func:`installation_ready`, and the front-proxy rolled out with ``/services/`` going
    where the root's virtual workspaces run."""
    if not installation_ready(cluster, namespace, standalone):
        return False
    service = "root-vw" if standalone["root"] else "root-kcp"
    backend = f"https://{service}.{namespace}.svc:6443"
    return services_backend(cluster, namespace) == backend and rolled_out(
        cluster, namespace, FRONT_PROXY_DEPLOYMENT
    )


def switch_figures(
    reads: list[Read], windows: list[tuple[str, float, float]]
) -> list[dict[str, Any]]:
    """Per switch (name, wall-clock start, end): the reads of the root's virtual-workspace URL
    through the front-proxy, the failed ones, the longest outage and the first error;
    written to bench/results/virtual-workspaces-switch.json."""
    figures = []
    for name, start, end in windows:
        within = [r for r in reads if r.key == VW_KEY and start <= r.at <= end]
        failed = failures(reads, VW_KEY, start, end)
        figure = {
            "switch": name,
            "seconds": round(end - start, 1),
            "reads": len(within),
            "failed": len(failed),
            "longest_failure_seconds": round(longest_failure(reads, VW_KEY, start, end), 1),
            "first_error": f"{failed[0].status} {failed[0].error}"[:160] if failed else "",
            "failed_at": [round(r.at - start, 1) for r in failed],
        }
        figures.append(figure)
        log(f"reads of the root's virtual-workspace URL through the front-proxy, {name}: {figure}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "virtual-workspaces-switch.json"
    path.write_text(json.dumps(figures, indent=2) + "\n")
    return figures


VW_KEY = "root-vw"


def reads_since(reader: FrontProxyReader, since: float) -> bool:
    """Whether the reader has read :data:`SETTLE` times since ``since`` (wall clock)."""
    return len([r for r in reader.reads() if r.at > since]) >= SETTLE


def server_log(cluster: Cluster, namespace: str, server: str) -> str:
    """What every pod of virtual-workspace server ``server`` logged."""
    return "".join(
        cluster.kubectl("logs", "-n", namespace, pod["metadata"]["name"], timeout=60)
        for pod in pods(cluster, namespace, server, SERVER_NAME)
    )


def test_standalone_virtual_workspace_servers_serve_their_shards_virtual_workspaces(
    kind_cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    kubectl = kind_cluster.kubectl
    started = time.monotonic()
    kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(example_in(ns)))
    both = dict.fromkeys(SHARDS, True)
    try:
        wait_for(
            lambda: installation_ready(kind_cluster, ns, both),
            START_TIMEOUT,
            "everything Ready, both shards' virtual workspaces standalone",
            interval=3,
        )
        took = time.monotonic() - started
        log(f"Ready with standalone virtual workspaces {took:.0f}s after apply")
        log(kubectl("get", "cacheservers,shards,vws,frontproxies", "-n", ns))
        for server in SHARDS:
            server_pods = pods(kind_cluster, ns, server, SERVER_NAME)
            assert len(server_pods) == 2, server
            assert all(pod_ready(pod) for pod in server_pods), server
            assert server_pods[0]["spec"]["containers"][0]["command"] == ["/virtual-workspaces"]
            args = container_args(kind_cluster, ns, f"{server}-kcp")
            assert f"--shard-virtual-workspace-url=https://{server}-vw.{ns}.svc:6443" in args
        mapping = kubectl(
            "get", "configmap", "kcp-front-proxy-mapping", "-n", ns,
            "-o", "jsonpath={.data.mapping\\.yaml}",
        )  # fmt: skip
        backends = {e["path"]: e["backend"] for e in yaml.safe_load(mapping)}
        assert backends["/services/"] == f"https://root-vw.{ns}.svc:6443"

        kubeconfig = admin_kubeconfig(kind_cluster, ns, "root", tmp_path)
        users = front_proxy_kubeconfig(kind_cluster, ns, tmp_path)
        front_proxy = ("kcp-front-proxy", users)
        with shard_apis(kind_cluster, ns, kubeconfig, SHARDS, front_proxy) as apis:
            # Workspaces on both shards, made Ready by the APIBinding initializer, which runs
            # in the standalone servers now.
            data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="vw")
            front = apis[FRONT_PROXY]
            token = secrets.token_hex(3)

            _, url = exported(front, apis["shard-1"], token)
            log(f"the endpoint slice of shard-1's APIExport lists {url}")
            parts = urlsplit(url)
            assert parts.netloc == f"shard-1-vw.{ns}.svc:6443", url
            assert parts.path.startswith("/services/apiexport/"), url
            forward = Forward(kind_cluster, ns, "shard-1-vw")
            try:
                direct = ShardAPI("shard-1-vw", users, server=forward.url)
                assert widgets_at(direct, parts.path) == [f"w-{token}"]
            finally:
                forward.close()
            assert served(server_log(kind_cluster, ns, "shard-1"), parts.path), (
                "shard-1's virtual-workspace server served the listing"
            )

            _, root_url = exported(front, apis["root"], token)
            log(f"the endpoint slice of the root's APIExport lists {root_url}")
            root_path = urlsplit(root_url).path
            assert urlsplit(root_url).netloc == f"root-vw.{ns}.svc:6443", root_url
            assert widgets_at(front, root_path) == [f"w-{token}"], "through the front-proxy"
            assert served(server_log(kind_cluster, ns, "root"), root_path), (
                "the root's virtual-workspace server served the listing through the front-proxy"
            )
            data.assert_intact(apis, "with standalone virtual-workspace servers")

            switches = switch_root(kind_cluster, ns, root_path)
            for figure in switches:
                assert figure["reads"] > 0, figure
            assert widgets_at(front, root_path) == [f"w-{token}"], "after both switches"
            data.assert_intact(apis, "after the root's two switches")

            # Back to in-process: shard-1's server goes, shard-1 rolls without it.
            began = time.monotonic()
            kubectl("delete", "virtualworkspaceserver", "shard-1", "-n", ns, "--timeout=300s")
            back = {"root": True, "shard-1": False}
            wait_for(
                lambda: installation_ready(kind_cluster, ns, back),
                START_TIMEOUT,
                "shard-1 Ready with its virtual workspaces in-process again",
                interval=3,
            )
            took = time.monotonic() - began
            log(f"shard-1 in-process again, rolled out {took:.0f}s after the server's deletion")
            data.assert_intact(apis, "after shard-1 took its virtual workspaces back")
            again = KcpData.create(apis, tmp_path / "data-checks-after.txt", prefix="vw-back")
            again.assert_intact(apis, "new workspaces after shard-1 took them back")
    except BaseException:
        print(describe_failure(kind_cluster, ns))
        print(kubectl("get", "virtualworkspaceservers", "-n", ns, "-o", "yaml"))
        for server in SHARDS:
            print(server_log(kind_cluster, ns, server)[-6000:])
        raise
    finally:
        save_logs(kind_cluster, ns, tmp_path / "kcp-logs")


def switch_root(cluster: Cluster, namespace: str, root_path: str) -> list[dict[str, Any]]:
    """The root's virtual workspaces from its standalone server to in-process (the server
    deleted) and back (the server made again), while a pod lists the Widgets at
    ``root_path`` through the front-proxy every second; the figures of each switch."""
    ns, kubectl = namespace, cluster.kubectl
    server = next(
        doc
        for doc in example_in(ns)
        if doc["kind"] == "VirtualWorkspaceServer" and doc["metadata"]["name"] == "root"
    )

    def delete() -> None:
        kubectl("delete", "vws", "root", "-n", ns, "--timeout=300s", timeout=320)

    def create() -> None:
        kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(server))

    reader = FrontProxyReader(cluster, ns, READER_SECRET, {VW_KEY: widgets_path(root_path)})
    reader.start()
    windows: list[tuple[str, float, float]] = []
    try:
        wait_for(lambda: any(r.ok for r in reader.reads()), 60, "a good read of the URL")
        for name, act, root_standalone in (
            ("standalone -> in-process", delete, False),
            ("in-process -> standalone", create, True),
        ):
            began = time.time()
            act()
            log(f"the root's virtual workspaces {name}: begun")
            standalone = {"root": root_standalone, "shard-1": True}
            wait_for(
                partial(switched, cluster, ns, standalone),
                START_TIMEOUT,
                f"the root's virtual workspaces {name}, the front-proxy rolled out",
                interval=2,
            )
            done = time.time()
            log(f"the root's virtual workspaces {name}: rolled out in {done - began:.0f}s")
            wait_for(
                partial(reads_since, reader, done),
                60,
                f"{SETTLE} reads after the switch rolled out",
                interval=2,
            )
            windows.append((name, began, time.time()))
        reads = reader.reads()
    finally:
        reader.stop()
    figures = switch_figures(reads, windows)
    last = [r for r in reads if r.key == VW_KEY][-3:]
    assert last, "no reads"
    assert all(r.ok for r in last), f"reads failing after the switches: {last}"
    return figures
