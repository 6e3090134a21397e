"""kopf wiring: each event is recorded into the store, then calls for a reconcile pass."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import kopf

from kcp_shard_operator.constants import (
    API_GROUP,
    API_VERSION,
    CACHE_SERVER_API_VERSION,
    CACHE_SERVER_KIND,
    CACHE_SERVER_PLURAL,
    FIELD_MANAGER,
    FRONT_PROXY_API_VERSION,
    FRONT_PROXY_KIND,
    FRONT_PROXY_PLURAL,
    SHARD_API_VERSION,
    SHARD_KIND,
    SHARD_PLURAL,
)
from kcp_shard_operator.controller.cacheserver import reconcile_cache_server
from kcp_shard_operator.controller.context import Context, Logger
from kcp_shard_operator.controller.fanout import (
    cache_servers_using,
    front_proxies_using,
    reconcile_installation,
    reconcile_referencing,
    reconcile_with_dependents,
    shards_using_cache_server,
)
from kcp_shard_operator.controller.frontproxy import reconcile_front_proxy
from kcp_shard_operator.controller.shard import CHILD_KINDS, reconcile
from kcp_shard_operator.core.api.meta import INSTANCE_LABEL, NAME_LABEL
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.cacheserver.render import NAME as CACHE_SERVER_NAME

RESYNC_SECONDS = 30.0
RETAINED_CLAIMS = {CACHE_SERVER_NAME: CACHE_SERVER_KIND, "kcp": SHARD_KIND}
"""The kind of the owner of a claim that has no owner reference, by its name label (a Shard
where it has none)."""
FINALIZER = f"{API_GROUP}/finalizer"


def _context(memo: Any) -> Context:
    ctx = memo.context
    assert isinstance(ctx, Context)
    return ctx


def _remember(ctx: Context, kind: str, type: str | None, body: kopf.Body) -> None:
    """Keep what a watch delivered; a DELETED event leaves the object known as absent."""
    raw = cast(JSON, dict(body))
    if type is None:
        ctx.metrics.listed(kind, ctx.clock())
    if type == "DELETED":
        meta = raw.get("metadata") or {}
        ctx.store.deleted(kind, str(meta.get("namespace", "")), str(meta.get("name", "")))
    else:
        ctx.store.put(kind, raw)


def _finalized(meta: kopf.Meta) -> bool:
    """Whether kopf has put its finalizer on the object (or it is being deleted). Before it
    has, a status write would race with kopf's patch; the finalizer's own MODIFIED event brings
    the object back."""
    return FINALIZER in (meta.get("finalizers") or []) or bool(meta.get("deletionTimestamp"))


def on_shard_event(
    *,
    type: str,
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    namespace: str | None,
    name: str,
    memo: Any,
    logger: Logger,
    **_: Any,
) -> None:
    ctx = _context(memo)
    _remember(ctx, SHARD_KIND, type, body)
    if type == "DELETED" or namespace is None or not _finalized(meta):
        return
    reconcile_with_dependents(ctx, namespace, name, spec, logger)


def on_cache_server_event(
    *,
    type: str,
    body: kopf.Body,
    meta: kopf.Meta,
    namespace: str | None,
    name: str,
    memo: Any,
    logger: Logger,
    **_: Any,
) -> None:
    """A pass over the CacheServer, then over each Shard naming it (which waits for it)."""
    ctx = _context(memo)
    _remember(ctx, CACHE_SERVER_KIND, type, body)
    if namespace is None:
        return
    if type != "DELETED":
        if not _finalized(meta):
            return
        reconcile_cache_server(ctx, namespace, name, logger)
    for shard in shards_using_cache_server(ctx, namespace, name):
        reconcile(ctx, namespace, shard, logger)


def on_front_proxy_event(
    *,
    type: str,
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    namespace: str | None,
    name: str,
    memo: Any,
    logger: Logger,
    **_: Any,
) -> None:
    """A pass over the FrontProxy, then over the Shards of its installation: they trust it,
    advertise its URL and reach LogicalClusters through it (also once it is deleted)."""
    ctx = _context(memo)
    _remember(ctx, FRONT_PROXY_KIND, type, body)
    if namespace is None:
        return
    if type != "DELETED":
        if not _finalized(meta):
            return
        reconcile_front_proxy(ctx, namespace, name, logger)
    root = (spec.get("rootShardRef") or {}).get("name")
    if root:
        reconcile_installation(ctx, namespace, str(root), logger)


Pass = Callable[[Context, str, str, Logger], None]


def _resync(run: Pass) -> Callable[..., None]:
    """The timer handler of a kind: one pass every RESYNC_SECONDS, whatever happened."""

    def on_timer(*, namespace: str | None, name: str, memo: Any, logger: Logger, **_: Any) -> None:
        if namespace is not None:
            run(_context(memo), namespace, name, logger)

    return on_timer


def on_child_event(
    *,
    type: str,
    body: kopf.Body,
    namespace: str | None,
    meta: kopf.Meta,
    memo: Any,
    logger: Logger,
    **_: Any,
) -> None:
    ctx = _context(memo)
    _remember(ctx, str(body.get("kind", "")), type, body)
    if namespace is None:
        return
    for cache in _owners(meta, CACHE_SERVER_KIND, CACHE_SERVER_API_VERSION):
        reconcile_cache_server(ctx, namespace, cache, logger)
    for proxy in _owners(meta, FRONT_PROXY_KIND, FRONT_PROXY_API_VERSION):
        reconcile_front_proxy(ctx, namespace, proxy, logger)
    for shard in _owners(meta, SHARD_KIND, SHARD_API_VERSION):
        reconcile(ctx, namespace, shard, logger)


def _owners(meta: kopf.Meta, kind: str, api_version: str) -> list[str]:
    """The objects of ``kind`` a child belongs to: its owner, or for a retained claim (which
    has no owner reference, so that it outlives its owner) the instance label, where the
    name label says the kind."""
    owners = [
        owner["name"]
        for owner in meta.get("ownerReferences") or []
        if owner.get("kind") == kind and owner.get("apiVersion") == api_version
    ]
    if owners or meta.get("ownerReferences"):
        return owners
    labels = meta.get("labels") or {}
    instance = labels.get(INSTANCE_LABEL)
    owner_kind = RETAINED_CLAIMS.get(str(labels.get(NAME_LABEL, "kcp")))
    return [instance] if instance and owner_kind == kind else []


def on_pod_event(*, type: str | None, body: kopf.Body, memo: Any, **_: Any) -> None:
    """Keep the shard pods' state for the next pass (a Deployment event or the resync)."""
    _remember(_context(memo), "Pod", type, body)


def on_secret_event(
    *,
    type: str | None,
    body: kopf.Body,
    namespace: str | None,
    name: str,
    memo: Any,
    logger: Logger,
    **_: Any,
) -> None:
    """Remember the Secret's metadata; a created or rotated one rolls its shards' pods, a
    deleted one that the operator issued is issued again.

    The initial listing (type None) only fills the store.
    """
    ctx = _context(memo)
    _remember(ctx, "Secret", type, body)
    if type not in ("ADDED", "MODIFIED", "DELETED") or namespace is None:
        return
    for cache in cache_servers_using(ctx, namespace, name):
        reconcile_cache_server(ctx, namespace, cache, logger)
    for proxy in front_proxies_using(ctx, namespace, name):
        reconcile_front_proxy(ctx, namespace, proxy, logger)
    reconcile_referencing(ctx, namespace, name, logger)


def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    settings.peering.lifetime = _context(memo).settings.peering_lifetime
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = FINALIZER
    # Events are posted explicitly for what a human should see; kopf's log lines stay logs.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.networking.error_backoffs = [1, 2, 5, 10, 30]


def register(registry: kopf.OperatorRegistry) -> None:
    """Attach the handlers to ``registry``."""
    shards = kopf.on.event(API_GROUP, API_VERSION, SHARD_PLURAL, registry=registry)
    shards(on_shard_event)
    caches = kopf.on.event(API_GROUP, API_VERSION, CACHE_SERVER_PLURAL, registry=registry)
    caches(on_cache_server_event)
    proxies = kopf.on.event(API_GROUP, API_VERSION, FRONT_PROXY_PLURAL, registry=registry)
    proxies(on_front_proxy_event)
    for plural, run, handler_id in (
        (SHARD_PLURAL, reconcile, "on_shard_timer"),
        (CACHE_SERVER_PLURAL, reconcile_cache_server, "on_cache_server_timer"),
        (FRONT_PROXY_PLURAL, reconcile_front_proxy, "on_front_proxy_timer"),
    ):
        timer = kopf.timer(
            API_GROUP,
            API_VERSION,
            plural,
            id=handler_id,
            interval=RESYNC_SECONDS,
            initial_delay=RESYNC_SECONDS,
            registry=registry,
        )
        timer(_resync(run))
    managed = {"app.kubernetes.io/managed-by": FIELD_MANAGER}
    for api_version, _, plural in (*CHILD_KINDS, ("v1", "ConfigMap", "configmaps")):
        watch = kopf.on.event(api_version, plural, labels=managed, registry=registry)
        watch(on_child_event)
    kopf.on.event("v1", "pods", labels=managed, registry=registry)(on_pod_event)
    kopf.on.event("v1", "secrets", registry=registry)(on_secret_event)
    kopf.on.startup(registry=registry)(configure)
