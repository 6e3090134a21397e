"""Shard -> its PodDisruptionBudget, for more than one replica (pure)."""

from __future__ import annotations

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.shard.meta import metadata, selector_labels
from kcp_shard_operator.core.shard.spec import Shard


def pdb(shard: Shard, root_name: str | None) -> JSON | None:
    """At most one pod down at a time; None for a single replica (it would block drains)."""
    if shard.spec.replicas <= 1:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(shard, root_name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(shard)}},
    }
