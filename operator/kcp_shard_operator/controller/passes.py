"""What every kind of pass shares: the frame (lock, metrics, one log line for an unreachable
API server) and the writing of the children the pass decided on."""

from __future__ import annotations

import datetime
from collections.abc import Callable

from kcp_shard_operator.controller.context import Context, Logger
from kcp_shard_operator.controller.writes import CONFLICT, UNCHANGED, write_child
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.rollout.drift import cause_of
from kcp_shard_operator.core.status.conditions import DEGRADED, condition
from kcp_shard_operator.core.status.events import change_event
from kcp_shard_operator.kube.client import (
    APIError,
    RefusedError,
    error_message,
    namespace_terminating,
)

API_ERROR = "APIError"
CONFLICTED_PASSES_REPORTED = 3
"""Passes in a row whose write of a child conflicts before it is reported: until then the
other writer's change is a watch event that brings the next pass, which writes it again."""


def now() -> str:
    """The time a status condition changes, as the API stores it."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def degraded_reason(status: JSON) -> str | None:
    """The reason of ``Degraded=True`` in ``status``, None when it is not degraded."""
    degraded = condition(status, DEGRADED) or {}
    return str(degraded.get("reason")) if degraded.get("status") == "True" else None


def request_pass(
    ctx: Context,
    kind: str,
    namespace: str,
    name: str,
    run: Callable[[], str | None],
    logger: Logger,
) -> None:
    """Request ``run`` (a pass over the ``kind`` object ``namespace/name``, returning the
    reason of the problem it ended with) on ``ctx.passes``: one pass at a time per object, and
    the requests made while it runs fold into one more pass. Each pass is counted and timed;
    an unreachable or refusing API server ends it with one log line, never a traceback."""
    key = (kind, namespace, name)
    ctx.passes.request(key, lambda: _metered(ctx, key, run, logger))


def _metered(
    ctx: Context, key: tuple[str, str, str], run: Callable[[], str | None], logger: Logger
) -> None:
    kind, namespace, name = key
    metrics = ctx.metrics
    started = ctx.clock()
    try:
        problem = run()
    except APIError as err:
        problem = API_ERROR
        logger.error("pass over %s %s/%s stopped: %s", kind, namespace, name, error_message(err))
    metrics.passes.labels(kind).inc()
    metrics.pass_seconds.labels(kind).observe(ctx.clock() - started)
    if problem is not None:
        metrics.pass_errors.labels(kind, problem).inc()


def write_children(
    ctx: Context,
    obj: JSON,
    children: list[JSON],
    observed: dict[str, JSON | None],
    logger: Logger,
) -> list[str] | None:
    """Write each of ``children`` (one failing never stops the others), updating ``observed``
    (kind -> live child) and posting an Event for what a human should see; the failures, or
    None when the namespace is being deleted (nothing more is written there)."""
    owner, generation = obj["kind"], int(obj["metadata"].get("generation", 0))
    failures: list[str] = []
    for child in children:
        kind, child_ref = child["kind"], f"{child['kind']} {child['metadata']['name']}"
        live = observed.get(kind)
        cause = cause_of(live, child)
        try:
            written, how = write_child(ctx, child, live)
        except APIError as err:
            if namespace_terminating(err):
                return None
            if _racing(ctx, obj, kind, err):
                logger.info("%s changed under this write: the next pass writes it", child_ref)
                continue
            failures.append(f"{child_ref}: {error_message(err)}")
            logger.warning("could not write %s: %s", child_ref, error_message(err))
            continue
        ctx.conflicts.pop((str(obj["metadata"].get("uid", "")), kind), None)
        observed[kind] = written
        if how == UNCHANGED:
            continue
        ctx.store.put(kind, written)
        logger.info("%s %s (%s)", how, child_ref, cause.value)
        event = change_event(kind, child["metadata"]["name"], cause.value, generation, owner)
        if event is not None:
            ctx.announce(obj, event)
    return failures


def _racing(ctx: Context, obj: JSON, kind: str, err: Exception) -> bool:
    """Whether ``err`` is a conflict with another writer not yet worth reporting: fewer than
    ``CONFLICTED_PASSES_REPORTED`` passes in a row have had one for this child."""
    if not isinstance(err, RefusedError) or err.status != CONFLICT:
        return False
    key = (str(obj["metadata"].get("uid", "")), kind)
    ctx.conflicts[key] = ctx.conflicts.get(key, 0) + 1
    return ctx.conflicts[key] < CONFLICTED_PASSES_REPORTED


def delete_pdb(ctx: Context, live: JSON) -> list[str]:
    """Delete the PodDisruptionBudget ``live`` (its object went down to one replica); the
    failure, if any."""
    return delete_child(ctx, "policy/v1", live)


def delete_child(ctx: Context, api_version: str, live: JSON) -> list[str]:
    """Delete the child ``live`` the operator no longer renders; the failure, if any."""
    meta, kind = live["metadata"], live["kind"]
    namespace, name = meta["namespace"], meta["name"]
    try:
        ctx.kube.delete(api_version, kind, namespace, name)
    except APIError as err:
        return [f"{kind} {name}: {error_message(err)}"]
    ctx.store.deleted(kind, namespace, name, meta.get("uid"), meta.get("resourceVersion"))
    return []
