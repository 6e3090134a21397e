"""HTTP calls to one kcp shard for the identity-cache cleanup (the thin shell).

The requests go to ``/clusters/system:shard/...`` on the shard's base URL, outside any API
group, through the ``kubernetes`` library's machinery
(:class:`kcp_shard_operator.kube.client.HTTP`): its pool, TLS and credentials. A client is
kept per kubeconfig (one per revision of its Secret) while it is used; its certificate and key
live in files of a private folder removed with it. Nothing in this module logs or returns
credentials; messages carry URLs, status codes and the server's error text only.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
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
from kcp_shard_operator.identitycache.target import base_url, load_target
from kcp_shard_operator.kube.client import HTTP, UnreachableError
from kcp_shard_operator.kube.credentials import Credentials
from kcp_shard_operator.kube.kubeconfig import CredentialsError

DEFAULT_TIMEOUT = 10.0
MAX_ANSWER_BYTES = 4 * 1024 * 1024
"""Answers read at most this far: one object or a health report, never a listing."""
IDLE_SECONDS = 600.0
"""A client not used for this long is closed: its kubeconfig was replaced (a rotated Secret)
or its Shard is gone."""


class ShardClient:
    """JSON requests to one shard with a kubeconfig's credentials; redirects are not followed,
    no request is retried (a probe's or a cleanup's schedule does that), a 401 is an answer
    (an admin kubeconfig's credentials are static; the command runs an exec plugin afresh)."""

    def __init__(
        self, credentials: Credentials, timeout: float = DEFAULT_TIMEOUT, server: str | None = None
    ) -> None:
        self.server = base_url(server or credentials.server)
        self.credentials = credentials
        self._http = HTTP(credentials, pool_size=2, retry=False, timeout=timeout, renew=False)

    def request(self, method: str, url: str, body: Any = None) -> Response:
        """One request; raises :class:`UnreachableError` when the shard cannot be reached."""
        status, raw = self.send(method, url, body)
        return Response(status, _json(raw))

    def send(self, method: str, url: str, body: Any = None) -> tuple[int, bytes]:
        """One request: the status code and the raw answer (at most ``MAX_ANSWER_BYTES``)."""
        answer = self._http.request(method, url, body, max_bytes=MAX_ANSWER_BYTES)
        return answer.status, answer.data

    def close(self) -> None:
        self._http.close()


class ShardClients:
    """Shard clients by kubeconfig bytes (one per revision of a Secret), server and timeout,
    each closed once unused for ``idle`` seconds."""

    def __init__(
        self, idle: float = IDLE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._idle = idle
        self._clock = clock
        self._clients: dict[tuple[str, str | None, float], tuple[ShardClient, float]] = {}
        self._lock = threading.Lock()
        self._swept = clock()

    def __len__(self) -> int:
        return len(self._clients)

    def get(
        self, kubeconfig: bytes, timeout: float = DEFAULT_TIMEOUT, server: str | None = None
    ) -> ShardClient:
        """The client for a kubeconfig from a Secret (inline credentials only); raises
        ``CredentialsError`` for one that cannot be used."""
        key = (hashlib.sha256(kubeconfig).hexdigest(), server, timeout)
        now = self._clock()
        with self._lock:
            self._sweep(now)
            found = self._clients.get(key)
            if found is None:
                client = ShardClient(load_target(kubeconfig, inline_only=True), timeout, server)
            else:
                client = found[0]
            self._clients[key] = (client, now)
            return client

    def _sweep(self, now: float) -> None:
        if now - self._swept < self._idle / 10:
            return
        self._swept = now
        for key, (client, used) in list(self._clients.items()):
            if now - used > self._idle:
                del self._clients[key]
                client.close()


CLIENTS = ShardClients()
"""The operator's shard clients, shared by the cleanup and the health probes."""


def _json(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def clean(client: ShardClient, *, dry_run: bool = False, refuse_root: bool = True) -> Outcome:
    """Check the shard is not a root shard, read the ConfigMap, delete exactly that object."""
    base = client.server
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
    except UnreachableError as err:
        return unreachable(base, err.reason)


def clean_shard(
    kubeconfig: bytes,
    *,
    dry_run: bool = False,
    refuse_root: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
) -> Outcome:
    """Delete the stale ConfigMap on the shard a Secret's kubeconfig names, with its client
    from :data:`CLIENTS`; never raises for shard or kubeconfig problems, which come back as a
    failed :class:`Outcome`."""
    try:
        client = CLIENTS.get(kubeconfig, timeout)
    except CredentialsError as err:
        return Outcome(Result.FAILED, f"unusable kubeconfig: {err}")
    return clean(client, dry_run=dry_run, refuse_root=refuse_root)


def clean_with_kubeconfig_file(
    kubeconfig: bytes, context: str | None, folder: Path, *, dry_run: bool = False
) -> Outcome:
    """:func:`clean_shard` with a user's own kubeconfig file (``folder`` holds it): its files
    and exec plugin are used, its ``context`` (else ``shard-base``, else the current one)."""
    try:
        client = ShardClient(load_target(kubeconfig, context, folder))
    except CredentialsError as err:
        return Outcome(Result.FAILED, f"unusable kubeconfig: {err}")
    try:
        return clean(client, dry_run=dry_run)
    finally:
        client.close()
