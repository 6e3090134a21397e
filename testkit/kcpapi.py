"""JSON requests to one kcp shard, addressed directly (no front-proxy), as an admin kubeconfig's
user: a local ``kcp start`` process or a shard pod behind a ``kubectl port-forward``."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kcp_shard_operator.kube.client import HTTP
from kcp_shard_operator.kube.client import UnreachableError as NoAnswerError
from kcp_shard_operator.kube.credentials import from_kubeconfig

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

    def request(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, JSON]:
        """``method path`` with a JSON ``body``; the status and the JSON answer (``{"text":
        ...}`` for a plain one). Raises :class:`UnreachableError` when the shard does not answer."""
        found = from_kubeconfig(
            self.kubeconfig.read_bytes(), self.context, base_dir=self.kubeconfig.parent
        )
        client = HTTP(found, retry=False, timeout=TIMEOUT)
        url = base_url(self.server() if self.server else found.server) + path
        try:
            answer = client.request(method, url, body, content_type)
        except NoAnswerError as err:
            if self.reconnect is not None:
                self.reconnect()
            raise UnreachableError(f"{method} {path} on shard {self.name}: {err}") from err
        finally:
            client.close()
        return answer.status, _json(answer.data)

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
