"""HTTP calls to one kcp shard for the identity-cache cleanup (the thin shell).

Plain ``urllib``: the requests go to ``/clusters/system:shard/...`` on the shard's base URL,
outside any API group. A client key touches the disk only inside
:func:`kcp_shard_operator.kube.tls.ssl_context` (a 0600 file removed before it returns) and
tokens stay in memory. Nothing in this module logs or returns credentials; messages carry URLs,
status codes and the server's error text only.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Any

from kcp_shard_operator.identitycache.policy import (
    Found,
    Outcome,
    Response,
    Result,
    configmap_url,
    delete_options,
    interpret_delete,
    interpret_get,
    interpret_root_probe,
    root_logicalcluster_url,
    unreachable,
    would_delete,
)
from kcp_shard_operator.identitycache.target import load_target
from kcp_shard_operator.kube.kubeconfig import Endpoint, KubeconfigError, bearer_token
from kcp_shard_operator.kube.tls import ssl_context

DEFAULT_TIMEOUT = 10.0
NO_ANSWER = (OSError, ssl.SSLError, http.client.HTTPException, ValueError)
"""What a request raises without an answer: socket and TLS errors, a peer that does not speak
HTTP (``BadStatusLine``), a URL or header urllib refuses late (``InvalidURL``, a
``ValueError`` whose text quotes the header: see :func:`unreachable_reason`)."""
MAX_ANSWER_BYTES = 4 * 1024 * 1024
"""Answers read at most this far: one object or a health report, never a listing."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Answers a redirect with its own 3xx: credentials never follow it to another origin."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class ShardClient:
    """JSON requests to one shard with the target's credentials; redirects are not followed."""

    def __init__(self, target: Endpoint, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.target = target
        self.timeout = timeout
        self._context = ssl_context(target) if target.server.startswith("https") else None
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=self._context), _NoRedirects()
        )
        token = target.token
        if not token and target.token_file:
            text = Path(target.token_file).read_text().strip()
            token = bearer_token(text, f"the token in {target.token_file}")
        self._headers = {"Accept": "application/json", "User-Agent": "kcp-shard-operator"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    def request(self, method: str, url: str, body: Any = None) -> Response:
        """One request; raises ``OSError`` subclasses when the shard cannot be reached."""
        status, raw = self.send(method, url, body)
        return Response(status, _json(raw))

    def send(self, method: str, url: str, body: Any = None) -> tuple[int, bytes]:
        """One request: the status code and the raw answer (at most ``MAX_ANSWER_BYTES``)."""
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=self.timeout) as answer:
                return answer.status, answer.read(MAX_ANSWER_BYTES)
        except urllib.error.HTTPError as err:
            return err.code, err.read(MAX_ANSWER_BYTES)


def _json(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def unreachable_reason(err: BaseException) -> str:
    """Why a request did not get an answer: the socket or TLS error, no request content.

    Only an ``OSError``'s text is shown; any other error's may quote the request (a header).
    """
    if isinstance(err, urllib.error.URLError) and not isinstance(err, urllib.error.HTTPError):
        return str(err.reason)
    if isinstance(err, TimeoutError):
        return "timed out"
    if isinstance(err, OSError):
        return f"{type(err).__name__}: {err}"
    return type(err).__name__


def clean(client: ShardClient, *, dry_run: bool = False, refuse_root: bool = True) -> Outcome:
    """Check the shard is not a root shard, read the ConfigMap, delete exactly that object."""
    base = client.target.server
    try:
        if refuse_root:
            stop = interpret_root_probe(base, client.request("GET", root_logicalcluster_url(base)))
            if stop is not None:
                return stop
        url = configmap_url(base)
        found = interpret_get(base, client.request("GET", url))
        if not isinstance(found, Found):
            return found
        if dry_run:
            return would_delete(base, found)
        return interpret_delete(base, found, client.request("DELETE", url, delete_options(found)))
    except NO_ANSWER as err:
        return unreachable(base, unreachable_reason(err))


def clean_shard(
    kubeconfig: bytes,
    context: str | None = None,
    *,
    dry_run: bool = False,
    refuse_root: bool = True,
    base_dir: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Outcome:
    """Delete the stale ConfigMap on the shard named by ``kubeconfig``; never raises for
    shard or kubeconfig problems, which come back as a failed :class:`Outcome`."""
    try:
        folder = PurePosixPath(base_dir) if base_dir is not None else None
        target = load_target(kubeconfig, context, folder)
        client = ShardClient(target, timeout)
    except KubeconfigError as err:
        return Outcome(Result.FAILED, f"unusable kubeconfig: {err}")
    except (OSError, ssl.SSLError) as err:
        return Outcome(Result.FAILED, f"cannot load the TLS material of the kubeconfig: {err}")
    return clean(client, dry_run=dry_run, refuse_root=refuse_root)
