"""An APIExport in a workspace and its virtual-workspace URL, as the kind tests of standalone
virtual-workspace servers make and read them; the pods' logs of a namespace kept for later."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from testkit.kcpapi import ShardAPI, UnreachableError
from testkit.kcpdata import WORKSPACES_PATH, unstick
from testkit.kube import Cluster, KubectlError
from testkit.tools import log
from testkit.wait import wait_for

GROUP = "example.io"
APIS = "/apis/apis.kcp.io/v1alpha1"


def exported(front: ShardAPI, on_shard: ShardAPI, token: str) -> tuple[str, str]:
    """A workspace on shard ``on_shard`` (made through the front-proxy) with an APIExport of
    a Widget resource, an APIBinding to it, a Widget and an APIExportEndpointSlice: the
    workspace path and the URL the slice lists for the shard's virtual workspaces."""
    shard = on_shard.name
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

    def ready() -> bool:
        found = front.get(f"{WORKSPACES_PATH}/{workspace}") or {}
        if (found.get("status") or {}).get("phase") == "Ready":
            return True
        cluster = (found.get("spec") or {}).get("cluster")
        if cluster:
            logical = f"/clusters/{cluster}/apis/core.kcp.io/v1alpha1/logicalclusters/cluster"
            unstick(front, on_shard, logical, on_shard.get(logical) or {})
        return False

    wait_for(ready, 120, f"workspace {workspace} Ready", interval=2)
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
    """The Widgets the virtual workspace at ``url_path`` lists in every workspace; asked
    again once when ``api`` did not answer (its port-forward's pod was replaced: the
    :class:`ShardAPI` has started it again)."""
    try:
        status, body = api.request("GET", widgets_path(url_path))
    except UnreachableError:
        status, body = api.request("GET", widgets_path(url_path))
    assert status == 200, f"GET {url_path}: {status} {body}"
    return sorted(item["metadata"]["name"] for item in body.get("items") or [])


def widgets_path(url_path: str) -> str:
    """The listing of every Widget under the virtual-workspace URL path ``url_path``."""
    return f"{url_path}/clusters/*/apis/{GROUP}/v1/widgets"


def save_logs(cluster: Cluster, namespace: str, folder: Path) -> None:
    """Every container's log (with timestamps, the previous container's too) into
    ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for pod in json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]:
        name = pod["metadata"]["name"]
        for previous in ("", "--previous"):
            try:
                text = cluster.kubectl(
                    "logs", "-n", namespace, name, "--all-containers", "--timestamps",
                    *([previous] if previous else []), timeout=60,
                )  # fmt: skip
            except KubectlError:  # no previous container, or the pod went
                continue
            (folder / f"{name}{previous.replace('--', '.')}.log").write_text(text)
    log(f"the pods' logs of {namespace} saved in {folder}")


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


def services_backend(cluster: Cluster, namespace: str) -> str:
    """Where the front-proxy's mapping sends ``/services/``."""
    mapping = cluster.kubectl(
        "get", "configmap", "kcp-front-proxy-mapping", "-n", namespace,
        "-o", "jsonpath={.data.mapping\\.yaml}",
    )  # fmt: skip
    return str({e["path"]: e["backend"] for e in yaml.safe_load(mapping)}["/services/"])
