"""Which kcp version a kind's Deployment may roll to (pure): a minor downgrade is refused,
and an object that waits or refuses is held at the version and image it runs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.api.objects import KcpObject
from kcp_shard_operator.core.kcp.serverspec import ImageSpec
from kcp_shard_operator.core.kcp.versions import Version, parse_or_none
from kcp_shard_operator.core.status.deployments import deployed_version

DOWNGRADE_REFUSED = "DowngradeRefused"


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
