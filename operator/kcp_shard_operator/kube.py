"""Kubernetes API access for the operator (I/O only, no decisions).

Uses the official client's dynamic client, which speaks server-side apply.
"""

from __future__ import annotations

import base64
import json
from typing import Any, cast

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from kcp_shard_operator import API_GROUP, API_VERSION, FIELD_MANAGER
from kcp_shard_operator.model import JSON

SHARD_API_VERSION = f"{API_GROUP}/{API_VERSION}"
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
APIError = (ApiException, urllib3.exceptions.HTTPError, OSError)
"""What a failed API call raises: a refusal by the server, or no answer."""


def error_message(err: BaseException) -> str:
    """The API server's own message for a refused call (never the request body)."""
    if isinstance(err, ApiException):
        try:
            body = json.loads(err.body or "")
        except ValueError:
            body = None
        message = body.get("message") if isinstance(body, dict) else None
        return f"{err.status} {err.reason}: {message}" if message else f"{err.status} {err.reason}"
    return f"API server unreachable: {type(err).__name__}"


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

    def list(
        self, api_version: str, kind: str, namespace: str, label_selector: str | None = None
    ) -> list[JSON]:
        found = self._resource(api_version, kind).get(
            namespace=namespace, label_selector=label_selector
        )
        return [cast(JSON, item) for item in found.to_dict().get("items", [])]

    def apply(self, obj: JSON) -> JSON:
        resource = self._resource(obj["apiVersion"], obj["kind"])
        applied = resource.server_side_apply(
            body=obj,
            namespace=obj["metadata"]["namespace"],
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
        return cast(JSON, applied.to_dict())

    def replace(self, obj: JSON, dry_run: bool = False) -> JSON:
        """PUT ``obj`` as it is (it carries the resourceVersion it replaces)."""
        resource = self._resource(obj["apiVersion"], obj["kind"])
        replaced = resource.replace(
            body=obj,
            namespace=obj["metadata"]["namespace"],
            field_manager=FIELD_MANAGER,
            dry_run="All" if dry_run else None,
        )
        return cast(JSON, replaced.to_dict())

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
