"""What one reconcile pass should do (pure): apply, wait, or report an error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kcp_shard_operator.model import JSON, SpecError
from kcp_shard_operator.render import child_name, render_shard
from kcp_shard_operator.spec import Shard
from kcp_shard_operator.status import deployed_version
from kcp_shard_operator.versions import Version, parse_or_none

DOWNGRADE_REFUSED = "DowngradeRefused"


@dataclass(frozen=True)
class Plan:
    """Objects to bring in line, kinds to remove, and why nothing is applied if so."""

    apply: list[JSON] = field(default_factory=list)
    delete_pdb: bool = False
    waiting: str | None = None
    error: str | None = None
    error_reason: str = "InvalidSpec"
    dropped_args: list[str] = field(default_factory=list)
    unused_refs: list[str] = field(default_factory=list)


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


def refused_downgrade(shard: Shard, deployment: JSON | None) -> str | None:
    """Why ``shard`` must stay at the kcp version its Deployment runs, or None.

    kcp supports no downgrade to an older minor release: a newer minor may store objects in
    an API version the older one does not know. kcp 0.28 stores APIExports and APIBindings
    as apis.kcp.io/v1alpha2; kcp 0.27 then never becomes ready on that etcd (its CRD update
    is refused: status.storedVersions lists v1alpha2). A patch downgrade goes ahead.
    """
    running = parse_or_none(deployed_version(deployment))
    wanted = shard.spec.kcp_version
    if running is None or wanted.minor_release >= running.minor_release:
        return None
    return (
        f"kcp {wanted} would downgrade the running kcp {running} to an older minor release, "
        "which kcp does not support (a newer minor may store objects in API versions the "
        f"older one cannot read); the shard stays at kcp {running}. Set spec.version back to "
        f"{running}, or restore etcd from a backup taken before the upgrade and delete "
        f"Deployment {child_name(shard)} to start over at kcp {wanted}"
    )


def plan(
    shard: Shard,
    root: Shard | None,
    observed: dict[str, JSON | None],
    deprecating_release: Version,
    secret_revisions: Mapping[str, str] | None = None,
) -> Plan:
    """Decide the pass for ``shard``; ``observed`` maps kind -> current child or None."""
    if not shard.spec.is_root and root is None:
        assert shard.spec.root_shard_ref is not None
        return Plan(
            error=f"root Shard {shard.spec.root_shard_ref.name!r} not found in {shard.namespace}",
            error_reason="RootShardNotFound",
        )
    try:
        rendered = render_shard(shard, root, deprecating_release, secret_revisions)
    except SpecError as err:
        return Plan(error=str(err))
    deployment = observed.get("Deployment")
    refusal = refused_downgrade(shard, deployment)
    waiting = None
    if refusal is None and root is not None:
        waiting = waiting_for_root(shard, root, deployment)
    held_back = refusal is not None or waiting is not None
    verdict = (
        Plan(error=refusal, error_reason=DOWNGRADE_REFUSED) if refusal else Plan(waiting=waiting)
    )
    if held_back:
        held = held_at_running_version(shard, deployment)
        if held is None:
            return verdict
        try:
            rendered = render_shard(held, root, deprecating_release, secret_revisions)
        except SpecError:
            return verdict
    drifted = [obj for obj in rendered.objects if not contains(observed.get(obj["kind"]), obj)]
    return replace(
        verdict,
        apply=drifted,
        delete_pdb=rendered.pdb is None and observed.get("PodDisruptionBudget") is not None,
        dropped_args=[] if held_back else rendered.dropped_args,
        unused_refs=[] if held_back else rendered.unused_refs,
    )


def held_at_running_version(shard: Shard, deployment: JSON | None) -> Shard | None:
    """``shard`` pinned to the kcp version and image its Deployment runs now.

    While a shard waits for its root or refuses a downgrade, the rest of its spec still
    applies (and hand edits are still put back), but the version stays where it is.
    """
    running = deployed_version(deployment)
    if running is None or deployment is None:
        return None
    pod = deployment.get("spec", {}).get("template", {}).get("spec", {})
    containers = pod.get("containers") or [{}]
    repository, _, tag = str(containers[0].get("image", "")).rpartition(":")
    if not repository or "/" in tag:
        return None
    image = replace(shard.spec.image, repository=repository, tag=tag)
    return replace(shard, spec=replace(shard.spec, version=running, image=image))


def contains(actual: Any, desired: Any) -> bool:
    """Whether ``actual`` already holds every value of ``desired``.

    Lists must match item by item; fields only the server sets are ignored.
    """
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(
            contains(actual.get(key), value) for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(desired)
            and all(contains(a, d) for a, d in zip(actual, desired, strict=True))
        )
    return bool(actual == desired)
