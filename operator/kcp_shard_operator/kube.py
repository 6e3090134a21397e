"""Kubernetes API access for the operator (I/O only, no decisions).

Uses the official client's dynamic client, which speaks server-side apply.
"""

from __future__ import annotations

import base64
from typing import Any, cast

from kubernetes import client, config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from kcp_shard_operator import API_GROUP, API_VERSION, FIELD_MANAGER
from kcp_shard_operator.model import JSON

SHARD_API_VERSION = f"{API_GROUP}/{API_VERSION}"


def load_api_client() -> client.ApiClient:
    """In-cluster credentials when running in a pod, else the local kubeconfig."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


class Kube:
    """Thin wrappers around the dynamic client, returning plain dicts."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._dynamic = DynamicClient(api_client)

    def _resource(self, api_version: str, kind: str) -> Any:
        return self._dynamic.resources.get(api_version=api_version, kind=kind)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
        try:
            found = self._resource(api_version, kind).get(name=name, namespace=namespace)
        except NotFoundError:
            return None
        return cast(JSON, found.to_dict())

    def apply(self, obj: JSON) -> JSON:
        resource = self._resource(obj["apiVersion"], obj["kind"])
        applied = resource.server_side_apply(
            body=obj,
            namespace=obj["metadata"]["namespace"],
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
        return cast(JSON, applied.to_dict())

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        try:
            self._resource(api_version, kind).delete(name=name, namespace=namespace)
        except NotFoundError:
            return

    def patch_shard_status(self, namespace: str, name: str, status: JSON) -> JSON:
        """Merge ``status`` into the Shard's status; the Shard as written."""
        shards = self._resource(SHARD_API_VERSION, "Shard")
        patched = shards.status.patch(
            name=name,
            namespace=namespace,
            body={"status": status},
            content_type="application/merge-patch+json",
        )
        return cast(JSON, patched.to_dict())

    def secret_value(self, namespace: str, name: str, key: str) -> bytes | None:
        secret = self.get("v1", "Secret", namespace, name)
        data = (secret or {}).get("data") or {}
        return base64.b64decode(data[key]) if key in data else None
