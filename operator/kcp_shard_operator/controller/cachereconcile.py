"""One reconcile pass over a CacheServer: issue its PKI, write its children, then status."""

from __future__ import annotations

import datetime

from kcp_shard_operator.constants import CACHE_SERVER_KIND
from kcp_shard_operator.controller.certificates import Issued, issue_requests
from kcp_shard_operator.controller.context import Context, Logger
from kcp_shard_operator.controller.reads import labelled_pods, read, read_cache_server
from kcp_shard_operator.controller.writes import UNCHANGED, write_child, write_status
from kcp_shard_operator.core import cachepki
from kcp_shard_operator.core.cacheserver import (
    child_name,
    claim_name,
    render_cache_server,
    selector_labels,
    serving_secret,
)
from kcp_shard_operator.core.cachespec import parse_cache_server
from kcp_shard_operator.core.cachestatus import CacheObservation, cache_server_status
from kcp_shard_operator.core.claim import refused_change
from kcp_shard_operator.core.model import JSON, SpecError
from kcp_shard_operator.core.planner import cause_of, drifted_from
from kcp_shard_operator.core.status import (
    DEGRADED,
    change_event,
    condition,
    deployment_revision,
    invalid_status,
    rollout_complete,
)
from kcp_shard_operator.kube.client import APIError, error_message, namespace_terminating

API_ERROR = "APIError"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def reconcile_cache_server(ctx: Context, namespace: str, name: str, logger: Logger) -> None:
    """One level-triggered pass; an unreachable API server ends it with one log line."""
    metrics = ctx.metrics
    with ctx.lock(namespace, f"{name}/cache-server"):
        started = ctx.clock()
        try:
            problem = _reconcile(ctx, namespace, name, logger)
        except APIError as err:
            problem = API_ERROR
            logger.error(
                "pass over CacheServer %s/%s stopped: %s", namespace, name, error_message(err)
            )
        metrics.passes.labels(CACHE_SERVER_KIND).inc()
        metrics.pass_seconds.labels(CACHE_SERVER_KIND).observe(ctx.clock() - started)
        if problem is not None:
            metrics.pass_errors.labels(CACHE_SERVER_KIND, problem).inc()


def _degraded_reason(status: JSON) -> str | None:
    degraded = condition(status, DEGRADED) or {}
    return str(degraded.get("reason")) if degraded.get("status") == "True" else None


def _reconcile(ctx: Context, namespace: str, name: str, logger: Logger) -> str | None:
    obj = read_cache_server(ctx, namespace, name)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None
    generation = int(obj["metadata"].get("generation", 0))
    try:
        cache = parse_cache_server(obj)
    except SpecError as err:
        status = invalid_status(obj.get("status"), generation, str(err), _now())
        write_status(ctx, obj, status)
        return _degraded_reason(status)
    requests = cachepki.requests(cache)
    issued = Issued()
    if requests:
        with ctx.lock(namespace, f"{name}/cache-pki"):
            ca = cachepki.ca_secret(cache)
            issued = issue_requests(ctx, namespace, ca, None, requests, logger)
    for issued_event in issued.events:
        ctx.announce(obj, issued_event)
    observed: dict[str, JSON | None] = {
        "Service": read(ctx, "v1", "Service", namespace, child_name(cache)),
        "PersistentVolumeClaim": read(
            ctx, "v1", "PersistentVolumeClaim", namespace, claim_name(cache)
        ),
        "Deployment": read(ctx, "apps/v1", "Deployment", namespace, child_name(cache)),
    }
    secret = serving_secret(cache)
    serving = read(ctx, "v1", "Secret", namespace, secret)
    revisions = {secret: str(((serving or {}).get("metadata") or {}).get("resourceVersion", ""))}
    rendered = render_cache_server(cache, revisions)
    failures: list[str] = []
    for child in rendered.objects:
        kind = child["kind"]
        live = observed.get(kind)
        child_ref = f"{kind} {child['metadata']['name']}"
        if kind == "PersistentVolumeClaim":
            refusal = refused_change(child, live)
            if refusal:
                failures.append(f"{child_ref}: {refusal}")
                continue
        if kind == "Deployment" and serving is None:
            # Without its serving certificate the pod cannot start: nothing is rolled.
            continue
        if not drifted_from(live, child):
            continue
        cause = cause_of(live, child)
        try:
            written, how = write_child(ctx, child, live)
        except APIError as err:
            if namespace_terminating(err):
                return None
            failures.append(f"{child_ref}: {error_message(err)}")
            logger.warning("could not write %s: %s", child_ref, error_message(err))
            continue
        observed[kind] = written
        if how == UNCHANGED:
            continue
        ctx.store.put(kind, written)
        logger.info("%s %s (%s)", how, child_ref, cause.value)
        event = change_event(
            kind, child["metadata"]["name"], cause.value, generation, CACHE_SERVER_KIND
        )
        if event is not None:
            ctx.announce(obj, event)
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
        missing_secrets=[] if serving is not None else [secret],
        pki_problems=issued.problems,
        certificates=issued.certificates,
    )
    status = cache_server_status(cache, seen, _now())
    write_status(ctx, obj, status, deployment_revision(deployment))
    return _degraded_reason(status)
