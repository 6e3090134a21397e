"""Where a shard keeps its data: the PersistentVolumeClaim of kcp's root directory (pure).

A shard on embedded etcd is a database on one volume. The claim is rendered and applied like
the other children but never deleted or replaced by the operator: with ``whenDeleted:
Retain`` it has no owner reference and outlives the Shard.
"""

from __future__ import annotations

from enum import Enum

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.shard.meta import metadata
from kcp_shard_operator.core.shard.names import child_name
from kcp_shard_operator.core.shard.spec import Shard, ShardSpec
from kcp_shard_operator.core.storage.spec import STORAGE_DELETE

DATA_VOLUME = "data"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


class Storage(Enum):
    """What holds a shard's data."""

    EXTERNAL_ETCD = "ExternalEtcd"
    CLAIM = "PersistentVolumeClaim"
    EPHEMERAL = "Ephemeral"
    """An emptyDir the spec asks for (``storage.ephemeral: true``)."""
    KEPT_EMPTY_DIR = "EmptyDirKept"
    """The emptyDir of a Deployment an older operator made, kept until the spec decides."""


def claim_name(shard: Shard) -> str:
    return f"{child_name(shard)}-data"


def runs_on_empty_dir(deployment: JSON | None) -> bool:
    """Whether the live Deployment keeps kcp's root directory on an emptyDir."""
    pod = ((deployment or {}).get("spec") or {}).get("template", {}).get("spec") or {}
    return any(
        volume.get("name") == DATA_VOLUME and "emptyDir" in volume
        for volume in pod.get("volumes") or []
    )


def storage_of(spec: ShardSpec, on_empty_dir: bool = False) -> Storage:
    """What holds the data of a shard with ``spec``; ``on_empty_dir``: its live Deployment
    keeps the root directory on an emptyDir.

    Moving such a shard to a claim would start kcp on an empty etcd, so an unset
    ``storage.ephemeral`` keeps the emptyDir (and says so) instead of losing its workspaces.
    """
    if not spec.embedded_etcd:
        return Storage.EXTERNAL_ETCD
    ephemeral = spec.storage_or_default.ephemeral
    if ephemeral:
        return Storage.EPHEMERAL
    if ephemeral is None and on_empty_dir:
        return Storage.KEPT_EMPTY_DIR
    return Storage.CLAIM


def data_volume(shard: Shard, storage: Storage) -> JSON:
    if storage is Storage.CLAIM:
        return {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": claim_name(shard)}}
    return {"name": DATA_VOLUME, "emptyDir": {}}


def claim(shard: Shard, root_name: str | None) -> JSON:
    storage = shard.spec.storage_or_default
    spec: JSON = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name:
        spec["storageClassName"] = storage.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(
            shard, root_name, name=claim_name(shard), owned=storage.when_deleted == STORAGE_DELETE
        ),
        "spec": spec,
    }


def pending_problem(
    desired: JSON, live: JSON | None, storage_classes: dict[str, JSON] | None
) -> tuple[str, str] | None:
    """(reason, message) when the claim cannot bind for a reason the operator can tell.

    ``storage_classes`` maps the cluster's StorageClasses by name (None: not known).
    """
    if live is None or storage_classes is None:
        return None
    status = live.get("status") or {}
    name = live["metadata"]["name"]
    if status.get("phase") == "Lost":
        return (
            "ClaimLost",
            f"PersistentVolumeClaim {name} lost its PersistentVolume: the shard's data is gone "
            "with it; restore the volume or etcd from a backup",
        )
    if status.get("phase") != "Pending":
        return None
    wanted = (live.get("spec") or {}).get("storageClassName") or desired["spec"].get(
        "storageClassName"
    )
    if wanted and wanted not in storage_classes:
        return (
            "StorageClassNotFound",
            f"PersistentVolumeClaim {name} is Pending: StorageClass {wanted!r} does not exist",
        )
    if not wanted and not any(
        (sc.get("metadata", {}).get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"
        for sc in storage_classes.values()
    ):
        return (
            "NoDefaultStorageClass",
            f"PersistentVolumeClaim {name} is Pending: it names no StorageClass and the "
            "cluster has no default one; set spec.storage.storageClassName",
        )
    return None
