"""Where a kcp server on embedded etcd keeps its data: the spec's storage block (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from kcp_shard_operator.core.api.model import SpecError, field
from kcp_shard_operator.core.api.quantity import quantity

DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


DEFAULT_STORAGE_SIZE = "10Gi"
STORAGE_RETAIN = "Retain"
STORAGE_DELETE = "Delete"


@dataclass(frozen=True)
class StorageSpec:
    """Where a shard on embedded etcd keeps its data (kcp's --root-directory).

    By default a PersistentVolumeClaim the operator creates; an emptyDir only when asked.
    """

    ephemeral: bool | None = field(
        "ephemeral",
        "true: keep kcp's root directory, and so its embedded etcd, on an emptyDir: every "
        "pod restart starts kcp on an empty etcd and every workspace of the shard is lost "
        "(for tests only). false: a PersistentVolumeClaim, also for a shard whose "
        "Deployment has its data on an emptyDir (made by an older operator or while this was "
        "true; kcp then starts once on an empty etcd). Unset: a claim, except for such a "
        "shard, which keeps its emptyDir until this is set (condition DataDurable says so).",
        default=None,
    )
    size: str = field(
        "size",
        "Requested size of the claim (a quantity); it can grow where the StorageClass allows "
        "volume expansion, never shrink.",
        default=DEFAULT_STORAGE_SIZE,
        maxLength=64,
        **{
            "x-kubernetes-validations": [
                {
                    "rule": "isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",
                    "message": "spec.storage.size must be a positive quantity such as 10Gi",
                }
            ]
        },
    )
    storage_class_name: str | None = field(
        "storageClassName",
        "StorageClass of the claim; unset: the cluster's default StorageClass. Fixed once the "
        "claim exists.",
        default=None,
        pattern=DNS_SUBDOMAIN_PATTERN,
        maxLength=253,
    )
    when_deleted: str = field(
        "whenDeleted",
        "What happens to the claim when the Shard is deleted. Retain (default): it stays, with "
        "the shard's data; a new Shard of the same name and namespace uses it again. Delete: "
        "it is deleted with the Shard (owner reference), and so is the data.",
        default=STORAGE_RETAIN,
        enum=[STORAGE_RETAIN, STORAGE_DELETE],
    )


def check_storage(storage: StorageSpec | None) -> None:
    if storage is not None:
        size = quantity(storage.size)
        if size is None or size <= 0:
            raise SpecError(
                "spec.storage.size", f"{storage.size!r} is not a positive quantity (e.g. 10Gi)"
            )
