"""kopf wiring: each event is recorded into the store, then calls for reconcile passes.

The handlers return at once: the passes run on the context's pass runner, coalesced per
object (:mod:`schedule`), and the kcp probes and the identity-cache cleanup on its background
runner. What a listing finds gone (:mod:`resync`) gets the reaction a DELETED event gets.
Every object gets a pass once per RESYNC_SECONDS besides (:mod:`periodic`). kopf puts its
finalizer only on the kinds with a deletion handler (Kubeconfig, VirtualWorkspaceServer).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

import kopf

from kcp_shard_operator.constants import (
    API_GROUP,
    API_VERSION,
    CACHE_SERVER_API_VERSION,
    CACHE_SERVER_KIND,
    CACHE_SERVER_PLURAL,
    FRONT_PROXY_API_VERSION,
    FRONT_PROXY_KIND,
    FRONT_PROXY_PLURAL,
    KUBECONFIG_API_VERSION,
    KUBECONFIG_KIND,
    KUBECONFIG_PLURAL,
    SHARD_API_VERSION,
    SHARD_KIND,
    SHARD_PLURAL,
    VIRTUAL_WORKSPACES_API_VERSION,
    VIRTUAL_WORKSPACES_KIND,
    VIRTUAL_WORKSPACES_PLURAL,
)
from kcp_shard_operator.controller import resync
from kcp_shard_operator.controller.cacheserver import reconcile_cache_server
from kcp_shard_operator.controller.context import Context, Logger
from kcp_shard_operator.controller.fanout import (
    cache_servers_using,
    front_proxies_using,
    reconcile_installation,
    reconcile_referencing,
    reconcile_with_dependents,
    shards_using_cache_server,
    virtual_workspaces_using,
)
from kcp_shard_operator.controller.frontproxy import reconcile_front_proxy
from kcp_shard_operator.controller.kubeconfig import reconcile_kubeconfig, release
from kcp_shard_operator.controller.peering import follow, unfollow
from kcp_shard_operator.controller.periodic import Periodic, Work
from kcp_shard_operator.controller.reads import front_proxies
from kcp_shard_operator.controller.schedule import pool
from kcp_shard_operator.controller.shard import reconcile
from kcp_shard_operator.controller.virtualworkspaces import (
    reconcile_virtual_workspaces,
    still_sent_to_deleted,
)
from kcp_shard_operator.controller.watched import CHILDREN, OWNER_KINDS, PODS, SECRETS
from kcp_shard_operator.core.api.meta import INSTANCE_LABEL, NAME_LABEL
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.restore import in_progress
from kcp_shard_operator.core.cacheserver.render import NAME as CACHE_SERVER_NAME
from kcp_shard_operator.core.virtualworkspaces.release import RELEASE_SECONDS

RESYNC_SECONDS = 30.0
WATCH_INACTIVITY_SECONDS = 70.0
"""A watch that delivers nothing for this long, not even the API server's bookmark (one a
minute), is taken for dead and reconnected (kopf's ``inactivity_timeout``)."""
OBJECT_WORKER_IDLE_SECONDS = 1.0
"""How long kopf keeps an object's worker task after its last event (kopf's ``idle_timeout``,
5 s by default). An idle worker holds the last event's whole body (a Secret's with its keys):
in a burst of thousands of events the default kept that many bodies 5 s longer."""
PASS_WORKERS = 8
"""Passes over different objects that run at once."""
BACKGROUND_WORKERS = 4
"""kcp probes and identity-cache cleanups that run at once (each up to 15 or 30 s)."""
RETAINED_CLAIMS = {CACHE_SERVER_NAME: CACHE_SERVER_KIND, "kcp": SHARD_KIND}
"""The kind of the owner of a claim that has no owner reference, by its name label (a Shard
where it has none)."""
FINALIZER = f"{API_GROUP}/finalizer"
LOGGER = logging.getLogger(__name__)

React = Callable[[Context, str | None, JSON, Logger], None]
"""What an event of a type (None: a listing's) about an object does."""


def _context(memo: Any) -> Context:
    ctx = memo.context
    assert isinstance(ctx, Context)
    return ctx


def _remember(ctx: Context, kind: str, type: str | None, body: JSON) -> None:
    """Keep what a watch delivered; a DELETED event leaves the object known as absent (and
    the context forgets what it kept about a deleted Shard, CacheServer or FrontProxy, or
    the CA a deleted Secret held)."""
    meta = body.get("metadata") or {}
    if type != "DELETED":
        ctx.store.put(kind, body)
        return
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    ctx.store.deleted(kind, namespace, name, uid, version)
    if kind in OWNER_KINDS:
        ctx.forget(namespace, name, str(uid or ""))
    elif kind == "Secret":
        ctx.signers.pop(f"{namespace}/{name}", None)


def _finalized(meta: Mapping[str, Any]) -> bool:
    """Whether kopf has put its finalizer on an object of a kind with a deletion handler (or it
    is being deleted). Before it has, a status write would race with kopf's patch; the
    finalizer's own MODIFIED event brings the object back."""
    return FINALIZER in (meta.get("finalizers") or []) or bool(meta.get("deletionTimestamp"))


def _where(body: JSON) -> tuple[str | None, str, JSON]:
    meta = body.get("metadata") or {}
    return meta.get("namespace"), str(meta.get("name", "")), meta


def on_shard(ctx: Context, type: str | None, body: JSON, logger: Logger) -> None:
    _remember(ctx, SHARD_KIND, type, body)
    namespace, name, _ = _where(body)
    if type == "DELETED" or namespace is None:
        return
    spec = body.get("spec") or {}
    reconcile_with_dependents(ctx, namespace, name, spec, logger)
    root = (spec.get("rootShardRef") or {}).get("name")
    if root and in_progress(body.get("status")) is not None:
        # A root restored with its installation waits for its shards to stop.
        reconcile(ctx, namespace, str(root), logger)


def on_cache_server(ctx: Context, type: str | None, body: JSON, logger: Logger) -> None:
    """A pass over the CacheServer, then over each Shard naming it (which waits for it)."""
    _remember(ctx, CACHE_SERVER_KIND, type, body)
    namespace, name, _ = _where(body)
    if namespace is None:
        return
    if type != "DELETED":
        reconcile_cache_server(ctx, namespace, name, logger)
    for shard in shards_using_cache_server(ctx, namespace, name):
        reconcile(ctx, namespace, shard, logger)


def on_front_proxy(ctx: Context, type: str | None, body: JSON, logger: Logger) -> None:
    """A pass over the FrontProxy, then over the Shards of its installation: they trust it,
    advertise its URL and reach LogicalClusters through it (also once it is deleted)."""
    _remember(ctx, FRONT_PROXY_KIND, type, body)
    namespace, name, _ = _where(body)
    if namespace is None:
        return
    if type != "DELETED":
        reconcile_front_proxy(ctx, namespace, name, logger)
    root = ((body.get("spec") or {}).get("rootShardRef") or {}).get("name")
    if root:
        reconcile_installation(ctx, namespace, str(root), logger)


def on_virtual_workspaces(ctx: Context, type: str | None, body: JSON, logger: Logger) -> None:
    """A pass over the VirtualWorkspaceServer, then over the Shard it serves (which switches
    its virtual workspaces to it once it is Ready, and back once it is gone) and the
    FrontProxies of the namespace (the root's server takes ``/services/``)."""
    _remember(ctx, VIRTUAL_WORKSPACES_KIND, type, body)
    namespace, name, meta = _where(body)
    if namespace is None:
        return
    if type != "DELETED":
        if not _finalized(meta):
            return
        reconcile_virtual_workspaces(ctx, namespace, name, logger)
    shard = ((body.get("spec") or {}).get("shardRef") or {}).get("name")
    if shard:
        reconcile(ctx, namespace, str(shard), logger)
    for proxy in front_proxies(ctx, namespace):
        reconcile_front_proxy(ctx, namespace, proxy.name, logger)


def on_kubeconfig(ctx: Context, type: str | None, body: JSON, logger: Logger) -> None:
    """A pass over the Kubeconfig (its deletion is :func:`on_kubeconfig_deleted`'s)."""
    _remember(ctx, KUBECONFIG_KIND, type, body)
    namespace, name, meta = _where(body)
    if type == "DELETED" or namespace is None or not _finalized(meta):
        return
    reconcile_kubeconfig(ctx, namespace, name, logger)


RELEASE_RETRIES = 20
RELEASE_DELAY_SECONDS = 6
"""A deleted Kubeconfig whose ClusterRoleBindings cannot be removed is tried again for about
two minutes, then let go (its bindings stay in kcp; the log says which)."""


def on_kubeconfig_deleted(*, body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
    """Remove the ClusterRoleBindings the Kubeconfig made before kopf's finalizer goes."""
    problems = release(_context(memo), cast(JSON, dict(body)), logger)
    if problems:
        raise kopf.TemporaryError("; ".join(problems), delay=RELEASE_DELAY_SECONDS)


SERVER_RELEASE_DELAY_SECONDS = 5


def on_virtual_workspaces_deleted(*, body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
    """Keep a deleted VirtualWorkspaceServer (its pods) until its shard and the front-proxies
    have rolled off it (at most about RELEASE_SECONDS, then let go)."""
    waiting = still_sent_to_deleted(_context(memo), cast(JSON, dict(body)))
    if waiting:
        raise kopf.TemporaryError("; ".join(waiting), delay=SERVER_RELEASE_DELAY_SECONDS)


def on_child(ctx: Context, type: str | None, body: JSON, logger: Logger) -> None:
    """A pass over each object the child belongs to."""
    _remember(ctx, str(body.get("kind", "")), type, body)
    namespace, _, meta = _where(body)
    if namespace is None:
        return
    for cache in _owners(meta, CACHE_SERVER_KIND, CACHE_SERVER_API_VERSION):
        reconcile_cache_server(ctx, namespace, cache, logger)
    for proxy in _owners(meta, FRONT_PROXY_KIND, FRONT_PROXY_API_VERSION):
        reconcile_front_proxy(ctx, namespace, proxy, logger)
    for shard in _owners(meta, SHARD_KIND, SHARD_API_VERSION):
        reconcile(ctx, namespace, shard, logger)
    for server in _owners(meta, VIRTUAL_WORKSPACES_KIND, VIRTUAL_WORKSPACES_API_VERSION):
        reconcile_virtual_workspaces(ctx, namespace, server, logger)


def _owners(meta: Mapping[str, Any], kind: str, api_version: str) -> list[str]:
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


def on_pod(ctx: Context, type: str | None, body: JSON, logger: Logger) -> None:
    """Keep the shard pods' state for the next pass (a Deployment event or the resync)."""
    _remember(ctx, "Pod", type, body)


def on_secret(ctx: Context, type: str | None, body: JSON, logger: Logger) -> None:
    """Remember the Secret's metadata; a created or rotated one rolls its shards' pods, a
    deleted one that the operator issued is issued again.

    A listing's event (type None) only fills the store.
    """
    _remember(ctx, "Secret", type, body)
    namespace, name, meta = _where(body)
    if type not in ("ADDED", "MODIFIED", "DELETED") or namespace is None:
        return
    for cache in cache_servers_using(ctx, namespace, name):
        reconcile_cache_server(ctx, namespace, cache, logger)
    for proxy in front_proxies_using(ctx, namespace, name):
        reconcile_front_proxy(ctx, namespace, proxy, logger)
    for server in virtual_workspaces_using(ctx, namespace, name):
        reconcile_virtual_workspaces(ctx, namespace, server, logger)
    for kubeconfig in _owners(meta, KUBECONFIG_KIND, KUBECONFIG_API_VERSION):
        reconcile_kubeconfig(ctx, namespace, kubeconfig, logger)
    reconcile_referencing(ctx, namespace, name, logger)


REACTIONS: dict[str, React] = {
    SHARD_KIND: on_shard,
    CACHE_SERVER_KIND: on_cache_server,
    FRONT_PROXY_KIND: on_front_proxy,
    VIRTUAL_WORKSPACES_KIND: on_virtual_workspaces,
    KUBECONFIG_KIND: on_kubeconfig,
    **{child.kind: on_child for child in CHILDREN},
    PODS.kind: on_pod,
    SECRETS.kind: on_secret,
}


def vanished(ctx: Context, kind: str, gone: list[JSON]) -> None:
    """What a DELETED event does, for the objects of ``kind`` a listing found gone."""
    react = REACTIONS[kind]
    for body in gone:
        react(ctx, "DELETED", body, LOGGER)


def watching(kind: str | None, react: React) -> Callable[..., None]:
    """The kopf event handler of a kind (None: the body names it): notes a listing again
    (:mod:`resync`), then reacts."""

    def on_event(*, type: str | None, body: kopf.Body, memo: Any, logger: Logger, **_: Any) -> None:
        ctx = _context(memo)
        ctx.periodic.start()
        seen = kind or str(body.get("kind", ""))
        if type is None:
            resync.listed(ctx, seen)
        else:
            ctx.relists.changed(seen)
        react(ctx, type, cast(JSON, dict(body)), logger)

    return on_event


Pass = Callable[[Context, str, str, Logger], None]

PERIODIC: dict[str, tuple[str, Pass]] = {
    SHARD_KIND: (SHARD_API_VERSION, reconcile),
    CACHE_SERVER_KIND: (CACHE_SERVER_API_VERSION, reconcile_cache_server),
    FRONT_PROXY_KIND: (FRONT_PROXY_API_VERSION, reconcile_front_proxy),
    VIRTUAL_WORKSPACES_KIND: (VIRTUAL_WORKSPACES_API_VERSION, reconcile_virtual_workspaces),
    KUBECONFIG_KIND: (KUBECONFIG_API_VERSION, reconcile_kubeconfig),
}
"""The kinds that get a pass every RESYNC_SECONDS, with their apiVersion and pass."""
FINALIZED_KINDS = frozenset({VIRTUAL_WORKSPACES_KIND, KUBECONFIG_KIND})
"""The kinds with a deletion handler, on which kopf puts its finalizer: no pass before it."""


def due(ctx: Context, settings: kopf.OperatorSettings) -> list[Work]:
    """A period's work: a listing of what the store still doubts, then a pass over each
    object of the PERIODIC kinds the store holds (of FINALIZED_KINDS, once kopf's finalizer
    is on)."""
    work: list[Work] = [functools.partial(resync.resync, ctx)]
    for kind, (api_version, run) in PERIODIC.items():
        for namespace in sorted(ctx.store.namespaces([kind])):
            if kind in FINALIZED_KINDS:
                names = sorted(
                    str(body["metadata"]["name"])
                    for body in ctx.store.select(
                        kind, namespace, lambda body: _finalized(body.get("metadata") or {})
                    )
                )
            else:
                names = sorted(ctx.store.versions(kind, namespace))
            for name in names:
                ref = {
                    "apiVersion": api_version,
                    "kind": kind,
                    "metadata": {"namespace": namespace, "name": name},
                }
                logger = kopf.LocalObjectLogger(body=cast(kopf.Body, ref), settings=settings)
                work.append(functools.partial(run, ctx, namespace, name, logger))
    return work


def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    ctx = _context(memo)
    follow(ctx.pause)
    ctx.periodic = Periodic(RESYNC_SECONDS, lambda: due(ctx, settings), ctx.pause.paused)
    settings.peering.lifetime = ctx.settings.peering_lifetime
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = FINALIZER
    # Events are posted explicitly for what a human should see; kopf's log lines stay logs.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.inactivity_timeout = WATCH_INACTIVITY_SECONDS
    settings.networking.error_backoffs = [1, 2, 5, 10, 30]
    settings.queueing.idle_timeout = OBJECT_WORKER_IDLE_SECONDS
    ctx.passes = pool("pass", PASS_WORKERS)
    ctx.background = pool("kcp", BACKGROUND_WORKERS)
    ctx.vanished = lambda kind, gone: vanished(ctx, kind, gone)


def stop(memo: Any, **_: Any) -> None:
    """Start no more periodic passes, passes, probes or cleanups."""
    ctx = _context(memo)
    ctx.periodic.stop()
    unfollow(ctx.pause)
    ctx.passes.shutdown()
    ctx.background.shutdown()


def register(registry: kopf.OperatorRegistry) -> None:
    """Attach the handlers to ``registry``."""
    for plural, kind in (
        (SHARD_PLURAL, SHARD_KIND),
        (CACHE_SERVER_PLURAL, CACHE_SERVER_KIND),
        (FRONT_PROXY_PLURAL, FRONT_PROXY_KIND),
        (VIRTUAL_WORKSPACES_PLURAL, VIRTUAL_WORKSPACES_KIND),
        (KUBECONFIG_PLURAL, KUBECONFIG_KIND),
    ):
        events = kopf.on.event(API_GROUP, API_VERSION, plural, registry=registry)
        events(watching(kind, REACTIONS[kind]))
    for watched in (*CHILDREN, PODS, SECRETS):
        labels = dict(watched.labels) or None
        watch = kopf.on.event(watched.api_version, watched.plural, labels=labels, registry=registry)
        watch(watching(None if watched in CHILDREN else watched.kind, REACTIONS[watched.kind]))
    kopf.on.delete(
        API_GROUP,
        API_VERSION,
        KUBECONFIG_PLURAL,
        id="release_kubeconfig",
        retries=RELEASE_RETRIES,
        registry=registry,
    )(on_kubeconfig_deleted)
    kopf.on.delete(
        API_GROUP,
        API_VERSION,
        VIRTUAL_WORKSPACES_PLURAL,
        id="release_virtual_workspaces",
        retries=RELEASE_SECONDS // SERVER_RELEASE_DELAY_SECONDS,
        registry=registry,
    )(on_virtual_workspaces_deleted)
    kopf.on.startup(registry=registry)(configure)
    kopf.on.cleanup(registry=registry)(stop)
