"""A watch that lists again after a gap: the store stops answering from what it held, every
kind is listed again in the namespaces that hold the operator's objects, and the owners of
what vanished meanwhile get a pass.

kopf lists again when it restarts a watch (a 410 Gone after the API server came back, a
listing that failed); it re-sends what exists and nothing for what was deleted meanwhile, and
a kind whose objects all went delivers nothing at all. The API server is one: a gap that
restarted one watch restarted them all, so a listing again of any kind doubts every kind.
"""

from __future__ import annotations

import logging

from kcp_shard_operator.controller.context import Context
from kcp_shard_operator.controller.reads import listing
from kcp_shard_operator.controller.watched import OWNER_KINDS
from kcp_shard_operator.kube.client import APIError, error_message

LOGGER = logging.getLogger(__name__)
RESYNC_KEY = ("resync",)


def listed(ctx: Context, kind: str) -> None:
    """The watch of ``kind`` delivered an object of a listing; when that starts a listing
    again, doubt the store and list every kind again."""
    if not ctx.relists.listed(kind, ctx.clock()):
        return
    ctx.metrics.relists.labels(kind).inc()
    doubted = ctx.store.doubt(ctx.store.namespaces(OWNER_KINDS))
    LOGGER.info(
        "the watch of %s listed again: the store is listed again (%d kinds and namespaces)",
        kind,
        len(doubted),
    )
    resync(ctx)


def resync(ctx: Context) -> None:
    """Request a listing of what the store doubts, unless nothing is doubted."""
    if ctx.store.doubted():
        ctx.passes.request(RESYNC_KEY, lambda: _list_doubted(ctx))


def _list_doubted(ctx: Context) -> None:
    """List each kind in each namespace the store doubts (the operator's own kinds first:
    what vanished of them tells which passes are owed); one that cannot be listed stays
    doubted until the next resync."""
    doubted = ctx.store.doubted()
    for kind, namespace in sorted(doubted, key=lambda key: (key[0] not in OWNER_KINDS, key)):
        try:
            listing(ctx, kind, namespace)
        except APIError as err:
            LOGGER.warning("could not list %s in %s: %s", kind, namespace, error_message(err))
