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
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from testkit.kcpapi import ShardAPI
from testkit.kcpdata import FRONT_PROXY, WORKSPACES_PATH, KcpData
from testkit.kube import Cluster
from testkit.tools import REPO, log
from testkit.wait import wait_for

from .durability import admin_kubeconfig, front_proxy_kubeconfig, shard_apis
from .kind import Forward, describe_failure, kcp_namespace, pod_ready, pods

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

EXAMPLE = REPO / "docs" / "examples" / "virtual-workspaces.yaml"
SHARDS = ("root", "shard-1")
START_TIMEOUT = 480
STANDALONE = "--run-virtual-workspaces=false"
SERVER_NAME = "kcp-virtual-workspaces"
GROUP = "example.io"
APIS = "/apis/apis.kcp.io/v1alpha1"


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


def container_args(cluster: Cluster, namespace: str, deployment: str) -> list[str]:
    out = cluster.kubectl(
        "get", "deployment", deployment, "-n", namespace,
        "-o", "jsonpath={.spec.template.spec.containers[0].args}",
    )  # fmt: skip
    return list(yaml.safe_load(out) or [])


def rolled_out(cluster: Cluster, namespace: str, deployment: str) -> bool:
    out = cluster.kubectl(
        "get", "deployment", deployment, "-n", namespace,
        "-o", "jsonpath={.metadata.generation} {.status.observedGeneration} {.spec.replicas} "
        "{.status.updatedReplicas} {.status.readyReplicas} {.status.replicas}",
    )  # fmt: skip
    generation, observed, *counts = (out.split() + ["0"] * 6)[:6]
    return generation == observed and len(set(counts)) == 1


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


def server_log(cluster: Cluster, namespace: str, server: str) -> str:
    """What every pod of virtual-workspace server ``server`` logged."""
    return "".join(
        cluster.kubectl("logs", "-n", namespace, pod["metadata"]["name"], timeout=60)
        for pod in pods(cluster, namespace, server, SERVER_NAME)
    )


def exported(front: ShardAPI, shard: str, token: str) -> tuple[str, str]:
    """A workspace on ``shard`` (through the front-proxy) with an APIExport of a Widget
    resource, an APIBinding to it, a Widget and an APIExportEndpointSlice: the workspace
    path and the URL the slice lists for ``shard``'s virtual workspaces."""
    workspace = f"vw-exports-{shard}-{token}"
    path = f"root:{workspace}"
    front.create(
        WORKSPACES_PATH,
        {
            "apiVersion": "tenancy.kcp.io/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": workspace},
            "spec": {"location": {"selector": {"matchLabels": {"name": shard}}}},
        },
    )
    wait_for(
        lambda: (
            ((front.get(f"{WORKSPACES_PATH}/{workspace}") or {}).get("status") or {}).get("phase")
            == "Ready"
        ),
        120,
        f"workspace {workspace} Ready",
        interval=2,
    )
    here = f"/clusters/{path}"
    front.create(
        f"{here}{APIS}/apiresourceschemas",
        {
            "apiVersion": "apis.kcp.io/v1alpha1",
            "kind": "APIResourceSchema",
            "metadata": {"name": f"v1.widgets.{GROUP}"},
            "spec": {
                "group": GROUP,
                "names": {
                    "plural": "widgets",
                    "singular": "widget",
                    "kind": "Widget",
                    "listKind": "WidgetList",
                },
                "scope": "Namespaced",
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    }
                ],
            },
        },
    )
    export = {"path": path, "name": "widgets"}
    for resource, spec in (
        ("apiexports", {"latestResourceSchemas": [f"v1.widgets.{GROUP}"]}),
        ("apibindings", {"reference": {"export": export}}),
        ("apiexportendpointslices", {"export": export}),
    ):
        kind = {"apiexports": "APIExport", "apibindings": "APIBinding"}.get(
            resource, "APIExportEndpointSlice"
        )
        front.create(
            f"{here}{APIS}/{resource}",
            {
                "apiVersion": "apis.kcp.io/v1alpha1",
                "kind": kind,
                "metadata": {"name": "widgets"},
                "spec": spec,
            },
        )
    wait_for(
        lambda: (
            ((front.get(f"{here}{APIS}/apibindings/widgets") or {}).get("status") or {}).get(
                "phase"
            )
            == "Bound"
        ),
        120,
        f"APIBinding widgets in {path} Bound",
        interval=2,
    )
    widget = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": f"w-{token}"}}

    def created() -> bool:
        # The bound resource may take a moment to be served in the workspace.
        status, _ = front.request(
            "POST", f"{here}/apis/{GROUP}/v1/namespaces/default/widgets", widget
        )
        return status in (200, 201, 409)

    wait_for(created, 60, f"a Widget created in {path}", interval=2)

    def listed() -> str | None:
        slice_ = front.get(f"{here}{APIS}/apiexportendpointslices/widgets") or {}
        urls = [e.get("url", "") for e in (slice_.get("status") or {}).get("endpoints") or []]
        urls += [
            e.get("url", "") for e in (slice_.get("status") or {}).get("apiExportEndpoints") or []
        ]
        return next((url for url in urls if url), None)

    wait_for(lambda: listed() is not None, 120, f"the endpoint slice of {path} listing a URL")
    url = listed()
    assert url is not None
    return path, url


def served(log_text: str, url_path: str) -> bool:
    """Whether the access log (``--v=4``) holds a request for the Widgets under
    ``url_path``."""
    return any(
        "URI=" in line and url_path in line and f"/apis/{GROUP}/v1/widgets" in line
        for line in log_text.splitlines()
    )


def widgets_at(api: ShardAPI, url_path: str) -> list[str]:
    """The Widgets the virtual workspace at ``url_path`` lists in every workspace."""
    status, body = api.request("GET", f"{url_path}/clusters/*/apis/{GROUP}/v1/widgets")
    assert status == 200, f"GET {url_path}: {status} {body}"
    return sorted(item["metadata"]["name"] for item in body.get("items") or [])


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

            _, url = exported(front, "shard-1", token)
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

            _, root_url = exported(front, "root", token)
            log(f"the endpoint slice of the root's APIExport lists {root_url}")
            root_path = urlsplit(root_url).path
            assert urlsplit(root_url).netloc == f"root-vw.{ns}.svc:6443", root_url
            assert widgets_at(front, root_path) == [f"w-{token}"], "through the front-proxy"
            assert served(server_log(kind_cluster, ns, "root"), root_path), (
                "the root's virtual-workspace server served the listing through the front-proxy"
            )
            data.assert_intact(apis, "with standalone virtual-workspace servers")

            # Back to in-process: shard-1's server goes, shard-1 rolls without it.
            switched = time.monotonic()
            kubectl("delete", "virtualworkspaceserver", "shard-1", "-n", ns, "--timeout=120s")
            back = {"root": True, "shard-1": False}
            wait_for(
                lambda: installation_ready(kind_cluster, ns, back),
                START_TIMEOUT,
                "shard-1 Ready with its virtual workspaces in-process again",
                interval=3,
            )
            took = time.monotonic() - switched
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
