"""Passes one change calls for beyond its own object: a root's dependents and FrontProxies, a
FrontProxy's installation, a Secret's users."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kcp_shard_operator.constants import (
    CACHE_SERVER_KIND,
    FRONT_PROXY_KIND,
    SHARD_KIND,
    VIRTUAL_WORKSPACES_KIND,
)
from kcp_shard_operator.controller.context import Context, Logger, Mounts
from kcp_shard_operator.controller.frontproxy import reconcile_front_proxy
from kcp_shard_operator.controller.reads import front_proxies, virtual_workspace_servers
from kcp_shard_operator.controller.shard import reconcile
from kcp_shard_operator.controller.virtualworkspaces import reconcile_virtual_workspaces
from kcp_shard_operator.core.api.model import SpecError
from kcp_shard_operator.core.cacheserver.names import ca_secret
from kcp_shard_operator.core.cacheserver.render import mounted_secrets
from kcp_shard_operator.core.cacheserver.spec import parse_cache_server
from kcp_shard_operator.core.frontproxy.names import serving
from kcp_shard_operator.core.frontproxy.render import mounted
from kcp_shard_operator.core.frontproxy.spec import FrontProxy
from kcp_shard_operator.core.kcp.podtemplate import secret_names
from kcp_shard_operator.core.pki.issuance import Names
from kcp_shard_operator.core.shard import pki
from kcp_shard_operator.core.shard.spec import Shard, parse_shard
from kcp_shard_operator.core.virtualworkspaces import names as vwnames
from kcp_shard_operator.core.virtualworkspaces.names import shard_client_secret
from kcp_shard_operator.core.virtualworkspaces.spec import VirtualWorkspaceServer


def dependents(ctx: Context, namespace: str, root_name: str) -> list[str]:
    """Shards of ``namespace`` whose spec.rootShardRef names ``root_name``."""
    return [
        item["metadata"]["name"]
        for item in ctx.store.each(SHARD_KIND, namespace)
        if ((item.get("spec") or {}).get("rootShardRef") or {}).get("name") == root_name
    ]


def referencing(ctx: Context, namespace: str, secret: str) -> list[str]:
    """Shards of ``namespace`` whose pods may mount Secret ``secret``, or whose certificates
    it signs (the installation's CA). What each Shard mounts is kept (``ctx.mounts``) and made
    again only when the Shard, its root or its FrontProxy changed: a thousand Shards' issued
    Secrets do not parse a thousand Shards each."""
    shards = ctx.store.versions(SHARD_KIND, namespace)
    proxies = front_proxies(ctx, namespace)
    proxy_versions = ctx.store.versions(FRONT_PROXY_KIND, namespace)
    names = []
    for name, version in shards.items():
        if secret == shard_client_secret(name):
            names.append(name)
            continue
        key = f"{namespace}/{name}"
        mounts = ctx.mounts.get(key)
        if mounts is None or not _current(mounts, version, shards, proxies, proxy_versions):
            mounts = _mounts(ctx, namespace, name, shards, proxies, proxy_versions)
            if mounts is None:
                continue
            ctx.mounts[key] = mounts
        if secret in mounts.secrets:
            names.append(name)
    return names


def _proxy_key(
    proxies: list[FrontProxy], proxy_versions: dict[str, int], root: str
) -> tuple[str, int | None] | None:
    proxy = serving(proxies, root)
    return None if proxy is None else (proxy.name, proxy_versions.get(proxy.name))


def _current(
    mounts: Mounts,
    version: int,
    shards: dict[str, int],
    proxies: list[FrontProxy],
    proxy_versions: dict[str, int],
) -> bool:
    """Whether ``mounts`` was made from the Shard, root and FrontProxy held now."""
    return (
        mounts.version == version
        and shards.get(mounts.root) == mounts.root_version
        and mounts.proxy == _proxy_key(proxies, proxy_versions, mounts.root)
    )


def _mounts(
    ctx: Context,
    namespace: str,
    name: str,
    versions: dict[str, int],
    proxies: list[FrontProxy],
    proxy_versions: dict[str, int],
) -> Mounts | None:
    """What Shard ``name`` mounts (``versions``: the Shards' versions; nothing for an invalid
    spec), None when it is gone."""
    release = ctx.settings.deprecating_release
    found = ctx.store.lookup(SHARD_KIND, namespace, name)[1]
    if found is None:
        return None
    invalid = Mounts(
        versions.get(name, 0),
        name,
        versions.get(name),
        _proxy_key(proxies, proxy_versions, name),
        frozenset(),
    )
    try:
        shard = parse_shard(found, release)
    except SpecError:
        return invalid
    ref = shard.spec.root_shard_ref
    root: Shard | None = shard
    if ref is not None:
        body = ctx.store.lookup(SHARD_KIND, namespace, ref.name)[1]
        try:
            root = None if body is None else parse_shard(body, release)
        except SpecError:
            root = None
    root_name = ref.name if ref else shard.name
    filled = pki.with_issued(shard, root, proxy=serving(proxies, root_name))
    signs = {pki.ca_secret(root)} if root is not None else set()
    return Mounts(
        version=versions.get(name, 0),
        root=root_name,
        root_version=versions.get(root_name),
        proxy=_proxy_key(proxies, proxy_versions, root_name),
        secrets=frozenset({*filled.spec.secret_names, *signs}),
    )


def front_proxies_using(ctx: Context, namespace: str, secret: str) -> list[str]:
    """FrontProxies of ``namespace`` that mount Secret ``secret`` or whose certificates a CA
    in it signs (the installation's, or its requestheader CA)."""
    names = []
    for proxy in front_proxies(ctx, namespace):
        root = proxy.spec.root_shard_ref.name
        installation = Names(root)
        try:
            mounted_secrets = mounted(proxy).secrets
        except SpecError:
            mounted_secrets = []
        if secret in (*mounted_secrets, installation.ca, installation.requestheader_ca):
            names.append(proxy.name)
    return names


def front_proxies_of(
    ctx: Context, namespace: str, shard: str, spec: Mapping[str, Any]
) -> list[str]:
    """FrontProxies serving the installation of Shard ``shard`` (whose spec is ``spec``):
    they start and roll after its shards."""
    root = (spec.get("rootShardRef") or {}).get("name") or shard
    return [
        proxy.name
        for proxy in front_proxies(ctx, namespace)
        if proxy.spec.root_shard_ref.name == root
    ]


def shards_using_cache_server(ctx: Context, namespace: str, cache_server: str) -> list[str]:
    """Shards of ``namespace`` whose spec.cache.serverRef names ``cache_server``."""
    return [
        item["metadata"]["name"]
        for item in ctx.store.each(SHARD_KIND, namespace)
        if (((item.get("spec") or {}).get("cache") or {}).get("serverRef") or {}).get("name")
        == cache_server
    ]


def cache_servers_using(ctx: Context, namespace: str, secret: str) -> list[str]:
    """CacheServers of ``namespace`` that mount Secret ``secret`` or whose CA it holds."""
    names = []
    for body in ctx.store.select(CACHE_SERVER_KIND, namespace, lambda _: True):
        try:
            cache = parse_cache_server(body)
        except SpecError:
            continue
        if secret in (*mounted_secrets(cache), ca_secret(cache)):
            names.append(cache.name)
    return names


def reconcile_with_dependents(
    ctx: Context, namespace: str, name: str, spec: Mapping[str, Any], logger: Logger
) -> None:
    """A pass over the Shard; after a root's (its ``spec`` names no root), one over each
    Shard that names it as root, whose pass depends on the root (its rolled-out version);
    then one over each FrontProxy of the installation, which waits for its shards."""
    reconcile(ctx, namespace, name, logger)
    if not spec.get("rootShardRef"):
        for dependent in dependents(ctx, namespace, name):
            reconcile(ctx, namespace, dependent, logger)
    for server in virtual_workspaces_serving(ctx, namespace, name):
        reconcile_virtual_workspaces(ctx, namespace, server, logger)
    for proxy in front_proxies_of(ctx, namespace, name, spec):
        reconcile_front_proxy(ctx, namespace, proxy, logger)


def virtual_workspaces_serving(ctx: Context, namespace: str, shard: str) -> list[str]:
    """VirtualWorkspaceServers of ``namespace`` naming Shard ``shard``: they start and roll
    after it."""
    return [
        item["metadata"]["name"]
        for item in ctx.store.select(
            VIRTUAL_WORKSPACES_KIND,
            namespace,
            lambda item: ((item.get("spec") or {}).get("shardRef") or {}).get("name") == shard,
        )
    ]


def virtual_workspaces_using(ctx: Context, namespace: str, secret: str) -> list[str]:
    """VirtualWorkspaceServers of ``namespace`` whose live pods mount Secret ``secret``, whose
    own Secrets it is, or whose certificates a CA in it may sign (a CA's Secret)."""
    found = []
    for server in virtual_workspace_servers(ctx, namespace):
        live = ctx.store.lookup("Deployment", namespace, vwnames.child_name(server))[1]
        pod = (((live or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        own = (vwnames.serving_secret(server), vwnames.kubeconfig_secret(server))
        if secret in (*own, *secret_names(pod), _installation_ca(ctx, server)):
            found.append(server.name)
    return found


def _installation_ca(ctx: Context, server: VirtualWorkspaceServer) -> str | None:
    """The Secret of the CA that signs ``server``'s certificates: its shard's root's."""
    shard = ctx.store.lookup(SHARD_KIND, server.namespace, vwnames.shard_name(server))[1]
    if shard is None:
        return None
    spec = shard.get("spec") or {}
    root_name = (spec.get("rootShardRef") or {}).get("name") or vwnames.shard_name(server)
    root = ctx.store.lookup(SHARD_KIND, server.namespace, str(root_name))[1]
    named = (((root or {}).get("spec") or {}).get("pki") or {}).get("caSecretRef") or {}
    return str(named.get("name") or Names(str(root_name)).ca)


def reconcile_installation(ctx: Context, namespace: str, root: str, logger: Logger) -> None:
    """A pass over each Shard of root shard ``root``'s installation, the root first: what
    they render depends on the installation's FrontProxy."""
    reconcile(ctx, namespace, root, logger)
    for dependent in dependents(ctx, namespace, root):
        reconcile(ctx, namespace, dependent, logger)


def reconcile_referencing(ctx: Context, namespace: str, secret: str, logger: Logger) -> None:
    """A pass over each Shard whose pods may mount ``secret``: a new revision rolls them."""
    for shard in referencing(ctx, namespace, secret):
        reconcile(ctx, namespace, shard, logger)
