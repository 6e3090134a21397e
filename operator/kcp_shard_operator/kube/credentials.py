"""The operator's Kubernetes credentials: the pod's ServiceAccount, else ``$KUBECONFIG``.

One loader for both API clients: the operator's own (:mod:`kcp_shard_operator.kube.client`)
and kopf's watches. The kubeconfig files are read here and parsed by
:mod:`kcp_shard_operator.kube.kubeconfig`, the reader the identity-cache cleanup uses too.
"""

from __future__ import annotations

import os
import time
from pathlib import Path, PurePosixPath

import yaml

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.kube.kubeconfig import (
    Endpoint,
    KubeconfigError,
    bearer_token,
    endpoint_from_kubeconfig,
    merge,
)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0
"""The kubelet rotates a projected token well before it expires: a minute is soon enough."""
SOURCES = "in a pod its ServiceAccount, else the current context of $KUBECONFIG or ~/.kube/config"
"""Where :func:`load` finds the credentials, for the commands' help."""


class CredentialsError(Exception):
    """No usable credentials: the message says what is missing."""


class TokenSource:
    """The bearer token, re-read from its file now and then (projected tokens rotate)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self._token = endpoint.token
        self._read_at = 0.0

    def token(self) -> str | None:
        path = self._endpoint.token_file
        if path and time.monotonic() - self._read_at > TOKEN_REREAD_SECONDS:
            try:
                token = bearer_token(Path(path).read_text().strip(), f"token file {path}")
            except KubeconfigError as err:
                raise CredentialsError(str(err)) from None
            self._token = token or None
            self._read_at = time.monotonic()
        return self._token


def load(environ: dict[str, str] | None = None) -> Endpoint:
    """In-cluster credentials when running in a pod, else the kubeconfig (``$KUBECONFIG``)."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    token_file = SERVICE_ACCOUNT_DIR / "token"
    if host and port and token_file.exists():
        server_host = f"[{host}]" if ":" in host else host
        return Endpoint(
            server=f"https://{server_host}:{port}",
            ca_file=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
            token_file=str(token_file),
        )
    paths = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if not paths:
        paths = [str(Path.home() / ".kube" / "config")]
    return from_kubeconfig(paths)


def _read(path: str) -> JSON | None:
    try:
        config = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError:
        return None
    except (OSError, yaml.YAMLError) as err:
        raise CredentialsError(f"kubeconfig {path}: cannot be read: {type(err).__name__}") from None
    if not isinstance(config, dict):
        raise CredentialsError(f"kubeconfig {path}: not a kubeconfig mapping")
    return config


def from_kubeconfig(paths: list[str]) -> Endpoint:
    """The current context of the merged kubeconfig files (the first value of each name wins)."""
    files = [
        (config, PurePosixPath(os.path.abspath(path)).parent)
        for path in paths
        if (config := _read(path)) is not None
    ]
    if not files:
        raise CredentialsError(
            f"no credentials: not in a pod and no kubeconfig at {os.pathsep.join(paths)}"
        )
    try:
        return endpoint_from_kubeconfig(merge(files))
    except KubeconfigError as err:
        raise CredentialsError(f"kubeconfig: {err}") from None
