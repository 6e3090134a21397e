"""What the operator issues for a VirtualWorkspaceServer (pure), signed by the installation's
CA (its root Shard's): the serving certificate of its Service, which the shard and the
front-proxy verify with the installation's CA bundle, and its kubeconfig to the shard it
serves (``system:masters``: it watches every workspace of the shard, and reviews tokens
there). The shard's client certificate that reaches it is the shard's own
(:mod:`kcp_shard_operator.core.shard.pki`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kcp_shard_operator.constants import VIRTUAL_WORKSPACES_API_VERSION, VIRTUAL_WORKSPACES_KIND
from kcp_shard_operator.core.pki.issuance import (
    ADMIN_GROUP,
    Owner,
    Request,
    client_request,
    serving_request,
)
from kcp_shard_operator.core.shard.names import issues_client_certificates
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.virtualworkspaces.names import (
    child_name,
    kubeconfig_secret,
    serving_secret,
)
from kcp_shard_operator.core.virtualworkspaces.render import NAME, shard_kubeconfig_server
from kcp_shard_operator.core.virtualworkspaces.spec import VirtualWorkspaceServer

USER = "kcp-virtual-workspaces"
CONTEXT = "shard"


def owner(server: VirtualWorkspaceServer) -> Owner:
    return Owner(
        VIRTUAL_WORKSPACES_API_VERSION,
        VIRTUAL_WORKSPACES_KIND,
        server.name,
        server.namespace,
        server.uid,
        NAME,
    )


@dataclass(frozen=True)
class ServerRequests:
    """What the pass over a VirtualWorkspaceServer issues, and what it cannot."""

    by_installation_ca: list[Request] = field(default_factory=list)
    not_issued: list[str] = field(default_factory=list)


def requests(server: VirtualWorkspaceServer, shard: Shard, root: Shard) -> ServerRequests:
    """What ``server`` mounts of its own, once ``root`` (the root Shard of ``shard``'s
    installation) signs with a CA of the operator's that ``shard`` trusts."""
    if not (issues_client_certificates(root) and issues_client_certificates(shard)):
        why = (
            f"Shard {shard.name} or its root {root.name} sets spec.pki.issue false, serves "
            "the user's certificate or trusts the user's CA: the operator cannot issue "
            "certificates the shard trusts"
        )
        return ServerRequests(not_issued=[why])
    made_by = owner(server)
    pki = server.spec.as_pki
    return ServerRequests(
        [
            serving_request(serving_secret(server), made_by, pki, child_name(server)),
            client_request(
                kubeconfig_secret(server),
                made_by,
                pki,
                (f"{USER}:{server.name}", ADMIN_GROUP),
                server=shard_kubeconfig_server(shard),
                context=CONTEXT,
            ),
        ]
    )
