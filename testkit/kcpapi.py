"""JSON requests to one kcp shard, addressed directly (no front-proxy), as an admin kubeconfig's
user: a local ``kcp start`` process or a shard pod behind a ``kubectl port-forward``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from kcp_shard_operator.kube.kubeconfig import endpoint_from_kubeconfig
from kcp_shard_operator.kube.tls import ssl_context

JSON = dict[str, Any]
TIMEOUT = 15.0


class UnreachableError(AssertionError):
    """The shard did not answer (connection refused or reset, TLS failure, timeout)."""


def base_url(server: str) -> str:
    """``server`` without a ``/clusters/<name>`` path: kcp's admin kubeconfigs point at one."""
    parts = urlsplit(server)
    path = parts.path.split("/clusters/", 1)[0].rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


@dataclass(frozen=True)
class ShardAPI:
    """One kcp shard named ``name`` (its ``--shard-name``), reached with the admin credentials
    of ``kubeconfig``'s ``context``. The kubeconfig is read at every request: a shard started
    on a fresh root directory writes a new one with new tokens.

    ``server``, asked at every request, replaces the kubeconfig's server (a port-forward);
    ``reconnect`` is called when the shard did not answer (the forwarded pod may be gone)."""

    name: str
    kubeconfig: Path
    context: str | None = None
    server: Callable[[], str] | None = None
    reconnect: Callable[[], None] | None = None

    def request(self, method: str, path: str, body: JSON | None = None) -> tuple[int, JSON]:
        """``method path`` with a JSON ``body``; the status and the JSON answer (``{"text":
        ...}`` for a plain one). Raises :class:`UnreachableError` when the shard does not answer."""
        endpoint = endpoint_from_kubeconfig(
            yaml.safe_load(self.kubeconfig.read_text()),
            self.context,
            PurePosixPath(self.kubeconfig.parent),
        )
        headers = {"Accept": "application/json"}
        if endpoint.token:
            headers["Authorization"] = f"Bearer {endpoint.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        url = base_url(self.server() if self.server else endpoint.server) + path
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(
                request, timeout=TIMEOUT, context=ssl_context(endpoint)
            ) as answer:
                return answer.status, _json(answer.read())
        except urllib.error.HTTPError as err:
            return err.code, _json(err.read())
        except (urllib.error.URLError, OSError) as err:
            if self.reconnect is not None:
                self.reconnect()
            raise UnreachableError(f"{method} {path} on shard {self.name}: {err}") from err

    def get(self, path: str) -> JSON | None:
        """The object at ``path``, or None when it does not exist (404)."""
        status, body = self.request("GET", path)
        if status == 404:
            return None
        if status != 200:
            raise AssertionError(f"GET {path} on shard {self.name}: {status} {body}")
        return body

    def create(self, path: str, obj: JSON) -> JSON:
        """POST ``obj`` to the collection at ``path``; the created object."""
        status, body = self.request("POST", path, obj)
        if status not in (200, 201):
            raise AssertionError(f"POST {path} on shard {self.name}: {status} {body}")
        return body


def _json(raw: bytes) -> JSON:
    try:
        value = json.loads(raw)
    except ValueError:
        return {"text": raw.decode(errors="replace")}
    return value if isinstance(value, dict) else {"value": value}
