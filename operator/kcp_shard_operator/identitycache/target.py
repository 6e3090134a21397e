"""Which shard to reach, as whom: a shard's admin kubeconfig -> its base URL and credentials.

The kubeconfig is loaded by :mod:`kcp_shard_operator.kube.credentials` (the ``kubernetes``
library's loader, as for the operator's own credentials); what is particular to a kcp shard is
here: the ``shard-base`` context is preferred, and the server is reduced to the shard's base URL
(no ``/clusters/...`` suffix).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from kcp_shard_operator.core.pki.issuance import SHARD_BASE_CONTEXT
from kcp_shard_operator.kube.credentials import Credentials, from_kubeconfig
from kcp_shard_operator.kube.kubeconfig import CredentialsError


def server_url(server: str) -> str:
    """``server`` without user info, query or trailing slash; refused unless http(s)."""
    parts = urlsplit(server.strip())
    # The URL itself is not echoed: it may carry a password (user:password@host).
    netloc = parts.netloc.rpartition("@")[2]
    if parts.scheme not in ("https", "http") or not netloc:
        raise CredentialsError("the cluster's server is not an http(s) URL")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def base_url(server: str) -> str:
    """The shard's base URL: ``server`` without a ``/clusters/...`` suffix or trailing slash."""
    parts = urlsplit(server_url(server))
    path = parts.path
    marker = path.find("/clusters/")
    if marker >= 0:
        path = path[:marker]
    elif path.endswith("/clusters"):
        path = path[: -len("/clusters")]
    return urlunsplit((parts.scheme, parts.netloc, path.rstrip("/"), "", ""))


def load_target(
    kubeconfig: bytes,
    context: str | None = None,
    base_dir: Path | None = None,
    *,
    inline_only: bool = False,
) -> Credentials:
    """The credentials of a shard's kubeconfig (YAML or JSON): ``context``, else
    ``shard-base``, else the current context. ``inline_only`` for a kubeconfig from a Secret:
    no files, no exec or auth-provider plugin."""
    return from_kubeconfig(
        kubeconfig,
        context,
        preferred=SHARD_BASE_CONTEXT,
        base_dir=base_dir,
        inline_only=inline_only,
    )
