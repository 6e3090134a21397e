"""What other kinds know a Shard by: its children's name, its URLs and the trust its
installation's root extends (pure). Another kind imports this module and spec, nothing else."""

from __future__ import annotations

from kcp_shard_operator.constants import SHARD_API_VERSION, SHARD_KIND
from kcp_shard_operator.core.kcp.podtemplate import PORT
from kcp_shard_operator.core.pki.issuance import (
    Names,
    Owner,
    Purpose,
    Request,
)
from kcp_shard_operator.core.shard.spec import CHILD_SUFFIX, Shard


def child_name(shard: Shard) -> str:
    return f"{shard.name}{CHILD_SUFFIX}"


def admin_kubeconfig_secret(shard: Shard) -> str:
    """The issued kubeconfig the operator reaches ``shard`` with (``system:masters``)."""
    return f"{shard.name}-kcp-admin-kubeconfig"


def admin_kubeconfig(shard: Shard) -> str:
    """The Secret of the kubeconfig the operator reaches ``shard`` with: the one
    ``spec.adminKubeconfigSecretRef`` names, else the issued one."""
    ref = shard.spec.admin_kubeconfig_secret_ref
    return ref.name if ref else admin_kubeconfig_secret(shard)


def audit_policy_name(shard: Shard) -> str:
    """The ConfigMap of the operator's default audit policy for ``shard``."""
    return f"{child_name(shard)}-audit-policy"


def service_url(shard: Shard) -> str:
    return f"https://{child_name(shard)}.{shard.namespace}.svc:{PORT}"


def base_url(shard: Shard) -> str:
    """Where the operator and the other shards reach ``shard`` (``--shard-base-url``): its
    ``baseURL``, else its Service."""
    return shard.spec.base_url or service_url(shard)


def owner_of(shard: Shard) -> Owner:
    """``shard`` as the owner of the Secrets issued for it."""
    return Owner(SHARD_API_VERSION, SHARD_KIND, shard.name, shard.namespace, shard.uid)


def issues_client_certificates(shard: Shard) -> bool:
    """Whether a client certificate the operator signs reaches ``shard``: it serves the
    operator's serving certificate and trusts the operator's CA (neither is the user's)."""
    tls = shard.spec.tls
    return (
        shard.spec.pki.issue
        and tls.serving_cert_secret_ref is None
        and tls.client_ca_secret_ref is None
    )


def requestheader_requests(root: Shard) -> list[Request]:
    """The installation's requestheader CA and its bundle, which the shards trust for the
    headers their front-proxy forwards (a CA of its own: no other certificate of the
    installation may name a user in those headers)."""
    names = Names(root.name)
    return [
        Request(
            names.requestheader_ca, Purpose.CA, owner_of(root), f"{root.name} requestheader CA"
        ),
        Request(
            names.requestheader_client_ca,
            Purpose.CLIENT_CA,
            owner_of(root),
            "requestheader client CA bundle",
        ),
    ]
