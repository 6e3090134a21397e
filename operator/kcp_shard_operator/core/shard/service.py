"""Shard -> its ClusterIP Service (pure)."""

from __future__ import annotations

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.kcp.podtemplate import PORT
from kcp_shard_operator.core.shard.meta import metadata, selector_labels
from kcp_shard_operator.core.shard.spec import Shard


def service(shard: Shard, root_name: str | None) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(shard, root_name),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(shard),
            "ports": [{"name": "https", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }
