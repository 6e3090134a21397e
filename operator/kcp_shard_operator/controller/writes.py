"""What a pass writes: one child, falling back step by step when refused; the Shard's status."""

from __future__ import annotations

from collections.abc import Callable

from kcp_shard_operator.constants import (
    CACHE_SERVER_KIND,
    FIELD_MANAGER,
    FRONT_PROXY_KIND,
    VIRTUAL_WORKSPACES_KIND,
)
from kcp_shard_operator.controller.context import Context
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.installation.census import rollout_seconds
from kcp_shard_operator.core.rollout.drift import (
    RECREATABLE_KINDS,
    REPLACEABLE_KINDS,
    contains,
    foreign_fields,
    replacement,
)
from kcp_shard_operator.core.status.conditions import ROLLED_OUT
from kcp_shard_operator.core.status.events import events_between
from kcp_shard_operator.kube.client import RefusedError

UNCHANGED = "unchanged"
CONFLICT = 409
REPLACE_ATTEMPTS = 3
"""Replaces tried within one pass when each one conflicts (another writer came between the
read and the write): each retry reads the object again first."""


def write_child(ctx: Context, child: JSON, live: JSON | None) -> tuple[JSON, str]:
    """Bring one child to ``child``: apply, retried once; else replace; else recreate.

    Returns the object as written and how. Spec fields another manager added are put
    back by a replace at once (server-side apply would keep them).
    """
    replaceable = child["kind"] in REPLACEABLE_KINDS
    if live is not None and replaceable and foreign_fields(live, FIELD_MANAGER):
        return _read_again_on_conflict(ctx, child, live, _put_back)
    try:
        try:
            applied = ctx.kube.apply(child)
        except RefusedError:
            applied = ctx.kube.apply(child)
    except RefusedError:
        if live is None or not replaceable:
            # A claim the API server refuses stays as it is: it holds the shard's data.
            raise
        return _fall_back(ctx, child, live)
    if not contains(applied, child) and replaceable:
        return _read_again_on_conflict(ctx, child, applied, _replace)
    return applied, "applied"


def _put_back(ctx: Context, child: JSON, live: JSON) -> tuple[JSON, str]:
    """Replace ``live``, whose spec another manager changed, unless that changes nothing."""
    body = replacement(child, live)
    if contains(live, child):
        # Fields set to what the server would default them to anyway: nothing to put back.
        preview = ctx.kube.replace(body, dry_run=True)
        if preview.get("spec") == live.get("spec"):
            return live, UNCHANGED
    return ctx.kube.replace(body), "replaced"


def _replace(ctx: Context, child: JSON, live: JSON) -> tuple[JSON, str]:
    return ctx.kube.replace(replacement(child, live)), "replaced"


def _read_again_on_conflict(
    ctx: Context,
    child: JSON,
    live: JSON,
    write: Callable[[Context, JSON, JSON], tuple[JSON, str]],
) -> tuple[JSON, str]:
    """``write(ctx, child, live)``; on a conflict read the object again and retry (bounded).

    A conflict means the read was stale (the Deployment controller wrote the object after a
    hand edit, say), not that the rendering is wrong: only what still fails is reported.
    """
    meta = child["metadata"]
    for _ in range(REPLACE_ATTEMPTS - 1):
        try:
            return write(ctx, child, live)
        except RefusedError as err:
            if err.status != CONFLICT:
                raise
        fresh = ctx.kube.get(child["apiVersion"], child["kind"], meta["namespace"], meta["name"])
        if fresh is None:
            return ctx.kube.apply(child), "applied"
        live = fresh
    return write(ctx, child, live)


def _fall_back(ctx: Context, child: JSON, live: JSON) -> tuple[JSON, str]:
    try:
        return _read_again_on_conflict(ctx, child, live, _replace)
    except RefusedError as err:
        # A conflict that outlasts reading again is another writer racing this one, not an
        # object that cannot take the rendering: the next pass tries again. Recreating would
        # give a Service a new cluster IP.
        if child["kind"] not in RECREATABLE_KINDS or err.status == CONFLICT:
            raise
    meta = child["metadata"]
    ctx.kube.delete(child["apiVersion"], child["kind"], meta["namespace"], meta["name"])
    return ctx.kube.apply(child), "recreated"


def write_status(ctx: Context, obj: JSON, status: JSON, revision: str | None = None) -> None:
    """Write ``status`` unless the Shard has it already; post the Events of the change.

    ``revision`` is the Deployment's: ``RolledOut`` is posted once per revision, so a write
    that leaves the pod template alone (the update strategy going back from ``Recreate``)
    finishes no second rollout.
    """
    before = obj.get("status")
    if before == status:
        return
    meta = obj["metadata"]
    written = ctx.kube.patch_status(
        obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"], status
    )
    ctx.store.put(obj["kind"], written)
    uid = str(meta.get("uid", ""))
    for event in events_between(before, status):
        if event.reason == ROLLED_OUT and revision is not None:
            if ctx.rolled_out.get(uid) == revision:
                continue
            ctx.rolled_out[uid] = revision
        if event.reason == ROLLED_OUT:
            _observe_rollout(ctx, obj, before)
        ctx.announce(obj, event)


def _observe_rollout(ctx: Context, obj: JSON, before: JSON | None) -> None:
    """The finished rollout's duration, measured from its start in the status before."""
    took = rollout_seconds(before, ctx.epoch_clock())
    if took is not None:
        kind = obj.get("kind")
        role = (
            "cache-server"
            if kind == CACHE_SERVER_KIND
            else "front-proxy"
            if kind == FRONT_PROXY_KIND
            else "virtual-workspaces"
            if kind == VIRTUAL_WORKSPACES_KIND
            else "non-root"
            if (obj.get("spec") or {}).get("rootShardRef")
            else "root"
        )
        ctx.metrics.rollout_seconds.labels(role).observe(took)
