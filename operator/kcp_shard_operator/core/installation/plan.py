"""CacheServers, VirtualWorkspaceServers and FrontProxies in an upgrade plan (pure).

The operator rolls a cache server before the shards on it (:func:`planner.plan` waits for it)
and a front-proxy once every shard of its installation runs its version
(:mod:`frontproxyplan`). :func:`upgradeplan.plan_upgrade` orders the Shards taking each
CacheServer as rolled out already; here the cache servers get steps of their own, the Shards'
order moves behind the cache servers they wait for, and each front-proxy comes after its
shards, with the flags its new version renders. A virtual-workspace server comes after its
shard (it rolls once its shard runs its version) and before the front-proxy (which waits for
the servers of its shards as for the shards).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from kcp_shard_operator.constants import (
    CACHE_SERVER_KIND,
    FRONT_PROXY_KIND,
    VIRTUAL_WORKSPACES_KIND,
)
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.cacheserver.names import child_name as cache_child_name
from kcp_shard_operator.core.cacheserver.render import render_cache_server
from kcp_shard_operator.core.cacheserver.spec import CacheServer
from kcp_shard_operator.core.frontproxy.names import root_name
from kcp_shard_operator.core.frontproxy.render import proxy_flags, render_front_proxy
from kcp_shard_operator.core.frontproxy.spec import FrontProxy
from kcp_shard_operator.core.installation.steps import (
    INVALID,
    REFUSED,
    ROLLS,
    UNCHANGED,
    WAITS,
    Step,
    container_args,
    flag_changes,
    pinned_tag_notes,
)
from kcp_shard_operator.core.kcp.versions import Version, parse_or_none
from kcp_shard_operator.core.rollout.versions import (
    DOWNGRADE_REFUSED,
    at_version,
    downgrade_refusal,
)
from kcp_shard_operator.core.shard.pki import with_issued
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.conditions import (
    ROOT_SHARD_NOT_FOUND,
    WAITING_FOR_CACHE_SERVER,
    WAITING_FOR_SHARDS,
)
from kcp_shard_operator.core.status.deployments import deployed_version
from kcp_shard_operator.core.virtualworkspaces.names import serving as serving_shard
from kcp_shard_operator.core.virtualworkspaces.names import shard_name
from kcp_shard_operator.core.virtualworkspaces.render import (
    CONTAINER as SERVER_CONTAINER,
)
from kcp_shard_operator.core.virtualworkspaces.render import (
    render_virtual_workspaces,
    server_flags,
)
from kcp_shard_operator.core.virtualworkspaces.spec import VirtualWorkspaceServer

CACHE_CONTAINER = "cache-server"
PROXY_CONTAINER = "kcp-front-proxy"
KIND_ORDER = {CACHE_SERVER_KIND: 0, VIRTUAL_WORKSPACES_KIND: 2, FRONT_PROXY_KIND: 3}
"""Within a wave: cache servers, then Shards (1), virtual-workspace servers, front-proxies."""

Deployments = Mapping[tuple[str, str], JSON | None]
"""Live Deployments by (kind, ``namespace/name`` of the CacheServer or FrontProxy)."""


Refs = Mapping[str, tuple[str | None, str | None]]
"""``namespace/name`` of each Shard -> the CacheServer and the root shard it names."""


def _refs(shard_objects: Sequence[JSON]) -> Refs:
    """The :data:`Refs` of ``shard_objects`` (read from the objects: a Shard whose spec does
    not parse still names them)."""
    refs = {}
    for obj in shard_objects:
        meta = obj.get("metadata") or {}
        key = _key(str(meta.get("namespace") or "default"), str(meta.get("name")))
        refs[key] = (_ref(obj, "cache", "serverRef", "name"), _ref(obj, "rootShardRef", "name"))
    return refs


def _ref(obj: JSON, *path: str) -> str | None:
    found: object = obj.get("spec") or {}
    for key in path:
        found = (found or {}).get(key) if isinstance(found, dict) else None
    return str(found) if found else None


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _step(kind: str, namespace: str, name: str, outcome: str, **fields: Any) -> Step:
    """A step of a CacheServer or FrontProxy (no identity-cache ConfigMap, never a root)."""
    return Step(namespace=namespace, name=name, root=False, outcome=outcome, kind=kind,
                **{"wave": None, "now": None, "after": None, **fields})  # fmt: skip


def cache_step(cache: CacheServer, live: JSON | None, target: str | None) -> Step:
    """What the operator does with ``cache`` once its ``spec.version`` is ``target`` (None: as
    it is): roll it first, leave it, or refuse an older minor release than it runs."""
    wanted = target or cache.spec.version
    now = deployed_version(live)
    try:
        version = Version.parse(wanted)
    except ValueError as err:
        return _step(CACHE_SERVER_KIND, cache.namespace, cache.name, INVALID, now=now,
                     reason=INVALID, message=str(err))  # fmt: skip
    refusal = downgrade_refusal("cache server", version, live, cache_child_name(cache))
    if refusal is not None:
        return _step(CACHE_SERVER_KIND, cache.namespace, cache.name, REFUSED, now=now,
                     after=now, reason=DOWNGRADE_REFUSED, message=refusal)  # fmt: skip
    rendered = render_cache_server(at_version(cache, wanted)).deployment
    was, will = container_args(live, CACHE_CONTAINER), container_args(rendered, CACHE_CONTAINER)
    changes = now != wanted or was != will
    added, dropped = flag_changes(was, will) if live else ([], [])
    return _step(
        CACHE_SERVER_KIND,
        cache.namespace,
        cache.name,
        ROLLS if changes else UNCHANGED,
        wave=1 if changes else None,
        now=now,
        after=wanted,
        flags_added=added,
        flags_dropped=dropped,
        notes=pinned_tag_notes(cache.spec.image.tag, wanted),
    )


def after_caches(steps: Sequence[Step], refs: Refs, caches: Sequence[Step]) -> list[Step]:
    """The Shard ``steps`` ordered behind the cache servers they wait for: a Shard on a
    CacheServer that rolls goes in a later wave, its non-root shards after it; one whose
    CacheServer refuses its version waits for ever (the operator waits for it to roll out)."""
    cache_steps = {step.key: step for step in caches}
    original = {step.key: step.wave for step in steps}
    moved: dict[str, int] = {}
    result: list[Step] = []
    for step in sorted(steps, key=lambda s: s.wave or 0):
        cache_name, root = refs.get(step.key, (None, None))
        cache = cache_steps.get(_key(step.namespace, cache_name)) if cache_name else None
        if step.wave is None:
            result.append(step)
            continue
        if cache is not None and cache.outcome == REFUSED and step.now != step.after:
            result.append(_waits_for_cache(step, cache))
            continue
        wave = 1 + (cache.wave or 0 if cache is not None and cache.outcome == ROLLS else 0)
        waits_for = step.waits_for
        if wave > 1 and waits_for is None and cache is not None:
            waits_for = f"CacheServer {cache.name} to roll out kcp {cache.after}"
        root_key = _key(step.namespace, root) if root else None
        if root_key in moved and (original.get(root_key) or 0) < step.wave:
            wave = max(wave, moved[root_key] + 1)
        moved[step.key] = wave
        result.append(replace(step, wave=wave, waits_for=waits_for))
    return result


def _waits_for_cache(step: Step, cache: Step) -> Step:
    message = (
        f"waits for CacheServer {cache.name} to roll out its spec.version, which it refuses "
        f"({DOWNGRADE_REFUSED}): the shard stays at the kcp it runs"
    )
    return replace(
        step,
        outcome=WAITS,
        wave=None,
        after=step.now,
        flags_added=[],
        flags_dropped=[],
        waits_for=f"CacheServer {cache.name}",
        reason=WAITING_FOR_CACHE_SERVER,
        message=message,
    )


def _installation(
    proxy: FrontProxy, steps: Sequence[Step], roots: Mapping[str, str | None]
) -> list[Step]:
    """The steps of the Shards behind ``proxy``: its root and the shards naming it."""
    root = root_name(proxy)
    return [
        step
        for step in steps
        if step.namespace == proxy.namespace and (step.name == root or roots.get(step.key) == root)
    ]


def proxy_step(
    proxy: FrontProxy,
    live: JSON | None,
    target: str | None,
    release: Version,
    shard_steps: Sequence[Step],
    refs: Refs,
    server_steps: Mapping[str, Sequence[Step]] | None = None,
) -> Step:
    """What the operator does with ``proxy`` once its ``spec.version`` is ``target`` (None: as
    it is), after ``shard_steps`` and ``server_steps`` (the steps of the
    VirtualWorkspaceServers of each Shard, by the Shard's ``namespace/name``): roll it once
    every shard of its installation and their servers run that version or a newer one, with
    the flags that version takes."""
    namespace, name, now = proxy.namespace, proxy.name, deployed_version(live)
    roots = {key: root for key, (_, root) in refs.items()}
    if _key(namespace, root_name(proxy)) not in roots:
        message = f"root Shard {root_name(proxy)!r} (spec.rootShardRef) not found in {namespace}"
        return _step(FRONT_PROXY_KIND, namespace, name, REFUSED, now=now, after=now,
                     reason=ROOT_SHARD_NOT_FOUND, message=message)  # fmt: skip
    if roots[_key(namespace, root_name(proxy))] is not None:
        message = f"spec.rootShardRef: Shard {root_name(proxy)!r} is not a root shard"
        return _step(FRONT_PROXY_KIND, namespace, name, INVALID, now=now, reason=INVALID,
                     message=message)  # fmt: skip
    wanted = target or proxy.spec.version
    try:
        will = proxy_flags(at_version(proxy, wanted), release).args
        version = Version.parse(wanted)
    except (SpecError, ValueError) as err:
        return _step(FRONT_PROXY_KIND, namespace, name, INVALID, now=now, reason=INVALID,
                     message=str(err))  # fmt: skip
    shards = _installation(proxy, shard_steps, roots)
    members = [
        *shards,
        *(step for shard in shards for step in (server_steps or {}).get(shard.key, ())),
    ]
    # A step's ``after`` is the kcp its shard ends at, whether it rolls, waits or is refused.
    behind = [
        step
        for step in members
        if step.after is None or (parse_or_none(step.after) or version) < version
    ]
    if now != wanted and behind:
        names = ", ".join(step.name for step in behind)
        message = (
            f"waits for every shard of {root_name(proxy)} and their virtual-workspace servers "
            f"to run kcp {wanted} or newer, which the plan does not reach ({names}): it stays "
            "at the kcp it runs"
        )
        return _step(FRONT_PROXY_KIND, namespace, name, WAITS, now=now, after=now,
                     waits_for=f"shards {names}", reason=WAITING_FOR_SHARDS,
                     message=message)  # fmt: skip
    was = container_args(live, PROXY_CONTAINER)
    if now == wanted and was == will:
        return _step(FRONT_PROXY_KIND, namespace, name, UNCHANGED, now=now, after=wanted)
    # It waits only for the shards and servers that run an older kcp than it rolls to.
    waited = [
        step for step in members if step.wave and (parse_or_none(step.now) or version) < version
    ]
    wave = 1 + max((step.wave or 0 for step in waited), default=0)
    added, dropped = flag_changes(was, will) if live else ([], [])
    return _step(
        FRONT_PROXY_KIND,
        namespace,
        name,
        ROLLS,
        wave=wave,
        now=now,
        after=wanted,
        flags_added=added,
        flags_dropped=dropped,
        waits_for=_proxy_waits_for(root_name(proxy), wanted, waited),
        notes=pinned_tag_notes(proxy.spec.image.tag, wanted),
    )


def _proxy_waits_for(root: str, wanted: str, waited: Sequence[Step]) -> str | None:
    """What a front-proxy's step waits for: the shards of ``root`` (``waited``, the steps
    that roll before it), and their virtual-workspace servers when any of those roll."""
    if not waited:
        return None
    servers = any(step.kind == VIRTUAL_WORKSPACES_KIND for step in waited)
    also = " and their virtual-workspace servers" if servers else ""
    return f"the shards of {root}{also} to roll out kcp {wanted}"


def server_step(
    server: VirtualWorkspaceServer,
    served: Shard | None,
    live: JSON | None,
    target: str | None,
    release: Version,
    shard_steps: Sequence[Step],
) -> Step:
    """What the operator does with ``server`` once its ``spec.version`` is ``target`` (None:
    as it is), after ``shard_steps``: roll it once its Shard (``served``, filled in as its
    pass fills it) runs that version or a newer one, with the flags that version takes."""
    namespace, name, now = server.namespace, server.name, deployed_version(live)
    shard = next(
        (s for s in shard_steps if (s.namespace, s.name) == (namespace, shard_name(server))), None
    )
    if served is None or shard is None:
        message = f"Shard {shard_name(server)!r} (spec.shardRef) not found in {namespace}"
        return _step(VIRTUAL_WORKSPACES_KIND, namespace, name, REFUSED, now=now, after=now,
                     reason="ShardNotFound", message=message)  # fmt: skip
    wanted = target or server.spec.version
    try:
        will = server_flags(at_version(server, wanted), served, release).args
        version = Version.parse(wanted)
    except (SpecError, ValueError) as err:
        return _step(VIRTUAL_WORKSPACES_KIND, namespace, name, INVALID, now=now,
                     reason=INVALID, message=str(err))  # fmt: skip
    if now != wanted and (parse_or_none(shard.after) or version) < version:
        message = (
            f"waits for Shard {shard.name} to run kcp {wanted} or newer, which the plan does "
            "not reach: it stays at the kcp it runs"
        )
        return _step(VIRTUAL_WORKSPACES_KIND, namespace, name, WAITS, now=now, after=now,
                     waits_for=f"Shard {shard.name}", reason="WaitingForShard",
                     message=message)  # fmt: skip
    was = container_args(live, SERVER_CONTAINER)
    if now == wanted and was == will:
        return _step(VIRTUAL_WORKSPACES_KIND, namespace, name, UNCHANGED, now=now, after=wanted)
    waited = shard.wave if shard.wave and (parse_or_none(shard.now) or version) < version else 0
    added, dropped = flag_changes(was, will) if live else ([], [])
    return _step(
        VIRTUAL_WORKSPACES_KIND,
        namespace,
        name,
        ROLLS,
        wave=1 + (waited or 0),
        now=now,
        after=wanted,
        flags_added=added,
        flags_dropped=dropped,
        waits_for=f"Shard {shard.name} to roll out kcp {wanted}" if waited else None,
        notes=pinned_tag_notes(server.spec.image.tag, wanted),
    )


def served_shards(
    shards: Sequence[Shard],
    proxies: Sequence[FrontProxy],
    servers: Sequence[VirtualWorkspaceServer],
) -> dict[str, Shard]:
    """The Shard each of ``servers`` serves (by the server's ``namespace/name``), filled in as
    its pass fills it: behind its installation's FrontProxy, served by it."""
    by_key = {shard.key: shard for shard in shards}
    found = {}
    for server in servers:
        shard = by_key.get(_key(server.namespace, shard_name(server)))
        if shard is None:
            continue
        ref = shard.spec.root_shard_ref
        root = shard if ref is None else by_key.get(_key(shard.namespace, ref.name))
        root_name = root.name if root is not None else ""
        proxy = next(
            (p for p in sorted(proxies, key=lambda p: p.name)
             if p.namespace == server.namespace and p.spec.root_shard_ref.name == root_name),
            None,
        )  # fmt: skip
        found[server.key] = with_issued(
            shard, None if ref is None else root, proxy=proxy, virtual_workspaces=server
        )
    return found


def plan_installation(
    shard_steps: Sequence[Step],
    shard_objects: Sequence[JSON],
    caches: Sequence[CacheServer],
    proxies: Sequence[FrontProxy],
    deployments: Deployments,
    target: str | None,
    release: Version,
    servers: Sequence[VirtualWorkspaceServer] = (),
    served: Mapping[str, Shard] | None = None,
) -> list[Step]:
    """Every step of the upgrade in the operator's order: the ``shard_steps`` of
    :func:`upgradeplan.plan_upgrade` (over ``shard_objects``) with the CacheServers before
    the Shards on them, each VirtualWorkspaceServer after its Shard (``served`` maps it to
    its Shard, :func:`served_shards`) and the FrontProxies after their installations'
    shards."""
    cache_steps = [
        cache_step(cache, deployments.get((CACHE_SERVER_KIND, cache.key)), target)
        for cache in caches
    ]
    refs = _refs(shard_objects)
    shards = after_caches(shard_steps, refs, cache_steps)
    server_steps = [
        server_step(
            server,
            (served or {}).get(server.key),
            deployments.get((VIRTUAL_WORKSPACES_KIND, server.key)),
            target,
            release,
            shards,
        )
        for server in servers
    ]
    by_shard: dict[str, list[Step]] = {}
    for server, step in zip(servers, server_steps, strict=True):
        by_shard.setdefault(_key(server.namespace, shard_name(server)), []).append(step)
    proxy_steps = [
        proxy_step(
            proxy,
            deployments.get((FRONT_PROXY_KIND, proxy.key)),
            target,
            release,
            shards,
            refs,
            by_shard,
        )
        for proxy in proxies
    ]
    return sorted(
        [*cache_steps, *shards, *server_steps, *proxy_steps],
        key=lambda s: (s.wave or 10**6, KIND_ORDER.get(s.kind, 1), not s.root, s.namespace, s.name),
    )


def as_deployed(
    caches: Sequence[CacheServer],
    proxies: Sequence[FrontProxy],
    shards: Sequence[Shard],
    release: Version,
    servers: Sequence[VirtualWorkspaceServer] = (),
) -> Deployments:
    """The Deployments the operator renders for ``caches``, ``proxies`` and ``servers`` at
    their specs (for a plan on files, which takes each as running its spec); one whose Shard
    is not among ``shards``, or that cannot be rendered, has none."""
    deployments: dict[tuple[str, str], JSON | None] = {
        (CACHE_SERVER_KIND, cache.key): render_cache_server(cache).deployment for cache in caches
    }
    roots = {shard.key: shard for shard in shards}
    for proxy in proxies:
        root = roots.get(_key(proxy.namespace, root_name(proxy)))
        try:
            rendered = (
                None
                if root is None
                else render_front_proxy(
                    proxy,
                    root,
                    release,
                    virtual_workspaces=serving_shard(servers, proxy.namespace, root.name),
                )
            )
        except SpecError:
            rendered = None
        deployments[(FRONT_PROXY_KIND, proxy.key)] = rendered.deployment if rendered else None
    served = served_shards(shards, proxies, servers)
    for server in servers:
        shard = served.get(server.key)
        try:
            found = None if shard is None else render_virtual_workspaces(server, shard, release)
        except SpecError:
            found = None
        deployments[(VIRTUAL_WORKSPACES_KIND, server.key)] = found.deployment if found else None
    return deployments
