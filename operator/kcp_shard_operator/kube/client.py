"""Kubernetes API access for the operator and the CLI (I/O only, no decisions).

The calls go through the ``kubernetes`` library's ``ApiClient`` (its urllib3 pool, TLS, proxy
and credentials), with plain dicts in and out: the few kinds the operator touches have fixed
paths, and the library's models would only be converted back to dicts.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any, cast
from urllib.parse import quote, urlencode, urlsplit

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import ws_client
from urllib3 import HTTPHeaderDict
from websocket import WebSocketException

from kcp_shard_operator.constants import (
    CACHE_SERVER_KIND,
    CACHE_SERVER_PLURAL,
    FIELD_MANAGER,
    FRONT_PROXY_KIND,
    FRONT_PROXY_PLURAL,
    KUBECONFIG_KIND,
    KUBECONFIG_PLURAL,
    NAMESPACE_TERMINATING,
    SHARD_KIND,
    SHARD_PLURAL,
    VIRTUAL_WORKSPACES_KIND,
    VIRTUAL_WORKSPACES_PLURAL,
)
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.kube.credentials import Credentials
from kcp_shard_operator.kube.kubeconfig import CredentialsError

PLURALS = {
    "ConfigMap": "configmaps",
    "Deployment": "deployments",
    "Job": "jobs",
    "NetworkPolicy": "networkpolicies",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "Pod": "pods",
    "Secret": "secrets",
    "Service": "services",
    SHARD_KIND: SHARD_PLURAL,
    CACHE_SERVER_KIND: CACHE_SERVER_PLURAL,
    FRONT_PROXY_KIND: FRONT_PROXY_PLURAL,
    VIRTUAL_WORKSPACES_KIND: VIRTUAL_WORKSPACES_PLURAL,
    KUBECONFIG_KIND: KUBECONFIG_PLURAL,
}
TIMEOUT = (5.0, 30.0)
"""Seconds to connect and to wait for an answer."""
POOL_SIZE = 4
"""Connections kept per API server when the caller does not say how many threads share them."""
PAGE_SIZE = 500
"""Objects per page of a list (``limit``), as kubectl asks for them."""
RETRIES = 5
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
BACKOFF = 0.25
"""Seconds before the first retry without ``Retry-After``; doubled each time."""
MAX_WAIT = 10.0
"""The longest wait between two tries, also when ``Retry-After`` asks for more."""


@functools.cache
def user_agent() -> str:
    """``kcp-shard-operator/<version>``: the audit log names the operator and its release."""
    try:
        version = metadata.version("kcp-shard-operator")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return f"kcp-shard-operator/{version}"


class _Retry(urllib3.Retry):
    """urllib3's retries, with ``Retry-After`` honoured on 5xx too (as client-go does) and
    never waited longer than ``MAX_WAIT``."""

    RETRY_AFTER_STATUS_CODES = RETRY_STATUSES

    def get_retry_after(self, response: urllib3.BaseHTTPResponse) -> float | None:
        after = super().get_retry_after(response)
        return None if after is None else min(after, MAX_WAIT)


def retries() -> urllib3.Retry:
    """Up to ``RETRIES`` more tries of any request answered 429 or 5xx (a write too: the
    server did not apply it, or applying it again is harmless, as a server-side apply), after
    ``Retry-After`` or a backoff; one more try to connect; redirects are never followed."""
    return _Retry(
        total=RETRIES,
        connect=1,
        read=0,
        status=RETRIES,
        other=0,
        allowed_methods=None,
        status_forcelist=RETRY_STATUSES,
        backoff_factor=BACKOFF,
        backoff_max=MAX_WAIT,
        respect_retry_after_header=True,
        raise_on_status=False,
        redirect=0,
        raise_on_redirect=False,
    )


class RefusedError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        super().__init__(f"{status} {reason}")
        self.status, self.reason, self.message = status, reason, message


class UnreachableError(Exception):
    """No answer from the server: the message names its host and why, never a request."""

    def __init__(self, server: str, reason: str) -> None:
        self.host = urlsplit(server).netloc.rpartition("@")[2]
        self.reason = reason
        super().__init__(f"cannot reach {self.host}: {reason}")


APIError = (RefusedError, UnreachableError)
"""What a failed API call raises: a refusal by the server, or no answer."""
NO_ANSWER = (urllib3.exceptions.HTTPError, OSError, ApiException, ValueError)
"""What the library raises without an answer: socket, TLS and protocol errors (a TLS error
comes as an ``ApiException`` with status 0), a header http.client refuses late."""


def no_answer_reason(err: BaseException) -> str:
    """Why a request got no answer, in one line: the socket or TLS error, never a header."""
    while True:
        if isinstance(err, urllib3.exceptions.MaxRetryError) and err.reason is not None:
            err = err.reason
        elif isinstance(err, urllib3.exceptions.ProtocolError) and isinstance(
            err.args[-1], BaseException
        ):
            err = err.args[-1]
        else:
            break
    if isinstance(err, ApiException):
        return " ".join(str(err.reason).split()[1:]) or "TLS error"
    if isinstance(err, urllib3.exceptions.NameResolutionError):
        return str(err).rpartition(" (")[2].rstrip(")") or "name not resolved"
    if isinstance(err, urllib3.exceptions.NewConnectionError):
        return str(err).rpartition("Failed to establish a new connection: ")[2]
    if isinstance(err, TimeoutError | urllib3.exceptions.TimeoutError):
        return "timed out"
    if isinstance(err, OSError | urllib3.exceptions.HTTPError):
        return " ".join(f"{type(err).__name__}: {err}".split())
    return type(err).__name__


def error_message(err: BaseException) -> str:
    """The API server's own message for a refused call (never the request body)."""
    if isinstance(err, RefusedError):
        suffix = f": {err.message}" if err.message else ""
        head = f"{err.status} {err.reason}" if err.status else err.reason
        return f"{head}{suffix}"
    return str(err)


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


@dataclass(frozen=True)
class Answer:
    """What a server answered: status, reason phrase and body."""

    status: int
    reason: str
    data: bytes


class HTTP:
    """Requests to one server with :class:`Credentials` through the library's ``ApiClient``:
    its pool (``pool_size`` connections), TLS (``tls-server-name``), proxy and token refresh,
    with the impersonation headers and ``User-Agent``; with ``renew``, the credentials are
    renewed once after a 401 (an exec plugin runs again) and the request sent again."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        pool_size: int = POOL_SIZE,
        retry: urllib3.Retry | bool = True,
        timeout: float | tuple[float, float] = TIMEOUT,
        renew: bool = True,
    ) -> None:
        configuration = credentials.configuration
        configuration.connection_pool_maxsize = pool_size
        configuration.retries = retries() if retry is True else retry
        self.credentials = credentials
        self.timeout = timeout
        self._renew = renew
        self._client = ApiClient(configuration)
        self._client.user_agent = user_agent()

    @property
    def server(self) -> str:
        return self.credentials.server

    def request(
        self,
        method: str,
        url: str,
        body: Any = None,
        content_type: str = "application/json",
        max_bytes: int | None = None,
    ) -> Answer:
        """One request to ``url`` (on this server or another, as a front-proxy's Service),
        its answer read at most ``max_bytes`` far. Raises :class:`UnreachableError` without an
        answer, :class:`RefusedError` (401) when renewing the credentials failed."""
        seen = self.credentials.generation
        answer = self._send(method, url, body, content_type, max_bytes)
        if answer.status != 401 or not self._renew:
            return answer
        try:
            self.credentials.renew(seen)
        except CredentialsError as err:
            raise RefusedError(401, answer.reason, str(err)) from None
        return self._send(method, url, body, content_type, max_bytes)

    def _send(
        self, method: str, url: str, body: Any, content_type: str, max_bytes: int | None
    ) -> Answer:
        headers: dict[str, str] = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        _, _, serialized, _, _ = self._client.param_serialize(
            method, "", header_params=headers, auth_settings=["BearerToken"]
        )
        sent = HTTPHeaderDict(serialized)
        for name, value in self.credentials.impersonation:
            sent.add(name, value)
        try:
            response = self._client.call_api(
                method, url, header_params=sent, body=body, _request_timeout=self.timeout
            ).response
            try:
                data = response.read(max_bytes) if max_bytes else response.read()
                response.drain_conn()
            finally:
                response.release_conn()
        except NO_ANSWER as err:
            raise UnreachableError(url, no_answer_reason(err)) from None
        return Answer(response.status, response.reason or "", bytes(data or b""))

    def close(self) -> None:
        self._client.rest_client.close()
        self.credentials.close()


@dataclass(frozen=True)
class Ran:
    """What a command run in a container ended with."""

    code: int
    stdout: str
    stderr: str


LOG_MAX_BYTES = 16 * 1024 * 1024
"""The most of a pod's log read at once."""
IMPERSONATED_EXEC = (
    "the kubeconfig's user impersonates ('as'), and the kubernetes library's websocket client "
    "sends no Impersonate-* headers: the command would run as the user itself, so it is not run"
)
"""Why ``pods/exec`` is refused to a kubeconfig user with ``as``."""
EXEC_TIMEOUT = 900.0
"""Seconds a command run in a container may take (a snapshot of a large etcd)."""


class Kube:
    """The calls the operator makes, returning plain dicts."""

    def __init__(self, credentials: Credentials, pool_size: int = POOL_SIZE) -> None:
        self._http = HTTP(credentials, pool_size=pool_size)

    def _call(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> JSON | None:
        """The answer as JSON; None for 404. Any other error status raises ``RefusedError``."""
        query = f"?{urlencode(params)}" if params else ""
        answer = self._http.request(method, self._http.server + path + query, body, content_type)
        if answer.status == 404:
            return None
        if answer.status >= 300:
            raise _refusal(answer)
        return cast(JSON, json.loads(answer.data or b"{}"))

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
        return self._call("GET", path_of(api_version, kind, namespace, name))

    def _pages(self, path: str) -> list[JSON]:
        """Every item of the list at ``path``, asked for ``PAGE_SIZE`` at a time."""
        items: list[JSON] = []
        params = {"limit": str(PAGE_SIZE)}
        while True:
            found = self._call("GET", path, params=params) or {}
            items += found.get("items") or []
            token = (found.get("metadata") or {}).get("continue")
            if not token:
                return items
            params = {"limit": str(PAGE_SIZE), "continue": str(token)}

    def list(self, api_version: str, kind: str, namespace: str | None) -> list[JSON]:
        """The objects of ``kind`` in ``namespace`` (None: in all namespaces), each with its
        apiVersion and kind set (a list's items carry neither)."""
        return [
            {"apiVersion": api_version, "kind": kind, **item}
            for item in self._pages(path_of(api_version, kind, namespace))
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
        found = self._pages("/apis/storage.k8s.io/v1/storageclasses")
        return {item["metadata"]["name"]: item for item in found}

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self._call("DELETE", path_of(api_version, kind, namespace, name))

    def annotate(
        self, api_version: str, kind: str, namespace: str, name: str, annotations: JSON
    ) -> JSON:
        """Merge ``annotations`` into the object's; the object as written."""
        path = path_of(api_version, kind, namespace, name)
        body = {"metadata": {"annotations": annotations}}
        return self._written("PATCH", path, body, "application/merge-patch+json")

    def merge(self, api_version: str, kind: str, namespace: str, name: str, body: JSON) -> JSON:
        """A JSON merge patch of the object (its metadata and spec in one write); the object
        as written."""
        path = path_of(api_version, kind, namespace, name)
        return self._written("PATCH", path, body, "application/merge-patch+json")

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

    def run_in_container(
        self,
        namespace: str,
        pod: str,
        container: str,
        command: Sequence[str],
        timeout: float = EXEC_TIMEOUT,
    ) -> Ran:
        """Run ``command`` in a container of a running pod (``pods/exec``); raises
        :class:`UnreachableError` when no answer came. The library's websocket client is called
        directly: going through its ``CoreV1Api`` would cost the operator 21 MiB of imports for
        this one path."""
        credentials = self._http.credentials
        if credentials.impersonation:
            raise RefusedError(0, "pods/exec cannot impersonate", IMPERSONATED_EXEC)
        url = credentials.configuration.host + path_of("v1", "Pod", namespace, pod) + "/exec"
        query: list[tuple[str, str | list[str]]] = [
            ("container", container),
            ("command", [*command]),
            ("stdin", "false"),
            ("stdout", "true"),
            ("stderr", "true"),
            ("tty", "false"),
        ]
        authorization = credentials.authorization()
        headers = {"authorization": authorization} if authorization else {}
        try:
            answer = ws_client.websocket_call(
                credentials.configuration,
                "GET",
                url,
                query_params=query,
                headers=headers,
                _preload_content=False,
            )
            answer.run_forever(timeout=timeout)
            code = answer.returncode
            out, err = answer.read_stdout() or "", answer.read_stderr() or ""
            answer.close()
        except ApiException as err_:
            raise RefusedError(
                err_.status or 0, str(err_.reason or ""), str(err_.body or "")
            ) from None
        except (OSError, WebSocketException) as err_:
            raise UnreachableError(self._http.server, str(err_)) from None
        if code is None:
            return Ran(-1, out, err + f"\nno exit status within {timeout:.0f} s")
        return Ran(int(code), out, err)

    def pod_log(
        self, namespace: str, name: str, container: str, max_bytes: int = LOG_MAX_BYTES
    ) -> str | None:
        """The log of a container of a pod, at most ``max_bytes`` of it; None when the pod does
        not exist."""
        path = path_of("v1", "Pod", namespace, name) + "/log"
        query = urlencode({"container": container, "limitBytes": str(max_bytes)})
        answer = self._http.request("GET", f"{self._http.server}{path}?{query}")
        if answer.status == 404:
            return None
        if answer.status >= 300:
            raise _refusal(answer)
        return answer.data.decode(errors="replace")

    def secret_value(self, namespace: str, name: str, key: str) -> bytes | None:
        return (self.secret_data(namespace, name) or {}).get(key)

    def secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None:
        """The decoded data of a Secret; None when it does not exist."""
        secret = self.get("v1", "Secret", namespace, name)
        if secret is None:
            return None
        return {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}


def _refusal(answer: Answer) -> RefusedError:
    try:
        status = json.loads(answer.data or b"")
    except ValueError:
        status = None
    message = status.get("message", "") if isinstance(status, dict) else ""
    return RefusedError(answer.status, answer.reason, str(message))
