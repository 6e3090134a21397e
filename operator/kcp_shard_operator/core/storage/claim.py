"""What may change in an existing PersistentVolumeClaim (pure)."""

from __future__ import annotations

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.api.quantity import quantity


def refused_change(desired: JSON, live: JSON | None) -> str | None:
    """Why ``desired`` cannot be applied to the existing claim ``live``, or None.

    A claim's StorageClass is fixed once it exists, and a volume never shrinks; a larger
    size is applied (the API server refuses it where the class does not allow expansion).
    """
    if live is None:
        return None
    name = live["metadata"]["name"]
    wanted_class = desired["spec"].get("storageClassName")
    live_class = (live.get("spec") or {}).get("storageClassName")
    if wanted_class and live_class and wanted_class != live_class:
        if (live.get("status") or {}).get("phase") == "Bound":
            remedy = (
                "set spec.storage.storageClassName back, or move the shard's data to a new Shard"
            )
        else:
            remedy = "it is not bound and holds no data: delete it and the operator creates it anew"
        return (
            f"PersistentVolumeClaim {name} has StorageClass {live_class!r}; the class of an "
            f"existing claim cannot change to {wanted_class!r} ({remedy})"
        )
    wanted = desired["spec"]["resources"]["requests"]["storage"]
    current = (((live.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(
        "storage"
    )
    wanted_bytes, current_bytes = quantity(wanted), quantity(current)
    if wanted_bytes is not None and current_bytes is not None and wanted_bytes < current_bytes:
        return (
            f"PersistentVolumeClaim {name} requests {current}; a volume cannot shrink to "
            f"{wanted} (set spec.storage.size to {current} or more)"
        )
    return None
