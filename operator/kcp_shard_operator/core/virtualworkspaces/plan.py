"""What one pass over a VirtualWorkspaceServer should do (pure): apply, wait, or report an
error.

The server comes after its shard: it starts once its Shard is Ready (it reads the shard's
workspaces and, before the deprecating release, the core APIExport identities through it),
and rolls to a new kcp version once its shard runs that version or a newer one. From the
deprecating release on it reads the identities from the cache server, which its shard waits
for already. While it waits, the rest of its spec still applies at the version it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.kcp.podtemplate import secret_names
from kcp_shard_operator.core.kcp.secretkeys import absent_secrets
from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.core.rollout.drift import drifted_from
from kcp_shard_operator.core.rollout.versions import held_at_running_version
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.conditions import READY, condition
from kcp_shard_operator.core.status.deployments import deployed_version
from kcp_shard_operator.core.virtualworkspaces.names import shard_name
from kcp_shard_operator.core.virtualworkspaces.render import render_virtual_workspaces
from kcp_shard_operator.core.virtualworkspaces.spec import VirtualWorkspaceServer

POD_KINDS = frozenset({"Deployment", "PodDisruptionBudget"})
SHARD_NOT_FOUND = "ShardNotFound"
WAITING_FOR_SHARD = "WaitingForShard"


@dataclass(frozen=True)
class ServerPlan:
    """Objects to bring in line, and why nothing (or not everything) is applied."""

    apply: list[JSON] = field(default_factory=list)
    delete_pdb: bool = False
    waiting: str | None = None
    error: str | None = None
    error_reason: str = "InvalidSpec"
    missing_secrets: list[str] = field(default_factory=list)


def shard_ready(shard: Shard) -> bool:
    ready = condition(shard.status, READY) or {}
    return ready.get("status") == "True" and shard.status_version is not None


def waiting_for(
    server: VirtualWorkspaceServer, shard: Shard, deployment: JSON | None
) -> str | None:
    """What ``server`` waits for before it starts or rolls to its spec version (None: it
    may go ahead)."""
    wanted = server.spec.version
    if deployed_version(deployment) == wanted:
        return None
    if deployment is None:
        if shard_ready(shard):
            return None
        return (
            f"Shard {shard.name} is not Ready yet; the virtual-workspace server starts once it is"
        )
    running = shard.status_version
    if running is not None and running >= server.spec.kcp_version:
        return None
    return (
        f"Shard {shard.name} runs kcp {running or '(not rolled out yet)'}: the "
        f"virtual-workspace server rolls to kcp {wanted} once its shard runs it or newer"
    )


def plan_virtual_workspaces(
    server: VirtualWorkspaceServer,
    shard: Shard | None,
    observed: Mapping[str, JSON | None],
    deprecating_release: Version,
    secret_revisions: Mapping[str, str] | None = None,
    issued: frozenset[str] = frozenset(),
) -> ServerPlan:
    """Decide the pass for ``server``: ``shard`` is its Shard with the issued references
    filled in (None: not found), ``observed`` maps kind -> live child or None,
    ``secret_revisions`` the resourceVersions of the Secrets that exist, ``issued`` the
    Secrets the operator issues (not there yet: being issued, not "not found")."""
    if shard is None:
        return ServerPlan(
            error=f"Shard {shard_name(server)!r} (spec.shardRef) not found in {server.namespace}",
            error_reason=SHARD_NOT_FOUND,
        )
    deployment = observed.get("Deployment")
    waits = waiting_for(server, shard, deployment)
    held = None if waits is None else held_at_running_version(server, deployment)
    try:
        rendered = render_virtual_workspaces(
            held or server, shard, deprecating_release, secret_revisions
        )
    except SpecError as err:
        return ServerPlan(error=str(err))
    pod_spec = rendered.deployment["spec"]["template"]["spec"]
    absent = absent_secrets(secret_names(pod_spec), secret_revisions)
    objects = rendered.objects
    if deployment is None and (waits is not None or absent):
        objects = [obj for obj in objects if obj["kind"] not in POD_KINDS]
    return ServerPlan(
        apply=[obj for obj in objects if drifted_from(observed.get(obj["kind"]), obj)],
        delete_pdb=rendered.pdb is None and observed.get("PodDisruptionBudget") is not None,
        waiting=waits,
        missing_secrets=[name for name in absent if name not in issued],
    )
