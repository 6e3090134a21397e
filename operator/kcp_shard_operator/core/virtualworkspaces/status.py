"""VirtualWorkspaceServer status from observed state (pure): conditions, phase, running
version.

``Ready`` is the Deployment rolled out at the spec's version: the pods' readiness probe is the
server's own ``/readyz``, which answers once it has resolved the core APIExport identities
and its informers on the shard (and the cache server) have synced.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.status.conditions import (
    READY,
    Condition,
    Progress,
    degraded_condition,
    object_status,
    phase_of,
    progressing_condition,
)
from kcp_shard_operator.core.status.deployments import (
    deployed_version,
    pod_problems,
    ready_replicas,
    rollout_complete,
)
from kcp_shard_operator.core.virtualworkspaces.names import service_url
from kcp_shard_operator.core.virtualworkspaces.plan import WAITING_FOR_SHARD
from kcp_shard_operator.core.virtualworkspaces.spec import VirtualWorkspaceServer


@dataclass(frozen=True)
class ServerObservation:
    """What the shell saw and decided in one pass over a VirtualWorkspaceServer."""

    deployment: JSON | None
    error: str | None = None
    error_reason: str = "InvalidSpec"
    waiting: str | None = None
    pods: list[JSON] = field(default_factory=list)
    apply_errors: list[str] = field(default_factory=list)
    missing_secrets: list[str] = field(default_factory=list)
    pki_problems: list[tuple[str, str]] = field(default_factory=list)
    certificates: list[JSON] = field(default_factory=list)


def _problems(seen: ServerObservation) -> list[tuple[str, str]]:
    found = [(seen.error_reason, seen.error)] if seen.error else []
    found += [("ApplyFailed", error) for error in seen.apply_errors]
    found += seen.pki_problems
    if seen.missing_secrets:
        found.append(
            (
                "SecretNotFound",
                "Secret(s) the virtual-workspace server mounts not found: "
                + ", ".join(seen.missing_secrets),
            )
        )
    found += [("PodsNotRunning", problem) for problem in pod_problems(seen.pods)]
    return found


def conditions_for(
    server: VirtualWorkspaceServer, seen: ServerObservation
) -> tuple[str, list[Condition]]:
    deployment = seen.deployment
    running = deployed_version(deployment)
    replicas = f"{ready_replicas(deployment)}/{server.spec.replicas} replicas"
    if rollout_complete(deployment):
        ready = Condition(READY, True, "RolledOut", f"kcp {running} on {replicas}")
    elif deployment is None:
        ready = Condition(READY, False, "NoDeployment", "the Deployment does not exist yet")
    else:
        ready = Condition(READY, False, "RollingOut", f"{replicas} ready")
    progress = Progress.of(
        server.spec.version,
        deployment,
        error=(seen.error_reason, seen.error) if seen.error else None,
        waiting=(WAITING_FOR_SHARD, seen.waiting) if seen.waiting else None,
    )
    problems = _problems(seen)
    phase = phase_of(progress, bool(problems))
    return phase, [ready, progressing_condition(progress), degraded_condition(problems)]


def virtual_workspaces_status(
    server: VirtualWorkspaceServer, seen: ServerObservation, now: str
) -> JSON:
    """The full status to write."""
    phase, conditions = conditions_for(server, seen)
    status = object_status(server, seen.deployment, phase, conditions, seen.certificates, now)
    status["readyReplicas"] = ready_replicas(seen.deployment)
    status["url"] = service_url(server)
    return status
