"""What other kinds know a CacheServer by: its children's and Secrets' names and its URL
(pure). Another kind imports this module and spec, nothing else."""

from __future__ import annotations

from kcp_shard_operator.core.cacheserver.spec import CHILD_SUFFIX, CacheServer
from kcp_shard_operator.core.kcp.podtemplate import PORT


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
