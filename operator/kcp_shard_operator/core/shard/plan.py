"""What one reconcile pass should do (pure): apply, wait, or report an error."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.backup.restore import STOPPED, Phase
from kcp_shard_operator.core.cacheserver.spec import CacheServer
from kcp_shard_operator.core.kcp.podtemplate import secret_names
from kcp_shard_operator.core.kcp.secretkeys import absent_secrets, missing_keys
from kcp_shard_operator.core.kcp.versions import Version, ignores_root_shard_flag
from kcp_shard_operator.core.rollout.drift import (
    contains,
    drifted_from,
)
from kcp_shard_operator.core.rollout.versions import (
    DOWNGRADE_REFUSED,
    downgrade_refusal,
    held_at_running_version,
)
from kcp_shard_operator.core.shard.args import SPEC_FIELDS, kcp_flags
from kcp_shard_operator.core.shard.claim import (
    Storage,
    data_volume,
    pending_problem,
    runs_on_empty_dir,
    storage_of,
)
from kcp_shard_operator.core.shard.names import child_name
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.shard.upgradebackup import WAITING_FOR_BACKUPS, way_back
from kcp_shard_operator.core.status.conditions import (
    CACHE_SERVER_NOT_FOUND,
    READY,
    ROOT_SHARD_NOT_FOUND,
    WAITING_FOR_CACHE_SERVER,
    WAITING_FOR_ROOT_SHARD,
    condition,
)
from kcp_shard_operator.core.status.deployments import deployed_version
from kcp_shard_operator.core.storage.claim import refused_change


@dataclass(frozen=True)
class Plan:
    """Objects to bring in line, kinds to remove, and why nothing is applied if so."""

    apply: list[JSON] = field(default_factory=list)
    delete_pdb: bool = False
    waiting: str | None = None
    waiting_reason: str = WAITING_FOR_ROOT_SHARD
    error: str | None = None
    error_reason: str = "InvalidSpec"
    dropped_args: list[str] = field(default_factory=list)
    unused_refs: list[str] = field(default_factory=list)
    missing_secrets: list[str] = field(default_factory=list)
    missing_keys: list[str] = field(default_factory=list)
    storage: Storage = Storage.CLAIM
    storage_problems: list[tuple[str, str]] = field(default_factory=list)
    """(reason, message) of what keeps the data volume from its desired state."""


def waiting_for_root(shard: Shard, root: Shard, deployment: JSON | None) -> str | None:
    """Why a non-root shard must not roll to its spec version yet, or None."""
    if deployed_version(deployment) == shard.spec.version:
        return None
    running = root.status_version
    if running is not None and running >= shard.spec.kcp_version:
        return None
    return (
        f"root shard {root.name} runs kcp {running or '(not rolled out yet)'}; "
        f"kcp {shard.spec.version} waits until the root shard has rolled out "
        f"{shard.spec.version} or newer"
    )


def cache_server_rolled_out(cache: CacheServer) -> bool:
    """Whether ``cache`` is Ready at the version its spec asks for (rolled out, serving)."""
    ready = condition(cache.status, READY) or {}
    return ready.get("status") == "True" and (cache.status or {}).get("version") == (
        cache.spec.version
    )


def waiting_for_cache_server(
    shard: Shard, cache: CacheServer, deployment: JSON | None
) -> str | None:
    """Why ``shard`` must not start, or roll to its spec version, yet: the CacheServer it
    names is not Ready or still rolling out (the cache server is upgraded first)."""
    if deployed_version(deployment) == shard.spec.version or cache_server_rolled_out(cache):
        return None
    running = (cache.status or {}).get("version") or "(not rolled out yet)"
    what = "starts" if deployment is None else f"rolls to kcp {shard.spec.version}"
    return (
        f"CacheServer {cache.name} runs kcp {running} and is not Ready at kcp "
        f"{cache.spec.version}; the shard {what} once it is"
    )


def identity_source_down(
    shard: Shard, root: Shard | None, cache: CacheServer | None, deprecating_release: Version
) -> str | None:
    """Why a new pod of ``shard`` would not start now, or None: from the deprecating release
    on, a non-root shard reads the core APIExport identities from its cache server (the
    CacheServer it names, else the root shard's embedded one) when it starts, so it must not
    be started, nor restarted, while that cache server is not Ready."""
    if shard.spec.is_root or not ignores_root_shard_flag(
        shard.spec.kcp_version, deprecating_release
    ):
        return None
    if cache is not None:
        if (condition(cache.status, READY) or {}).get("status") == "True":
            return None
        name = f"CacheServer {cache.name}, which is not Ready"
    else:
        # The root's embedded cache serves while a root pod is ready (its /readyz, as the
        # kubelet sees it): whether the operator itself reaches the root is another matter.
        if root is None or (root.status or {}).get("readyReplicas", 0) > 0:
            return None
        name = f"the embedded cache server of root shard {root.name}, which has no ready pod"
    return (
        f"kcp {shard.spec.version} reads the APIExport identities from {name}, when it "
        "starts: the shard's pods are not started or replaced until it is back"
    )


def refused_downgrade(shard: Shard, deployment: JSON | None) -> str | None:
    """:func:`downgrade_refusal` of ``shard``, naming the backup that is the way back."""
    refusal = downgrade_refusal("shard", shard.spec.kcp_version, deployment, child_name(shard))
    backup = way_back(shard) if refusal is not None else None
    return refusal if backup is None else f"{refusal}. {backup}"


def plan(
    shard: Shard,
    root: Shard | None,
    observed: dict[str, JSON | None],
    deprecating_release: Version,
    secret_revisions: Mapping[str, str] | None = None,
    storage_classes: dict[str, JSON] | None = None,
    secret_keys: Mapping[str, Collection[str]] | None = None,
    cache: CacheServer | None = None,
    backup_claim_found: bool = True,
    waiting_for_backups: str | None = None,
    restoring: Phase | None = None,
) -> Plan:
    """Decide the pass for ``shard``; ``observed`` maps kind -> current child or None;
    ``storage_classes`` are the cluster's StorageClasses by name (None: not known);
    ``secret_keys`` the names of the keys of the Secrets that exist; ``cache`` the
    CacheServer of ``spec.cache.serverRef`` (None: not found); ``backup_claim_found`` whether
    the claim of ``spec.backup`` exists (the pod gets the backup sidecar only then);
    ``waiting_for_backups`` why a root must not move to a new minor release yet
    (:mod:`upgradebackup`); ``restoring`` the phase of a restore going on: the shard is
    stopped (zero replicas) while its data is restored, then starts the backup's version,
    which no refusal or wait holds back."""
    deployment = observed.get("Deployment")
    on_empty_dir = runs_on_empty_dir(deployment)
    if restoring in STOPPED:
        # Stopped at the version it runs: a failed restore leaves its data, and it starts
        # again on it at that version.
        stopped = held_at_running_version(shard, deployment) or shard
        shard = replace(stopped, spec=replace(stopped.spec, replicas=0))
    if not shard.spec.is_root and root is None:
        return _without_root(shard, deprecating_release, secret_revisions, on_empty_dir)
    server_ref = shard.spec.cache.server_ref
    if server_ref is not None and cache is None:
        return Plan(
            error=f"CacheServer {server_ref.name!r} (spec.cache.serverRef) not found in "
            f"{shard.namespace}",
            error_reason=CACHE_SERVER_NOT_FOUND,
        )
    try:
        rendered = render_shard(
            shard,
            root,
            deprecating_release,
            secret_revisions,
            on_empty_dir=on_empty_dir,
            backup_claim_found=backup_claim_found,
        )
    except SpecError as err:
        return Plan(error=str(err))
    refusal = None if restoring is not None else refused_downgrade(shard, deployment)
    waiting, waiting_reason = None, WAITING_FOR_ROOT_SHARD
    if restoring is not None:
        cache, root, waiting_for_backups = None, None, None
    if refusal is None and cache is not None:
        waiting = waiting_for_cache_server(shard, cache, deployment)
        waiting_reason = WAITING_FOR_CACHE_SERVER
    if refusal is None and waiting is None and root is not None:
        waiting, waiting_reason = waiting_for_root(shard, root, deployment), WAITING_FOR_ROOT_SHARD
    if refusal is None and waiting is None and waiting_for_backups is not None:
        waiting, waiting_reason = waiting_for_backups, WAITING_FOR_BACKUPS
    held_back = refusal is not None or waiting is not None
    verdict = (
        Plan(error=refusal, error_reason=DOWNGRADE_REFUSED)
        if refusal
        else Plan(waiting=waiting, waiting_reason=waiting_reason)
    )
    if held_back:
        held = held_at_running_version(shard, deployment)
        if held is None:
            return verdict
        try:
            rendered = render_shard(
                held,
                root,
                deprecating_release,
                secret_revisions,
                on_empty_dir=on_empty_dir,
                backup_claim_found=backup_claim_found,
            )
        except SpecError:
            return verdict
    storage_problems = []
    objects = rendered.objects
    if rendered.claim is not None:
        live_claim = observed.get("PersistentVolumeClaim")
        refusal_of_claim = refused_change(rendered.claim, live_claim)
        if refusal_of_claim:
            storage_problems.append(("StorageChangeRefused", refusal_of_claim))
            objects = [obj for obj in objects if obj is not rendered.claim]
        pending = pending_problem(rendered.claim, live_claim, storage_classes)
        if pending:
            storage_problems.append(pending)
    drifted = [obj for obj in objects if drifted_from(observed.get(obj["kind"]), obj)]
    down = None if held_back else identity_source_down(shard, root, cache, deprecating_release)
    if down is not None and _starts_pods(deployment, rendered.deployment, drifted):
        drifted = [obj for obj in drifted if obj is not rendered.deployment]
        verdict = replace(verdict, waiting=down, waiting_reason=WAITING_FOR_CACHE_SERVER)
    pod_spec = rendered.deployment["spec"]["template"]["spec"]
    return replace(
        verdict,
        apply=drifted,
        missing_secrets=absent_secrets(secret_names(pod_spec), secret_revisions),
        missing_keys=missing_keys(pod_spec, secret_keys or {}, SPEC_FIELDS),
        delete_pdb=rendered.pdb is None and observed.get("PodDisruptionBudget") is not None,
        dropped_args=[] if held_back else rendered.dropped_args,
        unused_refs=[] if held_back else rendered.unused_refs,
        storage=rendered.storage,
        storage_problems=storage_problems,
    )


def _starts_pods(live: JSON | None, desired: JSON, drifted: list[JSON]) -> bool:
    """Whether writing ``desired`` (when it is among ``drifted``) would start new pods: a new
    Deployment, or another pod template."""
    if not any(obj is desired for obj in drifted):
        return False
    if live is None:
        return True
    return not contains((live.get("spec") or {}).get("template"), desired["spec"]["template"])


def _without_root(
    shard: Shard,
    deprecating_release: Version,
    secret_revisions: Mapping[str, str] | None,
    on_empty_dir: bool,
) -> Plan:
    """A non-root shard whose root Shard is missing: nothing is applied, and what else is
    wrong is told with it (the Secrets its pods would mount, a spec problem)."""
    assert shard.spec.root_shard_ref is not None
    root_name = shard.spec.root_shard_ref.name
    missing_root = f"root Shard {root_name!r} not found in {shard.namespace}"
    volume = data_volume(shard, storage_of(shard.spec, on_empty_dir))
    try:
        pod, _, _ = kcp_flags(shard, root_name, deprecating_release, volume)
    except SpecError as err:
        return Plan(error=f"{missing_root}; {err}", error_reason=ROOT_SHARD_NOT_FOUND)
    return Plan(
        error=missing_root,
        error_reason=ROOT_SHARD_NOT_FOUND,
        missing_secrets=absent_secrets(secret_names({"volumes": pod.volumes}), secret_revisions),
    )
