"""One reconcile pass over a CacheServer: issue its PKI, write its children, then status."""

from __future__ import annotations

from kcp_shard_operator.constants import CACHE_SERVER_KIND
from kcp_shard_operator.controller.certificates import Issued, issue_requests
from kcp_shard_operator.controller.context import Context, Logger
from kcp_shard_operator.controller.passes import (
    degraded_reason,
    delete_child,
    now,
    request_pass,
    write_children,
)
from kcp_shard_operator.controller.reads import labelled_pods, read, read_cache_server
from kcp_shard_operator.controller.writes import write_status
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.cacheserver import pki as cachepki
from kcp_shard_operator.core.cacheserver.names import ca_secret, child_name, claim_name
from kcp_shard_operator.core.cacheserver.render import (
    children_to_write,
    mounted_secrets,
    selector_labels,
)
from kcp_shard_operator.core.cacheserver.spec import parse_cache_server
from kcp_shard_operator.core.cacheserver.status import CacheObservation, cache_server_status
from kcp_shard_operator.core.status.conditions import invalid_status
from kcp_shard_operator.core.status.deployments import deployment_revision, rollout_complete


def reconcile_cache_server(ctx: Context, namespace: str, name: str, logger: Logger) -> None:
    """Request a level-triggered pass; an unreachable API server ends it with one log line."""
    request_pass(
        ctx,
        CACHE_SERVER_KIND,
        namespace,
        name,
        lambda: _reconcile(ctx, namespace, name, logger),
        logger,
    )


def _reconcile(ctx: Context, namespace: str, name: str, logger: Logger) -> str | None:
    obj = read_cache_server(ctx, namespace, name)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None
    generation = int(obj["metadata"].get("generation", 0))
    try:
        cache = parse_cache_server(obj)
    except SpecError as err:
        status = invalid_status(obj.get("status"), generation, str(err), now())
        write_status(ctx, obj, status)
        return degraded_reason(status)
    requests = cachepki.requests(cache)
    issued = Issued()
    if requests:
        with ctx.lock(namespace, f"{name}/cache-pki"):
            ca = ca_secret(cache)
            issued = issue_requests(ctx, namespace, ca, None, requests, logger)
    for issued_event in issued.events:
        ctx.announce(obj, issued_event)
    observed: dict[str, JSON | None] = {
        "NetworkPolicy": read(
            ctx, "networking.k8s.io/v1", "NetworkPolicy", namespace, child_name(cache)
        ),
        "Service": read(ctx, "v1", "Service", namespace, child_name(cache)),
        "PersistentVolumeClaim": read(
            ctx, "v1", "PersistentVolumeClaim", namespace, claim_name(cache)
        ),
        "Deployment": read(ctx, "apps/v1", "Deployment", namespace, child_name(cache)),
    }
    mounted = {
        secret: read(ctx, "v1", "Secret", namespace, secret) for secret in mounted_secrets(cache)
    }
    revisions = {
        secret: str(((found or {}).get("metadata") or {}).get("resourceVersion", ""))
        for secret, found in mounted.items()
    }
    missing = [secret for secret, found in mounted.items() if found is None]
    planned = children_to_write(cache, observed, revisions, not missing)
    written = write_children(ctx, obj, planned.writes, observed, logger)
    if written is None:
        return None
    failures = planned.refused + written
    policy = observed.get("NetworkPolicy")
    if planned.delete_network_policy and policy is not None:
        failures += delete_child(ctx, "networking.k8s.io/v1", policy)
    deployment = observed.get("Deployment")
    pods = (
        []
        if deployment is None or rollout_complete(deployment)
        else labelled_pods(ctx, namespace, selector_labels(cache))
    )
    seen = CacheObservation(
        deployment=deployment,
        pods=pods,
        apply_errors=failures,
        downgrade=planned.downgrade,
        missing_secrets=missing,
        pki_problems=issued.problems,
        certificates=issued.certificates,
    )
    status = cache_server_status(cache, seen, now())
    write_status(ctx, obj, status, deployment_revision(deployment))
    return degraded_reason(status)
