"""Annotations, labels and the config hash every kind's children share (pure)."""

from __future__ import annotations

import hashlib
import json

from kcp_shard_operator.constants import API_GROUP
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.kcp.versions import Version

VERSION_ANNOTATION = f"{API_GROUP}/kcp-version"
HASH_ANNOTATION = f"{API_GROUP}/config-hash"
SECRETS_ANNOTATION = f"{API_GROUP}/secret-revisions"
ROOT_SHARD_LABEL = f"{API_GROUP}/root-shard"
INSTANCE_LABEL = "app.kubernetes.io/instance"
NAME_LABEL = "app.kubernetes.io/name"


def version_label(version: Version) -> str:
    """``version`` as a label value: without build metadata (``+`` is not allowed there)
    and without a trailing ``-`` (a pre-release may end in one, a label value may not)."""
    return str(version).rstrip("-")


def stamped(obj: JSON) -> JSON:
    """``obj`` annotated with a hash of itself.

    A field dropped from the rendering changes the hash, so the operator re-applies
    (and server-side apply removes the field) even though what is left still matches.
    """
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]
    obj["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = digest
    return obj
