"""Kubernetes API access for the operator (I/O only, no decisions).

Plain HTTP calls with urllib3: the few kinds the operator touches have fixed paths, and the
official client library would cost about 50 MiB of memory for models the operator never uses.
"""

from __future__ import annotations

import base64
import json
from typing import Any, cast
from urllib.parse import quote, urlencode

import urllib3

from kcp_shard_operator.constants import (
    CACHE_SERVER_KIND,
    CACHE_SERVER_PLURAL,
    FIELD_MANAGER,
    FRONT_PROXY_KIND,
    FRONT_PROXY_PLURAL,
    NAMESPACE_TERMINATING,
    SHARD_KIND,
    SHARD_PLURAL,
)
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.kube.credentials import TokenSource
from kcp_shard_operator.kube.kubeconfig import Endpoint
from kcp_shard_operator.kube.tls import ssl_context

PLURALS = {
    "ConfigMap": "configmaps",
    "Deployment": "deployments",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "Pod": "pods",
    "Secret": "secrets",
    "Service": "services",
    SHARD_KIND: SHARD_PLURAL,
    CACHE_SERVER_KIND: CACHE_SERVER_PLURAL,
    FRONT_PROXY_KIND: FRONT_PROXY_PLURAL,
}
TIMEOUT = urllib3.Timeout(connect=5.0, read=30.0)


class RefusedError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        super().__init__(f"{status} {reason}")
        self.status, self.reason, self.message = status, reason, message


APIError = (RefusedError, urllib3.exceptions.HTTPError, OSError)
"""What a failed API call raises: a refusal by the server, or no answer."""


def error_message(err: BaseException) -> str:
    """The API server's own message for a refused call (never the request body)."""
    if isinstance(err, RefusedError):
        suffix = f": {err.message}" if err.message else ""
        return f"{err.status} {err.reason}{suffix}"
    return f"API server unreachable: {type(err).__name__}"


def namespace_terminating(err: BaseException) -> bool:
    """Whether ``err`` is the API server refusing a creation because the namespace is being
    deleted (403, reason NamespaceTerminating): no failure of the operator's."""
    return (
        isinstance(err, RefusedError) and err.status == 403 and NAMESPACE_TERMINATING in err.message
    )


def path_of(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    """The API path of an object, or of a kind in a namespace (None: in all of them)."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    scope = "" if namespace is None else f"/namespaces/{quote(namespace)}"
    path = f"{base}{scope}/{PLURALS[kind]}"
    return f"{path}/{quote(name)}" if name else path


class Kube:
    """The calls the operator makes, returning plain dicts."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._server = endpoint.server
        self._token = TokenSource(endpoint)
        self._pool = urllib3.PoolManager(
            ssl_context=ssl_context(endpoint), retries=False, timeout=TIMEOUT, maxsize=4
        )

    def _call(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> JSON | None:
        """The answer as JSON; None for 404. Any other error status raises ``RefusedError``."""
        headers = {"Accept": "application/json"}
        token = self._token.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        payload = None
        if body is not None:
            headers["Content-Type"] = content_type
            payload = json.dumps(body).encode()
        query = f"?{urlencode(params)}" if params else ""
        response = self._pool.urlopen(
            method, self._server + path + query, body=payload, headers=headers, redirect=False
        )
        if response.status == 404:
            return None
        if response.status >= 300:
            raise _refusal(response)
        return cast(JSON, json.loads(response.data or b"{}"))

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
        return self._call("GET", path_of(api_version, kind, namespace, name))

    def list(self, api_version: str, kind: str, namespace: str | None) -> list[JSON]:
        """The objects of ``kind`` in ``namespace`` (None: in all namespaces), each with its
        apiVersion and kind set (a list's items carry neither)."""
        found = self._call("GET", path_of(api_version, kind, namespace)) or {}
        return [
            {"apiVersion": api_version, "kind": kind, **item} for item in found.get("items") or []
        ]

    def apply(self, obj: JSON) -> JSON:
        meta = obj["metadata"]
        return self._written(
            "PATCH",
            path_of(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]),
            obj,
            "application/apply-patch+yaml",
            {"fieldManager": FIELD_MANAGER, "force": "true"},
        )

    def create(self, obj: JSON) -> JSON:
        """POST ``obj``: a 409 AlreadyExists when another writer created it first."""
        meta = obj["metadata"]
        return self._written(
            "POST",
            path_of(obj["apiVersion"], obj["kind"], meta["namespace"]),
            obj,
            "application/json",
            {"fieldManager": FIELD_MANAGER},
        )

    def replace(self, obj: JSON, dry_run: bool = False) -> JSON:
        """PUT ``obj`` as it is (it carries the resourceVersion it replaces)."""
        meta = obj["metadata"]
        params = {"fieldManager": FIELD_MANAGER, **({"dryRun": "All"} if dry_run else {})}
        return self._written(
            "PUT",
            path_of(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]),
            obj,
            "application/json",
            params,
        )

    def storage_classes(self) -> dict[str, JSON]:
        """The cluster's StorageClasses by name."""
        found = self._call("GET", "/apis/storage.k8s.io/v1/storageclasses") or {}
        return {item["metadata"]["name"]: item for item in found.get("items") or []}

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self._call("DELETE", path_of(api_version, kind, namespace, name))

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: JSON
    ) -> JSON:
        """Merge ``status`` into the object's status; the object as written."""
        path = path_of(api_version, kind, namespace, name) + "/status"
        return self._written("PATCH", path, {"status": status}, "application/merge-patch+json")

    def _written(
        self,
        method: str,
        path: str,
        body: JSON,
        content_type: str,
        params: dict[str, str] | None = None,
    ) -> JSON:
        written = self._call(method, path, body, content_type, params)
        if written is None:
            raise RefusedError(404, "Not Found", f"{path} does not exist")
        return written

    def secret_value(self, namespace: str, name: str, key: str) -> bytes | None:
        return (self.secret_data(namespace, name) or {}).get(key)

    def secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None:
        """The decoded data of a Secret; None when it does not exist."""
        secret = self.get("v1", "Secret", namespace, name)
        if secret is None:
            return None
        return {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}


def _refusal(response: Any) -> RefusedError:
    try:
        status = json.loads(response.data or b"")
    except ValueError:
        status = None
    message = status.get("message", "") if isinstance(status, dict) else ""
    return RefusedError(response.status, response.reason or "", str(message))
