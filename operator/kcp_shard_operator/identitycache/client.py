"""HTTP calls to one kcp shard for the identity-cache cleanup (the thin shell).

Plain ``urllib`` and ``ssl`` rather than the ``kubernetes`` client: the requests go to
``/clusters/system:shard/...`` on the shard's base URL, outside any API group the client
models; its configuration loader keeps inline client keys in temporary files until the
process exits and holds process-global state, whereas here a client key touches the disk
only inside :func:`ssl_context` (a 0600 file removed before it returns) and tokens stay in
memory. Nothing in this module logs or returns credentials; messages carry URLs, status
codes and the server's error text only.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import tempfile
import urllib.error
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from kcp_shard_operator.identitycache.policy import (
    Found,
    KubeconfigError,
    Outcome,
    Response,
    Result,
    ShardTarget,
    configmap_url,
    delete_options,
    interpret_delete,
    interpret_get,
    interpret_root_probe,
    root_logicalcluster_url,
    target_from_kubeconfig,
    unreachable,
    would_delete,
)

DEFAULT_TIMEOUT = 10.0


def _write_private(directory: str, name: str, content: bytes) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    return path


class _NamedContext(ssl.SSLContext):
    """Verifies the server certificate against ``server_name`` instead of the URL's host."""

    server_name = ""

    def wrap_socket(
        self,
        sock: socket.socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        return super().wrap_socket(
            sock,
            server_side,
            do_handshake_on_connect,
            suppress_ragged_eofs,
            self.server_name or server_hostname,
            session,
        )


def ssl_context(target: ShardTarget) -> ssl.SSLContext:
    """A TLS context with the target's CA and client certificate loaded into memory."""
    context = _NamedContext(ssl.PROTOCOL_TLS_CLIENT)
    context.server_name = target.tls_server_name or ""
    if target.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif target.ca_pem:
        context.load_verify_locations(cadata=target.ca_pem.decode("ascii", errors="replace"))
    elif target.ca_file:
        context.load_verify_locations(cafile=target.ca_file)
    else:
        context.load_default_certs()
    if target.client_cert_pem or target.client_key_pem:
        # ssl loads certificate chains from files only: a private folder that lives for
        # the duration of this call.
        with tempfile.TemporaryDirectory(prefix="kcp-shard-cert-") as folder:
            os.chmod(folder, 0o700)
            cert = (
                _write_private(folder, "client.crt", target.client_cert_pem)
                if target.client_cert_pem
                else target.client_cert_file
            )
            key = (
                _write_private(folder, "client.key", target.client_key_pem)
                if target.client_key_pem
                else target.client_key_file
            )
            context.load_cert_chain(str(cert), str(key))
    elif target.client_cert_file and target.client_key_file:
        context.load_cert_chain(target.client_cert_file, target.client_key_file)
    return context


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Answers a redirect with its own 3xx: credentials never follow it to another origin."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class ShardClient:
    """JSON requests to one shard with the target's credentials; redirects are not followed."""

    def __init__(self, target: ShardTarget, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.target = target
        self.timeout = timeout
        self._context = ssl_context(target) if target.base_url.startswith("https") else None
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=self._context), _NoRedirects()
        )
        token = target.token
        if not token and target.token_file:
            token = Path(target.token_file).read_text().strip()
        self._headers = {"Accept": "application/json", "User-Agent": "kcp-shard-operator"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    def request(self, method: str, url: str, body: Any = None) -> Response:
        """One request; raises ``OSError`` subclasses when the shard cannot be reached."""
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=self.timeout) as answer:
                return Response(answer.status, _json(answer.read()))
        except urllib.error.HTTPError as err:
            return Response(err.code, _json(err.read()))


def _json(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _reason(err: BaseException) -> str:
    if isinstance(err, urllib.error.URLError) and not isinstance(err, urllib.error.HTTPError):
        return str(err.reason)
    if isinstance(err, socket.timeout | TimeoutError):
        return "timed out"
    return f"{type(err).__name__}: {err}"


def clean(client: ShardClient, *, dry_run: bool = False, refuse_root: bool = True) -> Outcome:
    """Check the shard is not a root shard, read the ConfigMap, delete exactly that object."""
    base = client.target.base_url
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
    except (OSError, ssl.SSLError) as err:
        return unreachable(base, _reason(err))


def load_target(
    kubeconfig: bytes, context: str | None = None, base_dir: Path | None = None
) -> ShardTarget:
    """Parse kubeconfig bytes (YAML or JSON) into a :class:`ShardTarget`."""
    try:
        parsed = yaml.safe_load(kubeconfig)
    except yaml.YAMLError as err:
        # The parser's message quotes the offending text, which may be a token: position only.
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise KubeconfigError(f"not valid YAML{where}") from None
    folder = PurePosixPath(base_dir) if base_dir is not None else None
    return target_from_kubeconfig(parsed, context, folder)


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
        target = load_target(kubeconfig, context, base_dir)
        client = ShardClient(target, timeout)
    except KubeconfigError as err:
        return Outcome(Result.FAILED, f"unusable kubeconfig: {err}")
    except (OSError, ssl.SSLError) as err:
        return Outcome(Result.FAILED, f"cannot load the TLS material of the kubeconfig: {err}")
    return clean(client, dry_run=dry_run, refuse_root=refuse_root)
