"""What the operator issues for a FrontProxy (pure).

Signed by the installation's CA (the root Shard's): the serving certificate, which the
shards' issued kubeconfigs and the users' kubeconfigs verify with the installation's CA; the
kubeconfig the front-proxy watches and reaches every shard with (``system:masters``, server
the root shard); and an admin kubeconfig for users (``system:kcp:admin``, which the
front-proxy passes on to the shards and kcp's bootstrap policy makes cluster-admin in every
workspace). Signed by the installation's requestheader CA (:func:`pki.requestheader_requests`):
the client certificate it forwards requests with.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kcp_shard_operator.constants import FRONT_PROXY_API_VERSION, FRONT_PROXY_KIND
from kcp_shard_operator.core.frontproxy.names import (
    admin_kubeconfig_secret,
    child_name,
    external_url,
    kubeconfig_secret,
    requestheader_secret,
    serving_secret,
)
from kcp_shard_operator.core.frontproxy.render import NAME
from kcp_shard_operator.core.frontproxy.spec import FrontProxy
from kcp_shard_operator.core.pki.issuance import (
    ADMIN_GROUP,
    SHARD_BASE_CONTEXT,
    Owner,
    Request,
    client_request,
    serving_request,
)
from kcp_shard_operator.core.shard.names import (
    base_url,
    issues_client_certificates,
    requestheader_requests,
)
from kcp_shard_operator.core.shard.spec import Shard

FRONT_PROXY_USER = "kcp-front-proxy"
KCP_ADMIN = ("kcp-admin", "system:kcp:admin")
"""The users' admin: kcp's global admin group, cluster-admin in every workspace."""
ADMIN_CONTEXT = "base"


def owner(proxy: FrontProxy) -> Owner:
    return Owner(
        FRONT_PROXY_API_VERSION,
        FRONT_PROXY_KIND,
        proxy.name,
        proxy.namespace,
        proxy.uid,
        NAME,
    )


@dataclass(frozen=True)
class ProxyRequests:
    """What the pass over a FrontProxy issues, by the CA that signs it."""

    by_installation_ca: list[Request] = field(default_factory=list)
    by_requestheader_ca: list[Request] = field(default_factory=list)
    not_issued: list[str] = field(default_factory=list)
    """The references that are unset and cannot be issued, and why."""


def requests(proxy: FrontProxy, root: Shard) -> ProxyRequests:
    """What ``proxy`` leaves unset, issued once its root Shard's installation has a CA the
    operator signs with; nothing with ``spec.pki.issue`` false."""
    spec = proxy.spec
    if not spec.pki.issue:
        return ProxyRequests()
    if not issues_client_certificates(root):
        why = (
            f"the root Shard {root.name} sets spec.pki.issue false, or serves the user's "
            "certificate or trusts the user's CA: name the front-proxy's certificates in "
            "spec.tls and spec.kubeconfigSecretRef, and set spec.pki.issue false"
        )
        return ProxyRequests(not_issued=[why])
    made_by = owner(proxy)
    pki = spec.as_pki
    by_ca: list[Request] = []
    if spec.tls.serving_cert_secret_ref is None:
        by_ca.append(
            serving_request(
                serving_secret(proxy), made_by, pki, child_name(proxy), (spec.external_url,)
            )
        )
    if spec.kubeconfig_secret_ref is None:
        by_ca.append(
            client_request(
                kubeconfig_secret(proxy),
                made_by,
                pki,
                (FRONT_PROXY_USER, ADMIN_GROUP),
                server=base_url(root),
                context=SHARD_BASE_CONTEXT,
            )
        )
    by_ca.append(
        client_request(
            admin_kubeconfig_secret(proxy),
            made_by,
            pki,
            KCP_ADMIN,
            server=external_url(proxy),
            context=ADMIN_CONTEXT,
        )
    )
    by_requestheader: list[Request] = []
    if spec.tls.request_header_client_cert_secret_ref is None:
        by_requestheader = [
            *requestheader_requests(root),
            client_request(requestheader_secret(proxy), made_by, pki, (FRONT_PROXY_USER, None)),
        ]
    return ProxyRequests(by_ca, by_requestheader)
