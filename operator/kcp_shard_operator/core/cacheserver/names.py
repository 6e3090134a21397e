"""What other kinds know a CacheServer by: its children's and Secrets' names and its URL
(pure). Another kind imports this module and spec, nothing else."""

from __future__ import annotations

from kcp_shard_operator.constants import API_GROUP
from kcp_shard_operator.core.cacheserver.spec import CHILD_SUFFIX, CacheServer
from kcp_shard_operator.core.kcp.podtemplate import PORT

CLIENT_LABEL = f"{API_GROUP}/cache-server"
"""On the pods that may reach a CacheServer (its NetworkPolicy admits them): the value is the
CacheServer's name. The operator puts it on the pods of every Shard whose spec.cache.serverRef
names it, and on those of the Shard's VirtualWorkspaceServer."""


def client_labels(cache_server: str) -> dict[str, str]:
    """The labels of a pod the NetworkPolicy of CacheServer ``cache_server`` admits."""
    return {CLIENT_LABEL: cache_server}


def child_name(cache: CacheServer) -> str:
    return f"{cache.name}{CHILD_SUFFIX}"


def claim_name(cache: CacheServer) -> str:
    return f"{child_name(cache)}-data"


def serving_secret(cache: CacheServer) -> str:
    return (
        cache.spec.serving_cert_secret_ref.name
        if cache.spec.serving_cert_secret_ref
        else (f"{child_name(cache)}-serving")
    )


def service_url(cache: CacheServer) -> str:
    return f"https://{child_name(cache)}.{cache.namespace}.svc:{PORT}"


def ca_secret(cache: CacheServer) -> str:
    """The CA the operator issues for the cache server: it signs the serving certificate and
    the shards' client certificates, and is the cache server's client CA."""
    return f"{child_name(cache)}-ca"
