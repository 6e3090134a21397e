"""Names, labels and metadata of the objects rendered for a Shard (pure)."""

from __future__ import annotations

from kcp_shard_operator.constants import FIELD_MANAGER, SHARD_API_VERSION, SHARD_KIND
from kcp_shard_operator.core.api.meta import INSTANCE_LABEL, ROOT_SHARD_LABEL, version_label
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.shard.names import child_name
from kcp_shard_operator.core.shard.spec import Shard


def selector_labels(shard: Shard) -> dict[str, str]:
    return {"app.kubernetes.io/name": "kcp", INSTANCE_LABEL: shard.name}


def labels(shard: Shard, root_name: str | None, *, versioned: bool = False) -> dict[str, str]:
    """Recommended labels; the kcp version only where it changes anyway (the Deployment),
    so that an upgrade does not rewrite the Service and the PodDisruptionBudget."""
    result = {
        **selector_labels(shard),
        "app.kubernetes.io/component": "root-shard" if shard.spec.is_root else "shard",
        "app.kubernetes.io/part-of": "kcp",
        "app.kubernetes.io/managed-by": FIELD_MANAGER,
    }
    if versioned:
        result["app.kubernetes.io/version"] = version_label(shard.spec.kcp_version)
    if root_name:
        result[ROOT_SHARD_LABEL] = root_name
    return result


def metadata(
    shard: Shard,
    root_name: str | None,
    *,
    name: str | None = None,
    versioned: bool = False,
    owned: bool = True,
) -> JSON:
    """Metadata of a child; ``owned`` children carry the Shard as controlling owner, so
    that deleting the Shard deletes them."""
    meta: JSON = {
        "name": name or child_name(shard),
        "namespace": shard.namespace,
        "labels": labels(shard, root_name, versioned=versioned),
    }
    if shard.uid and owned:
        meta["ownerReferences"] = [
            {
                "apiVersion": SHARD_API_VERSION,
                "kind": SHARD_KIND,
                "name": shard.name,
                "uid": shard.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return meta
