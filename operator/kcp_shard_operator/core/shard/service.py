"""Shard -> its ClusterIP Service (pure)."""

from __future__ import annotations

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.kcp.podtemplate import PORT
from kcp_shard_operator.core.shard.meta import child_name, metadata, selector_labels
from kcp_shard_operator.core.shard.spec import Shard


def service_url(shard: Shard) -> str:
    return f"https://{child_name(shard)}.{shard.namespace}.svc:{PORT}"


def base_url(shard: Shard) -> str:
    """Where the operator and the other shards reach ``shard`` (``--shard-base-url``): its
    ``baseURL``, else its Service."""
    return shard.spec.base_url or service_url(shard)


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
