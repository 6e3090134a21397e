"""The operator's Kubernetes credentials: the pod's ServiceAccount, else a kubeconfig.

One loader for both API clients: the operator's own (``kube.py``) and kopf's watches. Exec and
auth-provider plugins are not supported; a kubeconfig that needs one is refused with its name.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0
"""The kubelet rotates a projected token well before it expires: a minute is soon enough."""


class CredentialsError(Exception):
    """No usable credentials: the message says what is missing."""


@dataclass(frozen=True)
class Credentials:
    """An API server and how to authenticate to it."""

    server: str
    ca_file: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    cert_file: str | None = None
    cert_data: bytes | None = None
    key_file: str | None = None
    key_data: bytes | None = None
    token: str | None = None
    token_file: str | None = None

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(
            cafile=self.ca_file, cadata=self.ca_data.decode() if self.ca_data else None
        )
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file or self.cert_data:
            with (
                _as_file(self.cert_file, self.cert_data) as cert,
                _as_file(self.key_file, self.key_data) as key,
            ):
                context.load_cert_chain(cert, key)
        return context


@contextmanager
def _as_file(path: str | None, data: bytes | None) -> Iterator[str]:
    """A path for PEM ``data`` (a private temporary file, removed at once), or ``path`` itself."""
    if data is None:
        if path is None:
            raise CredentialsError(
                "kubeconfig: a client certificate without its key, or the reverse"
            )
        yield path
        return
    fd, temp = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        yield temp
    finally:
        os.unlink(temp)


class TokenSource:
    """The bearer token, re-read from its file now and then (projected tokens rotate)."""

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials
        self._token = credentials.token
        self._read_at = 0.0

    def token(self) -> str | None:
        path = self._credentials.token_file
        if path and time.monotonic() - self._read_at > TOKEN_REREAD_SECONDS:
            self._token = Path(path).read_text().strip() or None
            self._read_at = time.monotonic()
        return self._token


def load(environ: dict[str, str] | None = None) -> Credentials:
    """In-cluster credentials when running in a pod, else the kubeconfig (``$KUBECONFIG``)."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    token_file = SERVICE_ACCOUNT_DIR / "token"
    if host and port and token_file.exists():
        server_host = f"[{host}]" if ":" in host else host
        return Credentials(
            server=f"https://{server_host}:{port}",
            ca_file=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
            token_file=str(token_file),
        )
    paths = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if not paths:
        paths = [str(Path.home() / ".kube" / "config")]
    return from_kubeconfig(paths)


PATH_FIELDS = ("certificate-authority", "client-certificate", "client-key", "tokenFile")
"""Relative paths in a kubeconfig are relative to the file that holds them."""


def _named(
    config: dict[str, Any], section: str, into: dict[str, dict[str, Any]], base: Path
) -> None:
    singular = section[:-1]
    for item in config.get(section) or []:
        entry = dict(item.get(singular) or {})
        for key in PATH_FIELDS:
            if entry.get(key):
                entry[key] = str(base / Path(entry[key]).expanduser())
        into.setdefault(item["name"], entry)


def from_kubeconfig(paths: list[str]) -> Credentials:
    """The current context of the merged kubeconfig files (the first value of each name wins)."""
    current: str | None = None
    contexts: dict[str, dict[str, Any]] = {}
    clusters: dict[str, dict[str, Any]] = {}
    users: dict[str, dict[str, Any]] = {}
    found = False
    for path in paths:
        try:
            config = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            continue
        except (OSError, yaml.YAMLError) as err:
            raise CredentialsError(
                f"kubeconfig {path}: cannot be read: {type(err).__name__}"
            ) from None
        found = True
        current = current or config.get("current-context")
        base = Path(path).parent
        _named(config, "contexts", contexts, base)
        _named(config, "clusters", clusters, base)
        _named(config, "users", users, base)
    if not found:
        raise CredentialsError(
            f"no credentials: not in a pod and no kubeconfig at {os.pathsep.join(paths)}"
        )
    if not current or current not in contexts:
        raise CredentialsError("kubeconfig: no current context")
    context = contexts[current]
    cluster = clusters.get(context.get("cluster", ""))
    user = users.get(context.get("user", ""), {})
    if cluster is None or not cluster.get("server"):
        raise CredentialsError(f"kubeconfig: context {current!r} names no cluster with a server")
    for plugin in ("exec", "auth-provider"):
        if plugin in user:
            raise CredentialsError(
                f"kubeconfig: user {context.get('user')!r} needs an {plugin} plugin, which the "
                "operator does not run; use a token or a client certificate"
            )
    return Credentials(
        server=str(cluster["server"]).rstrip("/"),
        ca_file=cluster.get("certificate-authority"),
        ca_data=_decoded(cluster.get("certificate-authority-data")),
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        cert_file=user.get("client-certificate"),
        cert_data=_decoded(user.get("client-certificate-data")),
        key_file=user.get("client-key"),
        key_data=_decoded(user.get("client-key-data")),
        token=user.get("token"),
        token_file=user.get("tokenFile"),
    )


def _decoded(data: str | None) -> bytes | None:
    return base64.b64decode(data) if data else None
