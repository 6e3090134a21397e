"""Which shard to reach, as whom: a shard's admin kubeconfig -> an :class:`Endpoint` (no I/O).

The kubeconfig is read by :mod:`kcp_shard_operator.kube.kubeconfig`, the reader the operator's
own credentials use; what is particular to a kcp shard is here: the ``shard-base`` context is
preferred, and the server is reduced to the shard's base URL (no ``/clusters/...`` suffix).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePosixPath
from urllib.parse import urlsplit, urlunsplit

import yaml

from kcp_shard_operator.core.pki.issuance import SHARD_BASE_CONTEXT
from kcp_shard_operator.kube.kubeconfig import (
    Endpoint,
    KubeconfigError,
    endpoint_from_kubeconfig,
    server_url,
)


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


def shard_endpoint(
    kubeconfig: object, context: str | None = None, base_dir: PurePosixPath | None = None
) -> Endpoint:
    """The shard's base URL and credentials: ``context``, else ``shard-base``, else the current.

    exec and auth-provider users are refused: the cleanup needs static shard credentials.
    """
    endpoint = endpoint_from_kubeconfig(kubeconfig, context, base_dir, preferred=SHARD_BASE_CONTEXT)
    return replace(endpoint, server=base_url(endpoint.server))


def load_target(
    kubeconfig: bytes, context: str | None = None, base_dir: PurePosixPath | None = None
) -> Endpoint:
    """Parse kubeconfig bytes (YAML or JSON) into the shard's :class:`Endpoint`."""
    try:
        parsed = yaml.safe_load(kubeconfig)
    except yaml.YAMLError as err:
        # The parser's message quotes the offending text, which may be a token: position only.
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise KubeconfigError(f"not valid YAML{where}") from None
    return shard_endpoint(parsed, context, base_dir)
