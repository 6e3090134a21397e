"""When a deleted VirtualWorkspaceServer may go (pure).

Deleting a server turns its shard's virtual workspaces back to in-process: the shard rolls
without ``--run-virtual-workspaces=false``, and a front-proxy that sent ``/services/`` to the
server rolls with its mapping back on the root shard. Until both have rolled out, pods of the
old shard and front-proxy revision still send ``/services/`` requests to the server (the
shard's own pods proxy what they get there). The operator keeps the server, and so its pods,
until nothing sends it requests any more: the switch back then costs no failed request beyond
what the shard's own rollout costs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.status.deployments import rollout_complete
from kcp_shard_operator.core.virtualworkspaces.names import service_url, shard_name
from kcp_shard_operator.core.virtualworkspaces.spec import VirtualWorkspaceServer

RELEASE_SECONDS = 900
"""How long a deleted server is kept at most for its shard and front-proxies to roll off it."""


def _mentions(obj: JSON | None, url: str) -> bool:
    return obj is not None and url in json.dumps(obj)


def still_sent_to(
    server: VirtualWorkspaceServer,
    shard_deployment: JSON | None,
    proxies: Mapping[str, tuple[JSON | None, JSON | None]],
) -> list[str]:
    """What still sends requests to the deleted ``server``: its shard's Deployment while its
    template names the server's URL or its rollout is not complete, and each front-proxy
    (name -> its mapping ConfigMap and Deployment) whose mapping names the URL or whose
    rollout is not complete. Empty: the server may go."""
    url = service_url(server)
    waiting = []
    if shard_deployment is not None and (
        _mentions(shard_deployment, url) or not rollout_complete(shard_deployment)
    ):
        waiting.append(
            f"Shard {shard_name(server)} has not rolled out with its virtual workspaces "
            "in-process yet"
        )
    for name, (mapping, deployment) in sorted(proxies.items()):
        if _mentions(mapping, url) or (deployment is not None and not rollout_complete(deployment)):
            waiting.append(f"FrontProxy {name} has not rolled out with /services/ off {url} yet")
    return waiting
