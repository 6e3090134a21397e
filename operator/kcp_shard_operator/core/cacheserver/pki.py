"""What the operator issues for a CacheServer (pure): its own CA, the serving certificate of its
Service and the kubeconfig the shards that name it (``spec.cache.serverRef``) mount as
``--cache-kubeconfig``.

The cache server has a CA of its own rather than an installation's: several installations
may share one cache server. The CA is also the cache server's ``--client-ca-file`` on the kcp
versions that take it (the flag table); the kubeconfig's client certificate is in group
``system:masters``, the only group kcp's cache server authorizes. Older cache servers
authenticate no client: the certificate is issued all the same, and the same kubeconfig serves
the shards across an upgrade.
"""

from __future__ import annotations

from kcp_shard_operator.constants import CACHE_SERVER_API_VERSION, CACHE_SERVER_KIND
from kcp_shard_operator.core.cacheserver.names import (
    ca_secret,
    child_name,
    service_url,
    serving_secret,
)
from kcp_shard_operator.core.cacheserver.render import NAME
from kcp_shard_operator.core.cacheserver.spec import CacheServer
from kcp_shard_operator.core.pki.issuance import (
    ADMIN_GROUP,
    CA_LIFETIME_SECONDS,
    Owner,
    Purpose,
    Request,
    cache_kubeconfig_secret,
    client_request,
    serving_request,
)

CACHE_CONTEXT = "cache"
CACHE_CLIENT_USER = "kcp-cache-client"


def owner(cache: CacheServer) -> Owner:
    return Owner(
        CACHE_SERVER_API_VERSION,
        CACHE_SERVER_KIND,
        cache.name,
        cache.namespace,
        cache.uid,
        NAME,
    )


def requests(cache: CacheServer) -> list[Request]:
    """What the pass over ``cache`` issues, CA first; nothing with ``spec.pki.issue`` false.

    A user's serving certificate (``spec.servingCertSecretRef``) leaves the CA and the
    kubeconfig unissued too: the operator's CA would not be the one that signed it.
    """
    spec = cache.spec
    if not spec.issues_ca:
        return []
    made_by = owner(cache)
    return [
        Request(
            ca_secret(cache),
            Purpose.CA,
            made_by,
            f"{child_name(cache)} cache server CA",
            lifetime_seconds=CA_LIFETIME_SECONDS,
        ),
        serving_request(serving_secret(cache), made_by, spec.as_pki, child_name(cache)),
        client_request(
            cache_kubeconfig_secret(cache.name),
            made_by,
            spec.as_pki,
            (CACHE_CLIENT_USER, ADMIN_GROUP),
            server=service_url(cache),
            context=CACHE_CONTEXT,
        ),
    ]


def issues_kubeconfig(cache: CacheServer) -> bool:
    return bool(requests(cache))
