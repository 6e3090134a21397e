"""Kubeconfig files -> one API endpoint and its credentials (no I/O: callers read the files).

One reader for both clients: the operator's own API calls and kopf's watches
(:mod:`kcp_shard_operator.kube.credentials`), and the identity-cache cleanup's calls to a kcp
shard (:mod:`kcp_shard_operator.identitycache.client`). Exec and auth-provider plugins are not
supported: both need static credentials. Messages never quote secrets or the server URL, which
may carry a password.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kcp_shard_operator.core.api.model import JSON

PATH_FIELDS = ("certificate-authority", "client-certificate", "client-key", "tokenFile")
"""Fields holding file paths; a relative one is relative to the kubeconfig file that holds it."""
SECTIONS = ("contexts", "clusters", "users")


class KubeconfigError(ValueError):
    """A kubeconfig that does not name a usable server and credentials."""


@dataclass(frozen=True)
class Endpoint:
    """An API server and how to authenticate to it. Secret material stays in memory only."""

    server: str
    context: str = ""
    ca_pem: bytes | None = None
    ca_file: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    token: str | None = None
    token_file: str | None = None

    def __repr__(self) -> str:
        return f"Endpoint(server={self.server!r}, context={self.context!r})"


def bearer_token(token: object, what: str) -> str:
    """``token`` if it can stand in an ``Authorization: Bearer`` header, else a
    :class:`KubeconfigError` that says why (without quoting it).

    A line break would end the header (and could start another one); control and non-ASCII
    characters are refused by HTTP clients with an error that quotes the whole header.
    """
    value = str(token)
    if "\n" in value or "\r" in value:
        problem = "a line break"
    elif not all(char == "\t" or " " <= char <= "~" for char in value):
        problem = "a control or non-ASCII character"
    else:
        return value
    raise KubeconfigError(f"{what} cannot form an HTTP header: it holds {problem}")


def server_url(server: str) -> str:
    """``server`` without user info, query or trailing slash; refused unless http(s)."""
    parts = urlsplit(server.strip())
    # The URL itself is not echoed: it may carry a password (user:password@host).
    netloc = parts.netloc.rpartition("@")[2]
    if parts.scheme not in ("https", "http") or not netloc:
        raise KubeconfigError("the cluster's server is not an http(s) URL")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def pick_context(kubeconfig: JSON, requested: str | None, preferred: str | None = None) -> str:
    """``requested`` if given, else ``preferred`` when present, else the current context."""
    names = [str(c.get("name")) for c in kubeconfig.get("contexts") or []]
    if requested:
        if requested not in names:
            raise KubeconfigError(f"context {requested!r} not found (have: {', '.join(names)})")
        return requested
    if preferred and preferred in names:
        return preferred
    current = kubeconfig.get("current-context")
    if not current:
        given = f"no {preferred!r} context and " if preferred else ""
        raise KubeconfigError(f"no context given, {given}no current-context")
    if current not in names:
        raise KubeconfigError(f"current-context {current!r} not found")
    return str(current)


def _named(kubeconfig: JSON, section: str, name: str) -> dict[str, Any]:
    singular = section[:-1]
    for item in kubeconfig.get(section) or []:
        if item.get("name") == name:
            value = item.get(singular) or {}
            if not isinstance(value, dict):
                raise KubeconfigError(f"{singular} {name!r} is not a mapping")
            return value
    raise KubeconfigError(f"{singular} {name!r} not found")


def _decode(value: object, what: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as err:
        raise KubeconfigError(f"{what} is not valid base64") from err


def resolve_path(value: object, base_dir: PurePosixPath | None) -> str:
    """A kubeconfig path made absolute: ``~`` expanded, else relative to ``base_dir``."""
    path = PurePosixPath(os.path.expanduser(str(value)))
    if not path.is_absolute():
        if base_dir is None:
            raise KubeconfigError(f"relative path {str(path)!r} in a kubeconfig without a file")
        path = base_dir / path
    return str(path)


def merge(files: Iterable[tuple[JSON, PurePosixPath]]) -> JSON:
    """Kubeconfigs merged as ``$KUBECONFIG`` lists them: the first value of each name and the
    first current-context win; relative paths resolve against each file's own folder."""
    current: str | None = None
    named: dict[str, dict[str, JSON]] = {section: {} for section in SECTIONS}
    for config, folder in files:
        current = current or config.get("current-context") or None
        for section, by_name in named.items():
            for item in config.get(section) or []:
                name = str(item.get("name"))
                if name in by_name:
                    continue
                entry = dict(item.get(section[:-1]) or {})
                for key in PATH_FIELDS:
                    if entry.get(key):
                        entry[key] = resolve_path(entry[key], folder)
                by_name[name] = entry
    return {
        "current-context": current,
        **{
            section: [{"name": name, section[:-1]: entry} for name, entry in by_name.items()]
            for section, by_name in named.items()
        },
    }


def endpoint_from_kubeconfig(
    kubeconfig: object,
    context: str | None = None,
    base_dir: PurePosixPath | None = None,
    *,
    preferred: str | None = None,
) -> Endpoint:
    """The server and credentials of the picked context (see :func:`pick_context`).

    Relative file paths resolve against ``base_dir`` (the kubeconfig's folder).
    """
    if not isinstance(kubeconfig, dict):
        raise KubeconfigError("not a kubeconfig mapping")
    name = pick_context(kubeconfig, context, preferred)
    ctx = _named(kubeconfig, "contexts", name)
    cluster = _named(kubeconfig, "clusters", str(ctx.get("cluster", "")))
    user = _named(kubeconfig, "users", str(ctx.get("user", ""))) if ctx.get("user") else {}
    for plugin in ("exec", "auth-provider"):
        if plugin in user:
            raise KubeconfigError(
                f"context {name!r}: the user needs an {plugin} plugin, which is not run; "
                "use a token or a client certificate"
            )
    if not cluster.get("server"):
        raise KubeconfigError(f"context {name!r}: the cluster has no server")

    def data(key: str) -> bytes | None:
        source = user if key.startswith("client") else cluster
        value = source.get(f"{key}-data")
        return _decode(value, f"{key}-data") if value else None

    def file(key: str, source: dict[str, Any]) -> str | None:
        value = source.get(key)
        return resolve_path(value, base_dir) if value else None

    token = user.get("token")
    endpoint = Endpoint(
        server=server_url(str(cluster["server"])),
        context=name,
        ca_pem=data("certificate-authority"),
        ca_file=file("certificate-authority", cluster),
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        tls_server_name=cluster.get("tls-server-name") or None,
        client_cert_pem=data("client-certificate"),
        client_key_pem=data("client-key"),
        client_cert_file=file("client-certificate", user),
        client_key_file=file("client-key", user),
        token=bearer_token(token, f"context {name!r}: the user's token") if token else None,
        token_file=file("tokenFile", user),
    )
    has_cert = bool(endpoint.client_cert_pem or endpoint.client_cert_file)
    has_key = bool(endpoint.client_key_pem or endpoint.client_key_file)
    if has_cert != has_key:
        raise KubeconfigError(f"context {name!r}: a client certificate needs its key")
    return endpoint
