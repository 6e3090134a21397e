"""Names, labels and metadata every object rendered for a Shard shares (pure)."""

from __future__ import annotations

import hashlib
import json

from kcp_shard_operator.constants import API_GROUP, FIELD_MANAGER, SHARD_API_VERSION, SHARD_KIND
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.core.shard.spec import Shard

VERSION_ANNOTATION = f"{API_GROUP}/kcp-version"
HASH_ANNOTATION = f"{API_GROUP}/config-hash"
SECRETS_ANNOTATION = f"{API_GROUP}/secret-revisions"
ROOT_SHARD_LABEL = f"{API_GROUP}/root-shard"
INSTANCE_LABEL = "app.kubernetes.io/instance"
NAME_LABEL = "app.kubernetes.io/name"


def child_name(shard: Shard) -> str:
    return f"{shard.name}-kcp"


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


def version_label(version: Version) -> str:
    """``version`` as a label value: without build metadata (``+`` is not allowed there)
    and without a trailing ``-`` (a pre-release may end in one, a label value may not)."""
    return str(version).rstrip("-")


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


def stamped(obj: JSON) -> JSON:
    """``obj`` annotated with a hash of itself.

    A field dropped from the rendering changes the hash, so the operator re-applies
    (and server-side apply removes the field) even though what is left still matches.
    """
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]
    obj["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = digest
    return obj
