"""What one reconcile pass should do (pure): apply, wait, or report an error."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, TypeVar

from kcp_shard_operator.constants import FIELD_MANAGER
from kcp_shard_operator.core.api.meta import HASH_ANNOTATION, child_name
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.api.objects import KcpObject
from kcp_shard_operator.core.api.quantity import quantity
from kcp_shard_operator.core.cacheserver.spec import CacheServer
from kcp_shard_operator.core.kcp.podtemplate import secret_names
from kcp_shard_operator.core.kcp.versions import Version, ignores_root_shard_flag, parse_or_none
from kcp_shard_operator.core.shard.args import kcp_flags
from kcp_shard_operator.core.shard.claim import (
    Storage,
    data_volume,
    pending_problem,
    refused_change,
    runs_on_empty_dir,
    storage_of,
)
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.secretkeys import missing_keys
from kcp_shard_operator.core.shard.spec import ImageSpec, Shard
from kcp_shard_operator.core.status.conditions import (
    READY,
    WAITING_FOR_CACHE_SERVER,
    WAITING_FOR_ROOT_SHARD,
    condition,
)
from kcp_shard_operator.core.status.deployments import deployed_version

DOWNGRADE_REFUSED = "DowngradeRefused"
ROOT_SHARD_NOT_FOUND = "RootShardNotFound"
CACHE_SERVER_NOT_FOUND = "CacheServerNotFound"


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


def downgrade_refusal(
    what: str, wanted: Version, deployment: JSON | None, deployment_name: str
) -> str | None:
    """Why ``what`` (a shard, a cache server) must stay at the kcp version its Deployment runs
    rather than go to ``wanted``, or None.

    kcp supports no downgrade to an older minor release: a newer minor may store objects in
    an API version the older one does not know. kcp 0.28 stores APIExports and APIBindings
    as apis.kcp.io/v1alpha2; kcp 0.27 then never becomes ready on that etcd (its CRD update
    is refused: status.storedVersions lists v1alpha2). A patch downgrade goes ahead.
    """
    running = parse_or_none(deployed_version(deployment))
    if running is None or wanted.minor_release >= running.minor_release:
        return None
    return (
        f"kcp {wanted} would downgrade the running kcp {running} to an older minor release, "
        "which kcp does not support (a newer minor may store objects in API versions the "
        f"older one cannot read); the {what} stays at kcp {running}. Set spec.version back to "
        f"{running}, or restore etcd from a backup taken before the upgrade and delete "
        f"Deployment {deployment_name} to start over at kcp {wanted}"
    )


def refused_downgrade(shard: Shard, deployment: JSON | None) -> str | None:
    """:func:`downgrade_refusal` of ``shard``."""
    return downgrade_refusal("shard", shard.spec.kcp_version, deployment, child_name(shard))


def plan(
    shard: Shard,
    root: Shard | None,
    observed: dict[str, JSON | None],
    deprecating_release: Version,
    secret_revisions: Mapping[str, str] | None = None,
    storage_classes: dict[str, JSON] | None = None,
    secret_keys: Mapping[str, Collection[str]] | None = None,
    cache: CacheServer | None = None,
) -> Plan:
    """Decide the pass for ``shard``; ``observed`` maps kind -> current child or None;
    ``storage_classes`` are the cluster's StorageClasses by name (None: not known);
    ``secret_keys`` the names of the keys of the Secrets that exist; ``cache`` the
    CacheServer of ``spec.cache.serverRef`` (None: not found)."""
    deployment = observed.get("Deployment")
    on_empty_dir = runs_on_empty_dir(deployment)
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
            shard, root, deprecating_release, secret_revisions, on_empty_dir=on_empty_dir
        )
    except SpecError as err:
        return Plan(error=str(err))
    refusal = refused_downgrade(shard, deployment)
    waiting, waiting_reason = None, WAITING_FOR_ROOT_SHARD
    if refusal is None and cache is not None:
        waiting = waiting_for_cache_server(shard, cache, deployment)
        waiting_reason = WAITING_FOR_CACHE_SERVER
    if refusal is None and waiting is None and root is not None:
        waiting, waiting_reason = waiting_for_root(shard, root, deployment), WAITING_FOR_ROOT_SHARD
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
                held, root, deprecating_release, secret_revisions, on_empty_dir=on_empty_dir
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
        missing_keys=missing_keys(pod_spec, secret_keys or {}),
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


def absent_secrets(mounted: list[str], secret_revisions: Mapping[str, str] | None) -> list[str]:
    """The mounted Secrets that do not exist (none known without their revisions)."""
    if secret_revisions is None:
        return []
    return [name for name in mounted if not secret_revisions.get(name)]


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


def drifted_from(live: JSON | None, desired: JSON) -> bool:
    """Whether ``live`` needs a write to become ``desired``.

    A claim is only compared by value: the volume binder sets its ``volumeName`` (another
    field manager), which is no hand edit to put back. Nor is a change of the update
    strategy alone (:func:`strategy_write_deferred`).
    """
    if not contains(live, desired):
        return not strategy_write_deferred(live, desired)
    return desired["kind"] in REPLACEABLE_KINDS and bool(foreign_fields(live or {}, FIELD_MANAGER))


def strategy_write_deferred(live: JSON | None, desired: JSON) -> bool:
    """Whether the one change ``desired`` brings to ``live`` is the update strategy going back
    from ``Recreate`` to rolling updates after a move to another kcp minor.

    That write waits for the next one the Deployment needs (a spec change, a rotated
    Secret, a hand edit put back), which carries the rolling strategy to the rollout it
    starts: a Deployment rolls out only when its pod template changes, so until then the
    strategy decides nothing. It saves a write and a Deployment revision per upgrade.
    """
    if live is None or desired["kind"] != "Deployment":
        return False
    kinds = [(obj.get("spec") or {}).get("strategy", {}).get("type") for obj in (live, desired)]
    return (
        kinds == ["Recreate", "RollingUpdate"]
        and cause_of(live, desired) is Cause.STRATEGY
        and not foreign_fields(live, FIELD_MANAGER)
    )


def running_image(deployment: JSON | None, image: ImageSpec) -> tuple[str, ImageSpec] | None:
    """The kcp version the Deployment runs now and ``image`` pinned to its image; None when
    the Deployment does not tell them."""
    running = deployed_version(deployment)
    if running is None or deployment is None:
        return None
    pod = deployment.get("spec", {}).get("template", {}).get("spec", {})
    containers = pod.get("containers") or [{}]
    repository, _, tag = str(containers[0].get("image", "")).rpartition(":")
    if not repository or "/" in tag:
        return None
    return running, replace(image, repository=repository, tag=tag)


Held = TypeVar("Held", bound=KcpObject[Any])


def at_version(obj: Held, version: str, image: ImageSpec | None = None) -> Held:
    """``obj`` (a Shard, CacheServer or FrontProxy) with ``spec.version`` set, and its image
    when given."""
    spec = replace(obj.spec, version=version, image=image or obj.spec.image)
    return replace(obj, spec=spec)


def held_at_running_version(obj: Held, deployment: JSON | None) -> Held | None:
    """``obj`` pinned to the kcp version and image its Deployment runs now (None: the
    Deployment does not tell them).

    While an object waits (for its root, its shards) or refuses a downgrade, the rest of its
    spec still applies (and hand edits are still put back), but the version stays where it is.
    """
    found = running_image(deployment, obj.spec.image)
    return None if found is None else at_version(obj, *found)


QUANTITY_MAPS = frozenset({"limits", "requests"})
"""Keys whose values are quantities, which the server stores canonically (2Gi, 500m)."""


def contains(actual: Any, desired: Any) -> bool:
    """Whether ``actual`` already holds every value of ``desired``.

    Lists must match item by item; fields only the server sets are ignored; quantities
    match by value (the server stores ``1.5Gi`` as ``1536Mi``).
    """
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(
            _same_quantity(actual.get(key), value)
            if isinstance(value, dict) and key in QUANTITY_MAPS
            else contains(actual.get(key), value)
            for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(desired)
            and all(contains(a, d) for a, d in zip(actual, desired, strict=True))
        )
    return bool(actual == desired)


def _same_quantity(actual: Any, desired: JSON) -> bool:
    """Whether the quantities in ``actual`` equal those of ``desired`` by value."""
    if not isinstance(actual, dict) or set(actual) != set(desired):
        return False
    return all(
        actual[name] == value
        or (quantity(value) is not None and quantity(value) == quantity(actual[name]))
        for name, value in desired.items()
    )


class Cause(Enum):
    """Why a child is written or differs: it is new, the rendering changed, someone edited
    it, or only the update strategy follows the Shard's status (back from ``Recreate`` after
    a move to another kcp minor: no change of the Shard's spec, no new pods; see
    ``strategy_write_deferred``)."""

    CREATED = "Created"
    SPEC_CHANGED = "SpecChanged"
    DRIFT = "Drift"
    STRATEGY = "StrategyChanged"


def cause_of(live: JSON | None, desired: JSON) -> Cause:
    """Drift when the live child carries the hash of this very rendering; else a change of
    the update strategy alone, or of the spec."""
    if live is None:
        return Cause.CREATED
    hashes = [
        (obj.get("metadata", {}).get("annotations") or {}).get(HASH_ANNOTATION)
        for obj in (live, desired)
    ]
    if hashes[0] == hashes[1]:
        return Cause.DRIFT
    spec = dict(desired.get("spec") or {})
    if spec.pop("strategy", None) is None:
        return Cause.SPEC_CHANGED
    meta = desired["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != HASH_ANNOTATION}
    rest = {**desired, "metadata": {**meta, "annotations": annotations}, "spec": spec}
    return Cause.STRATEGY if contains(live, rest) else Cause.SPEC_CHANGED


TEMPLATE_ANNOTATIONS = ("f:spec", "f:template", "f:metadata", "f:annotations")
"""Left to others: ``kubectl rollout restart`` marks the pod template there."""


def _field_paths(fields: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The leaf paths of a managedFields ``fieldsV1`` set."""
    if not isinstance(fields, dict) or not fields:
        return {prefix}
    paths: set[tuple[str, ...]] = set()
    for key, sub in fields.items():
        paths |= _field_paths(sub, (*prefix, key))
    return paths


def foreign_fields(live: JSON, manager: str) -> list[str]:
    """Spec fields of ``live`` that another field manager set and ``manager`` does not own.

    Server-side apply never removes what another manager added (a sidecar, an env var, a
    port from ``kubectl edit``); only a full replace does.
    """
    ours: set[tuple[str, ...]] = set()
    theirs: set[tuple[str, ...]] = set()
    for entry in live.get("metadata", {}).get("managedFields") or []:
        if entry.get("subresource"):
            continue
        paths = _field_paths(entry.get("fieldsV1") or {})
        if entry.get("manager") == manager:
            ours |= paths
        else:
            theirs |= paths
    return sorted(
        ".".join(path)
        for path in theirs - ours
        if path[:1] == ("f:spec",) and path[:4] != TEMPLATE_ANNOTATIONS
    )


# Allocated by the API server and immutable: a replace must carry them over.
_ALLOCATED_SPEC_FIELDS = {"Service": ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy")}
REPLACEABLE_KINDS = frozenset({"Deployment", "Service", "PodDisruptionBudget"})
"""Kinds the operator may replace (PUT) with its rendering. Never a claim: most of its spec
is fixed once it exists, and its binding is another controller's."""
RECREATABLE_KINDS = frozenset({"Service", "PodDisruptionBudget"})
"""Kinds the operator may delete and create again when neither apply nor replace works."""


def replacement(desired: JSON, live: JSON) -> JSON:
    """The body of a full replace (PUT) of ``live`` with ``desired``.

    The spec is exactly the rendering; metadata keeps what others put there (the
    Deployment controller's revision annotation, finalizers) and the resourceVersion
    guards against a concurrent change.
    """
    old = live.get("metadata", {})
    new = desired["metadata"]
    metadata: JSON = {
        **new,
        "resourceVersion": old.get("resourceVersion"),
        "labels": {**(old.get("labels") or {}), **(new.get("labels") or {})},
        "annotations": {**(old.get("annotations") or {}), **(new.get("annotations") or {})},
    }
    if old.get("finalizers"):
        metadata["finalizers"] = old["finalizers"]
    spec = dict(desired.get("spec") or {})
    for key in _ALLOCATED_SPEC_FIELDS.get(desired["kind"], ()):
        if (live.get("spec") or {}).get(key) is not None:
            spec[key] = live["spec"][key]
    return {**desired, "metadata": metadata, "spec": spec}
