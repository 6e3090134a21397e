"""FrontProxy status from observed state (pure): conditions, phase, running version.

``Ready`` is the Deployment rolled out at the spec's version and a request through the
front-proxy answered: kcp-front-proxy serves (and its readiness probe passes) once it has
resolved the root shard's identities, and the operator then reads the root workspace
through it with the issued admin kubeconfig, which proves the whole path (client
certificate, forwarding certificate trusted by the shard, routing to the root shard).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.frontproxy.names import (
    admin_kubeconfig_secret,
    external_url,
    service_url,
)
from kcp_shard_operator.core.frontproxy.spec import FrontProxy
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
    SETTLE_SECONDS,
    deployed_version,
    pod_problems,
    ready_replicas,
    rollout_complete,
)

ROUTING = "Routing"
ROUTED = "Routed"
NOT_ROUTING = "NotRouting"
UNREACHABLE = "Unreachable"
ROUTE_PATH = "/clusters/root/apis/core.kcp.io/v1alpha1/shards"
"""What the operator reads through the front-proxy: the root workspace's Shards, on the root
shard (every kcp serves them to kcp's global admin group)."""


@dataclass(frozen=True)
class Route:
    """What a request through the front-proxy gave: ``ok`` None when nobody asked."""

    ok: bool | None
    reason: str
    message: str


def settling(route: Route, since_rollout: float) -> bool:
    """Whether ``route`` is not to be reported yet: the front-proxy's Service could not be
    reached within SETTLE_SECONDS of its rollout's end (it does not route to the new pods
    yet). It is asked again after SETTLE_RETRY_SECONDS; an answer after the window is
    reported as it is."""
    return route.ok is False and route.reason == UNREACHABLE and 0 <= since_rollout < SETTLE_SECONDS


def interpret_route(url: str, status: int, body: JSON | None) -> Route:
    """What the answer to ``GET ROUTE_PATH`` through the front-proxy at ``url`` means."""
    where = f"GET {ROUTE_PATH} through {url}"
    if status == 200:
        items = (body or {}).get("items") or []
        return Route(True, ROUTED, f"{where}: {len(items)} shard(s) listed")
    reason = {401: "Unauthorized", 403: "Forbidden"}.get(status, NOT_ROUTING)
    text = str((body or {}).get("message") or f"HTTP {status}")
    return Route(False, reason, f"{where} answered {status}: {text}")


@dataclass(frozen=True)
class ProxyObservation:
    """What the shell saw and decided in one pass over a FrontProxy."""

    deployment: JSON | None
    error: str | None = None
    error_reason: str = "InvalidSpec"
    waiting: str | None = None
    waiting_reason: str = ""
    pods: list[JSON] = field(default_factory=list)
    apply_errors: list[str] = field(default_factory=list)
    missing_secrets: list[str] = field(default_factory=list)
    missing_keys: list[str] = field(default_factory=list)
    pki_problems: list[tuple[str, str]] = field(default_factory=list)
    certificates: list[JSON] = field(default_factory=list)
    route: Route | None = None
    """None while the front-proxy rolls out (nothing asked)."""


def _problems(seen: ProxyObservation) -> list[tuple[str, str]]:
    found = [(seen.error_reason, seen.error)] if seen.error else []
    found += [("ApplyFailed", error) for error in seen.apply_errors]
    found += seen.pki_problems
    if seen.missing_secrets:
        found.append(
            (
                "SecretNotFound",
                "Secret(s) the front-proxy mounts not found: " + ", ".join(seen.missing_secrets),
            )
        )
    found += [("SecretKeyNotFound", problem) for problem in seen.missing_keys]
    found += [("PodsNotRunning", problem) for problem in pod_problems(seen.pods)]
    if seen.route is not None and seen.route.ok is False:
        found.append((seen.route.reason, seen.route.message))
    return found


def conditions_for(proxy: FrontProxy, seen: ProxyObservation) -> tuple[str, list[Condition]]:
    deployment = seen.deployment
    running = deployed_version(deployment)
    complete = rollout_complete(deployment)
    ready_replicas = ((deployment or {}).get("status") or {}).get("readyReplicas", 0)
    replicas = f"{ready_replicas}/{proxy.spec.replicas} replicas"
    route = seen.route
    if complete and route is not None and route.ok is False:
        ready = Condition(READY, False, route.reason, route.message)
    elif complete:
        note = "" if route is not None and route.ok else " (not verified by the operator)"
        ready = Condition(READY, True, "RolledOut", f"kcp {running} on {replicas}{note}")
    elif deployment is None:
        ready = Condition(READY, False, "NoDeployment", "the Deployment does not exist yet")
    else:
        ready = Condition(READY, False, "RollingOut", f"{replicas} ready")
    progress = Progress.of(
        proxy.spec.version,
        deployment,
        error=(seen.error_reason, seen.error) if seen.error else None,
        waiting=(seen.waiting_reason, seen.waiting) if seen.waiting else None,
    )
    problems = _problems(seen)
    degraded = degraded_condition(problems)
    routing = (
        Condition(ROUTING, route.ok, route.reason, route.message)
        if route is not None
        else Condition(ROUTING, None, "RollingOut", "asked once the rollout is complete")
    )
    phase = phase_of(progress, bool(problems))
    return phase, [ready, progressing_condition(progress), degraded, routing]


def front_proxy_status(proxy: FrontProxy, seen: ProxyObservation, now: str) -> JSON:
    """The full status to write."""
    phase, conditions = conditions_for(proxy, seen)
    status = object_status(proxy, seen.deployment, phase, conditions, seen.certificates, now)
    status["readyReplicas"] = ready_replicas(seen.deployment)
    status["url"] = external_url(proxy)
    status["serviceURL"] = service_url(proxy)
    if proxy.spec.pki.issue:
        status["adminKubeconfigSecret"] = admin_kubeconfig_secret(proxy)
    return status
