"""What an upgrade will do, before it is done (pure): the operator's own planner, run wave
after wave over a set of Shards as if each wave's rollouts had finished.

Every Shard is set to the target version (or kept as it is), then :func:`planner.plan`
decides for each what the operator would: roll, wait for its root, or refuse. The Shards
that roll make a wave; once it is done (as simulated: their Deployments rendered, their
``status.version`` the new one), the waiting ones are planned again. What stays waiting
after the last wave would wait for ever.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from kcp_shard_operator.constants import SHARD_KIND
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.cacheserver.spec import CacheServer, CacheServerSpec
from kcp_shard_operator.core.frontproxy.names import serving
from kcp_shard_operator.core.frontproxy.spec import FrontProxy
from kcp_shard_operator.core.kcp.flags import flag_name
from kcp_shard_operator.core.kcp.versions import MINIMUM_KCP_VERSION, InvalidVersionError, Version
from kcp_shard_operator.core.shard.pki import takes_service_account_key, with_issued
from kcp_shard_operator.core.shard.plan import plan
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.spec import Shard, parse_shard
from kcp_shard_operator.core.shard.upgradebackup import minor_upgrade_target
from kcp_shard_operator.core.status.conditions import READY, ROLLED_OUT, ROOT_SHARD_NOT_FOUND
from kcp_shard_operator.core.status.deployments import deployed_version
from kcp_shard_operator.core.virtualworkspaces.names import serving as serving_shard
from kcp_shard_operator.core.virtualworkspaces.spec import VirtualWorkspaceServer

ROLLS = "Rolls"
UNCHANGED = "Unchanged"
WAITS = "Waits"
REFUSED = "Refused"
INVALID = "InvalidSpec"


class TargetError(ValueError):
    """A target version no Shard can be set to."""


def check_target(text: str) -> str:
    """``text`` as a Shard's ``spec.version``; raises :class:`TargetError`."""
    try:
        version = Version.parse(text.removeprefix("v"))
    except InvalidVersionError as err:
        raise TargetError(f"--to {text!r}: {err}") from None
    if version < MINIMUM_KCP_VERSION:
        raise TargetError(
            f"--to {text!r}: kcp {version} is older than the oldest supported {MINIMUM_KCP_VERSION}"
        )
    return str(version)


@dataclass(frozen=True)
class Step:
    """What the operator will do with one Shard (or CacheServer, or FrontProxy)."""

    namespace: str
    name: str
    root: bool
    outcome: str
    """ROLLS, UNCHANGED, WAITS (for ever: nothing it waits for will happen), REFUSED or
    INVALID."""
    wave: int | None
    """The order of its rollout: the Shards of wave 1 roll first, at once; None when it
    does not roll."""
    now: str | None
    """The kcp version running now (None: not rolled out yet)."""
    after: str | None
    flags_added: list[str] = field(default_factory=list)
    flags_dropped: list[str] = field(default_factory=list)
    waits_for: str | None = None
    """What the Shard waits for before its wave (its root shard's rollout)."""
    reason: str | None = None
    message: str | None = None
    identity_cache: str = "-"
    notes: list[str] = field(default_factory=list)
    kind: str = SHARD_KIND
    """Shard, or the CacheServer rolled before its shards, or the FrontProxy after them."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


Cleanup = Callable[[Shard], str]
"""What becomes of a Shard's stale identity-cache ConfigMap once it runs as given."""


@dataclass
class _State:
    """One Shard in the simulation: its object and Deployment, as they are now or after
    the waves so far."""

    obj: JSON
    deployment: JSON | None
    running: str | None = None
    """``status.version`` before the plan: the kcp every replica runs."""
    shard: Shard | None = None
    error: str | None = None
    step: Step | None = None


def _key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _targeted(obj: JSON, target: str | None) -> JSON:
    new = copy.deepcopy(obj)
    if target is not None:
        new.setdefault("spec", {})["version"] = target
    return new


def container_args(deployment: JSON | None, container_name: str = "kcp") -> list[str]:
    """The arguments of the Deployment's container ``container_name`` (none: [])."""
    pod = (((deployment or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in pod.get("containers") or []:
        if container.get("name") == container_name:
            return [str(arg) for arg in container.get("args") or []]
    return []


def flag_names(args: Sequence[str]) -> set[str]:
    return {name for name in map(flag_name, args) if name}


def flag_changes(was: Sequence[str], will: Sequence[str]) -> tuple[list[str], list[str]]:
    """The flags (names) added and dropped from the arguments ``was`` to ``will``."""
    before, after = flag_names(was), flag_names(will)
    return sorted(after - before), sorted(before - after)


def _proxy(shard: Shard, proxies: Collection[FrontProxy]) -> FrontProxy | None:
    """The FrontProxy serving ``shard``'s installation."""
    ref = shard.spec.root_shard_ref
    here = (proxy for proxy in proxies if proxy.namespace == shard.namespace)
    return serving(here, ref.name if ref else shard.name)


def _filled(
    shard: Shard,
    root: Shard | None,
    deployment: JSON | None,
    proxies: Collection[FrontProxy],
    servers: Collection[VirtualWorkspaceServer] = (),
) -> Shard:
    """``shard`` with the issued references filled in, as a pass fills them (its
    VirtualWorkspaceServer among ``servers`` taken as Ready)."""
    key = takes_service_account_key(shard, root, deployment)
    return with_issued(
        shard,
        root,
        service_account_key=key,
        proxy=_proxy(shard, proxies),
        virtual_workspaces=serving_shard(servers, shard.namespace, shard.name),
    )


def _filled_root(root: Shard | None, proxies: Collection[FrontProxy]) -> Shard | None:
    return None if root is None else with_issued(root, None, proxy=_proxy(root, proxies))


def rolled_out_status(status: JSON | None, version: str | None, replicas: int) -> JSON:
    """``status`` once every one of ``replicas`` runs ``version`` and is Ready (the plan's
    assumption for every rollout it simulates)."""
    others = [c for c in (status or {}).get("conditions") or [] if c.get("type") != READY]
    ready = {"type": READY, "status": "True", "reason": ROLLED_OUT}
    return {
        **(status or {}),
        "version": version,
        "readyReplicas": replicas,
        "conditions": [ready, *others],
    }


def _rolled_out(state: _State, deployment: JSON) -> None:
    """``state`` after its rollout to ``deployment`` finished."""
    state.deployment = deployment
    replicas = int((deployment.get("spec") or {}).get("replicas", 1))
    status = rolled_out_status(state.obj.get("status"), deployed_version(deployment), replicas)
    state.obj = {**state.obj, "status": status}


def _parse(state: _State, release: Version) -> None:
    try:
        state.shard = parse_shard(state.obj, release)
        state.error = None
    except SpecError as err:
        state.shard, state.error = None, str(err)


def as_rolled_out(
    objects: Sequence[JSON],
    release: Version,
    proxies: Collection[FrontProxy] = (),
    servers: Collection[VirtualWorkspaceServer] = (),
) -> tuple[list[JSON], dict[str, JSON | None]]:
    """``objects`` as if each ran its spec already (for a plan on files): with
    ``status.version`` their ``spec.version``, and the Deployments the operator renders for
    them (none for a Shard that cannot be rendered)."""
    shards: dict[str, Shard] = {}
    for obj in objects:
        try:
            shards[_key(obj)] = parse_shard(obj, release)
        except SpecError:
            continue
    rolled: list[JSON] = []
    deployments: dict[str, JSON | None] = {}
    for obj in objects:
        key = _key(obj)
        shard = shards.get(key)
        if shard is None:
            rolled.append(copy.deepcopy(obj))
            continue
        ref = shard.spec.root_shard_ref
        root = None if ref is None else shards.get(f"{shard.namespace}/{ref.name}")
        try:
            rendered = render_shard(
                _filled(shard, root, None, proxies, servers), _filled_root(root, proxies), release
            )
        except SpecError:
            rolled.append(copy.deepcopy(obj))
            continue
        deployments[key] = rendered.deployment
        status = rolled_out_status(obj.get("status"), shard.spec.version, shard.spec.replicas)
        rolled.append({**copy.deepcopy(obj), "status": status})
    return rolled, deployments


def plan_upgrade(
    objects: Sequence[JSON],
    deployments: Mapping[str, JSON | None],
    target: str | None,
    release: Version,
    cleanup: Cleanup,
    cache_servers: Collection[str] = (),
    proxies: Collection[FrontProxy] = (),
    servers: Collection[VirtualWorkspaceServer] = (),
) -> list[Step]:
    """The steps of setting every Shard in ``objects`` to ``target`` (None: their specs as
    they are), in the order the operator rolls them; ``deployments`` maps
    ``namespace/name`` of a Shard to its live Deployment (missing: none);
    ``cache_servers`` are the ``namespace/name`` of the CacheServers that exist, each taken
    as rolled out first (the operator rolls a Shard only after its CacheServer);
    ``proxies`` the FrontProxies, whose installations' Shards trust and advertise them;
    ``servers`` the VirtualWorkspaceServers, whose Shards run no virtual workspaces."""
    states = {
        _key(obj): _State(
            _targeted(obj, target),
            copy.deepcopy(deployments.get(_key(obj))),
            (obj.get("status") or {}).get("version"),
        )
        for obj in objects
    }
    before = {key: copy.deepcopy(state.deployment) for key, state in states.items()}
    for state in states.values():
        _parse(state, release)
    wave = 0
    while True:
        wave += 1
        rolled = _wave(states, before, wave, release, cleanup, cache_servers, proxies, servers)
        if not rolled:
            break
    for key, state in states.items():
        if state.step is None:
            state.step = _waiting_for_ever(state, before[key], cleanup)
    steps = [state.step for state in states.values() if state.step is not None]
    return sorted(steps, key=lambda s: (s.wave or 10**6, not s.root, s.namespace, s.name))


def _cache_rolled_out_first(shard: Shard, cache_servers: Collection[str]) -> CacheServer | None:
    """The CacheServer ``shard`` names, as it is once it has rolled out to ``shard``'s
    version (None: it names none, or one that does not exist)."""
    ref = shard.spec.cache.server_ref
    if ref is None or f"{shard.namespace}/{ref.name}" not in cache_servers:
        return None
    ready = {"type": "Ready", "status": "True"}
    status = {"version": shard.spec.version, "conditions": [ready]}
    spec = CacheServerSpec(version=shard.spec.version)
    return CacheServer(ref.name, shard.namespace, spec, status=status)


def _root_of(state: _State, states: Mapping[str, _State]) -> _State | None:
    shard = state.shard
    if shard is None or shard.spec.root_shard_ref is None:
        return None
    return states.get(f"{shard.namespace}/{shard.spec.root_shard_ref.name}")


def _wave(
    states: Mapping[str, _State],
    before: Mapping[str, JSON | None],
    wave: int,
    release: Version,
    cleanup: Cleanup,
    cache_servers: Collection[str],
    proxies: Collection[FrontProxy],
    servers: Collection[VirtualWorkspaceServer],
) -> list[str]:
    """Plan every Shard not decided yet; the ones that roll in ``wave`` (their rollout
    simulated once all are planned: a wave rolls at once)."""
    finished: list[tuple[_State, JSON]] = []
    for key, state in states.items():
        if state.step is not None:
            continue
        if state.shard is None:
            state.step = _invalid(state, before[key])
            continue
        root_state = _root_of(state, states)
        root = None if root_state is None else root_state.shard
        shard = _filled(state.shard, root, state.deployment, proxies, servers)
        filled_root = _filled_root(root, proxies)
        cache = _cache_rolled_out_first(shard, cache_servers)
        decision = plan(shard, filled_root, {"Deployment": state.deployment}, release, cache=cache)
        if decision.waiting is not None:
            continue
        if decision.error is not None:
            state.step = _refused(
                state, before[key], decision.error_reason, decision.error, cleanup
            )
            continue
        rendered = render_shard(shard, filled_root, release).deployment
        old = before[key]
        changes = deployed_version(rendered) != deployed_version(old) or container_args(
            rendered
        ) != container_args(old)
        state.step = _step(
            state,
            old,
            rendered,
            ROLLS if changes else UNCHANGED,
            wave if changes else None,
            cleanup(replace(shard, status=_status_after(state, rendered))),
            waited=_waited(state, states, before),
        )
        if changes:
            finished.append((state, rendered))
    for state, rendered in finished:
        _rolled_out(state, rendered)
        _parse(state, release)
    return [state.step.key for state, _ in finished if state.step is not None]


def _status_after(state: _State, deployment: JSON) -> JSON:
    return {**(state.obj.get("status") or {}), "version": deployed_version(deployment)}


def _waited(
    state: _State, states: Mapping[str, _State], before: Mapping[str, JSON | None]
) -> str | None:
    """The root rollout a non-root Shard waited for, when its root rolls first."""
    root_state = _root_of(state, states)
    if root_state is None or root_state.step is None or root_state.step.outcome != ROLLS:
        return None
    return f"root shard {root_state.step.name} to roll out kcp {root_state.step.after}"


def _notes(state: _State, old: JSON | None) -> list[str]:
    notes = []
    template = deployed_version(old)
    if template is not None and state.running != template:
        notes.append(
            f"a rollout of kcp {template} is going on (every replica runs "
            f"{state.running or 'no version yet'}): the plan starts from its end"
        )
    shard = state.shard
    if shard is not None:
        notes += pinned_tag_notes(shard.spec.image.tag, shard.spec.version)
        target = minor_upgrade_target(shard) if shard.spec.is_root else None
        if target is not None:
            notes.append(
                f"snapshot first: before the first pod of kcp {target} starts, the operator "
                "takes and verifies a backup of every shard of the installation from its "
                "running pods (spec.backup.beforeMinorUpgrade); a failed one stops the upgrade"
            )
    return notes


def pinned_tag_notes(tag: str | None, version: str) -> list[str]:
    """A note when ``spec.image.tag`` does not follow ``version``: the pods run the tag."""
    if not tag or tag.removeprefix("v") == version:
        return []
    return [
        f"spec.image.tag {tag!r} is pinned: the pods run that image, not kcp {version}; set it "
        "too (or remove it)"
    ]


def _step(
    state: _State,
    old: JSON | None,
    new: JSON | None,
    outcome: str,
    wave: int | None,
    identity_cache: str,
    *,
    waited: str | None = None,
    reason: str | None = None,
    message: str | None = None,
) -> Step:
    meta = state.obj.get("metadata") or {}
    spec = state.obj.get("spec") or {}
    added, dropped = flag_changes(container_args(old), container_args(new))
    return Step(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name")),
        root=not spec.get("rootShardRef"),
        outcome=outcome,
        wave=wave,
        now=deployed_version(old),
        after=deployed_version(new),
        flags_added=added if new is not None else [],
        flags_dropped=dropped if new is not None else [],
        waits_for=waited,
        reason=reason,
        message=message,
        identity_cache=identity_cache,
        notes=_notes(state, old),
    )


def _invalid(state: _State, old: JSON | None) -> Step:
    return _step(state, old, old, INVALID, None, "-", reason=INVALID, message=state.error)


def _refused(
    state: _State,
    old: JSON | None,
    reason: str,
    message: str,
    cleanup: Cleanup,
) -> Step:
    assert state.shard is not None
    held = cleanup(state.shard) if reason != ROOT_SHARD_NOT_FOUND else "-"
    return _step(state, old, old, REFUSED, None, held, reason=reason, message=message)


def _waiting_for_ever(state: _State, old: JSON | None, cleanup: Cleanup) -> Step:
    """A Shard still waiting after the last wave: its root never rolls out the version."""
    assert state.shard is not None
    ref = state.shard.spec.root_shard_ref
    root = ref.name if ref else "?"
    message = (
        f"waits for root shard {root} to roll out kcp {state.shard.spec.version}, which the "
        "plan does not reach: it stays at the kcp it runs"
    )
    return _step(
        state,
        old,
        old,
        WAITS,
        None,
        cleanup(state.shard),
        waited=f"root shard {root} to roll out kcp {state.shard.spec.version}",
        reason="WaitingForRootShard",
        message=message,
    )
