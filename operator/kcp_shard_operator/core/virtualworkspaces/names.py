"""What other kinds know a VirtualWorkspaceServer by: which one serves a Shard, its children's
and Secrets' names, its URL (pure). Another kind imports this module and spec, nothing else."""

from __future__ import annotations

from collections.abc import Iterable

from kcp_shard_operator.core.kcp.podtemplate import PORT
from kcp_shard_operator.core.virtualworkspaces.spec import CHILD_SUFFIX, VirtualWorkspaceServer


def serving(
    servers: Iterable[VirtualWorkspaceServer], namespace: str, shard: str
) -> VirtualWorkspaceServer | None:
    """The server that runs the virtual workspaces of Shard ``namespace/shard``: the first by
    name of those naming it (more would serve alike, but the shard advertises one URL)."""
    named = sorted(
        (
            server
            for server in servers
            if server.namespace == namespace and server.spec.shard_ref.name == shard
        ),
        key=lambda server: server.name,
    )
    return named[0] if named else None


def shard_name(server: VirtualWorkspaceServer) -> str:
    return server.spec.shard_ref.name


def child_name(server: VirtualWorkspaceServer) -> str:
    return f"{server.name}{CHILD_SUFFIX}"


def service_url(server: VirtualWorkspaceServer) -> str:
    """Where its shard and the front-proxy reach it, and what the shard advertises
    (``--shard-virtual-workspace-url``): the APIExportEndpointSlices list it."""
    return f"https://{child_name(server)}.{server.namespace}.svc:{PORT}"


def serving_secret(server: VirtualWorkspaceServer) -> str:
    return f"{child_name(server)}-serving"


def kubeconfig_secret(server: VirtualWorkspaceServer) -> str:
    """Its kubeconfig to its shard (``--kubeconfig`` and ``--authentication-kubeconfig``)."""
    return f"{child_name(server)}-kubeconfig"


def shard_client_secret(shard: str) -> str:
    """The client certificate Shard ``shard`` proxies its own ``/services/`` requests to its
    virtual-workspace server with (``--shard-client-cert-file``), impersonating the user."""
    return f"{shard}-kcp-shard-client"


def serves(server: VirtualWorkspaceServer | None) -> VirtualWorkspaceServer | None:
    """``server`` once it is Ready (it has rolled out: its shard may switch its virtual
    workspaces to it, and the front-proxy send ``/services/`` there), else None."""
    if server is None:
        return None
    for found in (server.status or {}).get("conditions") or []:
        if found.get("type") == "Ready" and found.get("status") == "True":
            return server
    return None
