"""What a pass reads: from the store, from the API server only when the store does not know."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from kcp_shard_operator.constants import (
    CACHE_SERVER_API_VERSION,
    CACHE_SERVER_KIND,
    FRONT_PROXY_API_VERSION,
    FRONT_PROXY_KIND,
    SHARD_API_VERSION,
    SHARD_KIND,
    VIRTUAL_WORKSPACES_API_VERSION,
    VIRTUAL_WORKSPACES_KIND,
)
from kcp_shard_operator.controller.context import Context
from kcp_shard_operator.controller.store import trimmed
from kcp_shard_operator.controller.watched import WATCHED
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.cacheserver.spec import CacheServer, parse_cache_server
from kcp_shard_operator.core.frontproxy.names import serving
from kcp_shard_operator.core.frontproxy.spec import FrontProxy, parse_front_proxy
from kcp_shard_operator.core.shard.meta import selector_labels
from kcp_shard_operator.core.shard.spec import Shard, parse_shard
from kcp_shard_operator.core.virtualworkspaces import names as vwnames
from kcp_shard_operator.core.virtualworkspaces.spec import (
    VirtualWorkspaceServer,
    parse_virtual_workspace_server,
)


def read(ctx: Context, api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
    """The object as the store keeps it (a Secret's metadata and key names only). When the
    store does not know it, the kind's objects in ``namespace`` are listed, and from then on
    the store answers for all of them (a pass right after the operator starts may come
    before the watch has listed them, or after a watch listed again after a gap)."""
    known, body = ctx.store.lookup(kind, namespace, name)
    if known:
        return body
    if kind in WATCHED:
        listing(ctx, kind, namespace)
        known, body = ctx.store.lookup(kind, namespace, name)
        if known:
            return body
    found = ctx.kube.get(api_version, kind, namespace, name)
    if found is None:
        ctx.store.not_found(kind, namespace, name)
        return None
    ctx.store.put(kind, found)
    return trimmed(kind, found)


def listing(ctx: Context, kind: str, namespace: str) -> None:
    """List the watched ``kind`` in ``namespace`` into the store, once for passes that ask
    together; what the store held that the listing no longer has goes to ``ctx.vanished``."""
    watched = WATCHED[kind]
    with ctx.lock(namespace, f"{kind}/listing"):
        if ctx.store.listed(kind, namespace):
            return
        since = ctx.store.mark()
        bodies = ctx.kube.list(watched.api_version, kind, namespace)
        gone = ctx.store.replace(kind, namespace, bodies, since, watched.delivers)
    if gone:
        ctx.vanished(kind, gone)


@dataclass(frozen=True)
class SecretsSeen:
    """What a pass knows of the Secrets a pod mounts, without their content."""

    revisions: dict[str, str]
    """Name -> resourceVersion; "" for a Secret that does not exist."""
    keys: dict[str, list[str]]
    """Name -> the names of its keys, for the Secrets that exist."""


def read_secrets(ctx: Context, namespace: str, names: Iterable[str]) -> SecretsSeen:
    bodies = {name: read(ctx, "v1", "Secret", namespace, name) for name in names}
    return SecretsSeen(
        revisions={
            name: str(((body or {}).get("metadata") or {}).get("resourceVersion", ""))
            for name, body in bodies.items()
        },
        keys={name: body["keys"] for name, body in bodies.items() if body is not None},
    )


def read_shard(ctx: Context, namespace: str, name: str) -> JSON | None:
    return read(ctx, SHARD_API_VERSION, SHARD_KIND, namespace, name)


def root_of(ctx: Context, shard: Shard) -> Shard | None:
    """The root Shard ``shard`` names, None for a root shard or a missing or invalid root."""
    ref = shard.spec.root_shard_ref
    if ref is None:
        return None
    obj = read_shard(ctx, shard.namespace, ref.name)
    if obj is None:
        return None
    try:
        return parse_shard(obj, ctx.settings.deprecating_release)
    except SpecError:
        return None


def read_cache_server(ctx: Context, namespace: str, name: str) -> JSON | None:
    return read(ctx, CACHE_SERVER_API_VERSION, CACHE_SERVER_KIND, namespace, name)


def cache_server_of(ctx: Context, shard: Shard) -> CacheServer | None:
    """The CacheServer ``shard`` names (spec.cache.serverRef); None when it names none, or
    the one it names is missing or invalid."""
    ref = shard.spec.cache.server_ref
    obj = None if ref is None else read_cache_server(ctx, shard.namespace, ref.name)
    if obj is None:
        return None
    try:
        return parse_cache_server(obj)
    except SpecError:
        return None


def read_front_proxy(ctx: Context, namespace: str, name: str) -> JSON | None:
    return read(ctx, FRONT_PROXY_API_VERSION, FRONT_PROXY_KIND, namespace, name)


def every(ctx: Context, kind: str, namespace: str) -> Iterator[JSON]:
    """Every object of the watched ``kind`` in ``namespace``, for a decision that needs all
    of them: from the store once it holds a whole listing (:func:`listing`), parsed one at a
    time (a root's pass over a thousand Shards holds one Shard's body at a time)."""
    if not ctx.store.listed(kind, namespace):
        listing(ctx, kind, namespace)
    return ctx.store.each(kind, namespace)


def front_proxies(ctx: Context, namespace: str) -> list[FrontProxy]:
    """The valid FrontProxies of ``namespace``."""
    found = []
    for body in every(ctx, FRONT_PROXY_KIND, namespace):
        try:
            found.append(parse_front_proxy(body))
        except SpecError:
            continue
    return found


def front_proxy_of(ctx: Context, shard: Shard) -> FrontProxy | None:
    """The FrontProxy serving ``shard``'s installation (:func:`frontproxy.serving`)."""
    ref = shard.spec.root_shard_ref
    return serving(front_proxies(ctx, shard.namespace), ref.name if ref else shard.name)


def installation(ctx: Context, namespace: str, root: str) -> list[Shard]:
    """The valid Shards of the installation of root shard ``root``: the root and the Shards
    naming it."""
    found = []
    for body in every(ctx, SHARD_KIND, namespace):
        ref = ((body.get("spec") or {}).get("rootShardRef") or {}).get("name")
        if (body.get("metadata") or {}).get("name") != root and ref != root:
            continue
        try:
            found.append(parse_shard(body, ctx.settings.deprecating_release))
        except SpecError:
            continue
    return found


def labelled_pods(ctx: Context, namespace: str, labels: Mapping[str, str]) -> list[JSON]:
    """The pods of ``namespace`` carrying ``labels``, as the pod watch last delivered them."""
    wanted = labels.items()
    return ctx.store.select(
        "Pod",
        namespace,
        lambda pod: wanted <= ((pod.get("metadata") or {}).get("labels") or {}).items(),
    )


def pods(ctx: Context, shard: Shard) -> list[JSON]:
    """The shard's pods as the pod watch last delivered them."""
    return labelled_pods(ctx, shard.namespace, selector_labels(shard))


def read_virtual_workspaces(ctx: Context, namespace: str, name: str) -> JSON | None:
    return read(ctx, VIRTUAL_WORKSPACES_API_VERSION, VIRTUAL_WORKSPACES_KIND, namespace, name)


def virtual_workspace_servers(ctx: Context, namespace: str) -> list[VirtualWorkspaceServer]:
    """The valid VirtualWorkspaceServers of ``namespace`` that are not being deleted (one
    being deleted serves its shard no more: the shard and the front-proxy move off it while
    it is kept, :func:`virtualworkspaces.still_sent_to_deleted`)."""
    found = []
    for body in every(ctx, VIRTUAL_WORKSPACES_KIND, namespace):
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            continue
        try:
            found.append(parse_virtual_workspace_server(body))
        except SpecError:
            continue
    return found


def virtual_workspaces_of(
    ctx: Context, namespace: str, shard: str
) -> VirtualWorkspaceServer | None:
    """The VirtualWorkspaceServer running the virtual workspaces of Shard ``shard``."""
    return vwnames.serving(virtual_workspace_servers(ctx, namespace), namespace, shard)
