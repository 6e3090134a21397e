"""CacheServer status from observed state (pure): conditions, phase, running version.

``Ready`` is the Deployment rolled out at the spec's version: the pod's readiness probe is the
cache server's own ``/readyz`` (served without authentication), so a ready pod is a cache
server that answers. Shards naming the CacheServer wait for exactly this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.cacheserver.names import service_url
from kcp_shard_operator.core.cacheserver.pki import issues_kubeconfig
from kcp_shard_operator.core.cacheserver.spec import CacheServer
from kcp_shard_operator.core.pki.issuance import cache_kubeconfig_secret
from kcp_shard_operator.core.rollout.versions import DOWNGRADE_REFUSED
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
)


@dataclass(frozen=True)
class CacheObservation:
    """What the shell saw and did in one pass over a CacheServer."""

    deployment: JSON | None
    pods: list[JSON] = field(default_factory=list)
    apply_errors: list[str] = field(default_factory=list)
    downgrade: str | None = None
    """Why the cache server stays at the version it runs (an older minor was asked for)."""
    missing_secrets: list[str] = field(default_factory=list)
    pki_problems: list[tuple[str, str]] = field(default_factory=list)
    certificates: list[JSON] = field(default_factory=list)


def _problems(seen: CacheObservation) -> list[tuple[str, str]]:
    found = [(DOWNGRADE_REFUSED, seen.downgrade)] if seen.downgrade else []
    found += [("ApplyFailed", error) for error in seen.apply_errors]
    found += seen.pki_problems
    if seen.missing_secrets:
        found.append(
            (
                "SecretNotFound",
                "Secret(s) the cache server mounts not found: " + ", ".join(seen.missing_secrets),
            )
        )
    found += [("PodsNotRunning", problem) for problem in pod_problems(seen.pods)]
    return found


def conditions_for(cache: CacheServer, seen: CacheObservation) -> tuple[str, list[Condition]]:
    deployment = seen.deployment
    running = deployed_version(deployment)
    progress = Progress.of(
        cache.spec.version,
        deployment,
        error=(DOWNGRADE_REFUSED, seen.downgrade) if seen.downgrade else None,
    )
    if progress.done or (progress.complete and seen.downgrade):
        # A refused downgrade leaves the cache server serving at the version it runs.
        ready = Condition(READY, True, "RolledOut", f"kcp {running} cache server ready")
    elif deployment is None:
        ready = Condition(READY, False, "NoDeployment", "the Deployment does not exist yet")
    else:
        ready = Condition(READY, False, "RollingOut", f"rolling out kcp {cache.spec.version}")
    problems = _problems(seen)
    degraded = degraded_condition(problems)
    phase = phase_of(progress, bool(problems))
    return phase, [ready, progressing_condition(progress), degraded]


def cache_server_status(cache: CacheServer, seen: CacheObservation, now: str) -> JSON:
    """The full status to write."""
    phase, conditions = conditions_for(cache, seen)
    status = object_status(cache, seen.deployment, phase, conditions, seen.certificates, now)
    status["url"] = service_url(cache)
    if issues_kubeconfig(cache):
        status["kubeconfigSecret"] = cache_kubeconfig_secret(cache.name)
    return status
