"""What the operator issues for a Shard (pure): the Secrets, what each must hold, and whether
one that exists still fits.

An installation is a root Shard and the Shards that name it. One CA per installation
(``<root>-kcp-ca``, or the root's ``spec.pki.caSecretRef``) signs everything; its certificate
alone is the client CA bundle the shards trust (``<root>-kcp-client-ca``), so a CA key is never
mounted into a kcp pod. Per Shard: a serving certificate for its Service and the hosts of its
URLs, and an admin kubeconfig (``system:masters``: the identity-cache cleanup and the
logical-cluster-admin access kcp needs between shards both require it). Per installation: the
cache kubeconfig of the root's embedded cache server, and the root's admin kubeconfig is what
older kcp non-root shards mount as ``--root-shard-kubeconfig-file``.

The forms of a request and of the Secrets it gives are in :mod:`issuance`.
"""

from __future__ import annotations

from dataclasses import replace

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.api.refs import CASecretKeyRef, LocalObjectRef, SecretKeyRef
from kcp_shard_operator.core.frontproxy.names import external_url, service_url
from kcp_shard_operator.core.frontproxy.spec import FrontProxy
from kcp_shard_operator.core.kcp.podtemplate import secret_names
from kcp_shard_operator.core.kcp.versions import (
    ROOT_SHARD_KUBECONFIG_FLAG,
    Role,
    Version,
    flag_applies,
)
from kcp_shard_operator.core.pki.issuance import (
    ADMIN_GROUP,
    SHARD_BASE_CONTEXT,
    Names,
    Purpose,
    Request,
    client_request,
    serving_request,
)
from kcp_shard_operator.core.shard.names import (
    admin_kubeconfig_secret,
    base_url,
    child_name,
    issues_client_certificates,
    owner_of,
    requestheader_requests,
)
from kcp_shard_operator.core.shard.spec import Shard, ShardSpec
from kcp_shard_operator.core.virtualworkspaces.names import (
    service_url as virtual_workspaces_url,
)
from kcp_shard_operator.core.virtualworkspaces.names import shard_client_secret
from kcp_shard_operator.core.virtualworkspaces.spec import VirtualWorkspaceServer

ADMIN_USER = "kcp-shard-operator"
LOGICAL_CLUSTER_ADMIN_USER = "logical-cluster-admin"
LOGICAL_CLUSTER_ADMIN_GROUP = "system:kcp:logical-cluster-admin"
"""kcp's group for creating LogicalClusters on other shards (its bootstrap policy)."""
SHARD_CLIENT_USER = "kcp-shard"
"""The shard's client certificate (``system:masters``): what it proxies its own ``/services/``
requests to its virtual-workspace server with, impersonating the user (the server lets that
group impersonate)."""
EXTERNAL_LOGICAL_CLUSTER_ADMIN = (
    "external-logical-cluster-admin",
    "system:kcp:external-logical-cluster-admin",
)
"""kcp's identity for reading and deleting LogicalClusters through the front-proxy, which
passes this group on to the shards (it drops ``system:masters`` and the internal one)."""


def takes_service_account_key(shard: Shard, root: Shard | None, deployment: JSON | None) -> bool:
    """Whether ``shard`` may get the installation's service-account key: a new shard (no
    Deployment, never rolled out), or one that mounts it already. Never one that runs
    without it: kcp then signs with a key of its own in its root directory, and a new key
    would invalidate every token it has signed."""
    if deployment is None:
        return not (shard.status or {}).get("version")
    found = installation_root(shard, root)
    if found is None:
        return False
    pod_spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    return Names(found.name).service_account_key in secret_names(pod_spec)


def serving_secret(shard: Shard) -> str:
    return f"{shard.name}-kcp-serving"


def logical_cluster_admin_secret(shard: Shard) -> str:
    return f"{shard.name}-kcp-logical-cluster-admin-kubeconfig"


def ca_secret(root: Shard) -> str:
    """The Secret of the CA that signs for ``root``'s installation."""
    ref = root.spec.pki.ca_secret_ref
    return ref.name if ref else Names(root.name).ca


def _serving(shard: Shard) -> Request:
    return serving_request(
        serving_secret(shard),
        owner_of(shard),
        shard.spec.pki,
        child_name(shard),
        (shard.spec.base_url, shard.spec.external_url),
    )


def _kubeconfig(
    secret: str,
    owner: Shard,
    server: str,
    context: str,
    user: tuple[str, str] = (ADMIN_USER, ADMIN_GROUP),
) -> Request:
    """A kubeconfig of ``user`` (name, group) for ``server``."""
    return client_request(
        secret, owner_of(owner), owner.spec.pki, user, server=server, context=context
    )


def _admin(shard: Shard) -> Request:
    return _kubeconfig(admin_kubeconfig_secret(shard), shard, base_url(shard), SHARD_BASE_CONTEXT)


def _logical_cluster_admin(shard: Shard) -> Request:
    """What the shard creates LogicalClusters with on the other shards: kcp's own group for
    it, which its bootstrap policy lets do that and nothing more (not ``system:masters``)."""
    return _kubeconfig(
        logical_cluster_admin_secret(shard),
        shard,
        base_url(shard),
        LOGICAL_CLUSTER_ADMIN_GROUP,
        (LOGICAL_CLUSTER_ADMIN_USER, LOGICAL_CLUSTER_ADMIN_GROUP),
    )


def needs_root_kubeconfig(shard: Shard, deprecating_release: Version) -> bool:
    return not shard.spec.is_root and flag_applies(
        ROOT_SHARD_KUBECONFIG_FLAG, shard.spec.kcp_version, Role.NON_ROOT, deprecating_release
    )


def installation_root(shard: Shard, root: Shard | None) -> Shard | None:
    """The root Shard of ``shard``'s installation: itself, or its ``root`` (None: missing)."""
    return shard if shard.spec.is_root else root


def _issuing_root(shard: Shard, root: Shard | None) -> Shard | None:
    """The root of ``shard``'s installation when the operator issues for ``shard``."""
    found = installation_root(shard, root)
    if found is None or not (shard.spec.pki.issue and found.spec.pki.issue):
        return None
    return found


def not_issued(shard: Shard, root: Shard | None, deprecating_release: Version) -> list[str]:
    """Why a non-root ``shard`` (as :func:`with_issued` filled it) still lacks a kubeconfig it
    must have, which the operator cannot issue for it: one line per reference."""
    spec = shard.spec
    if spec.is_root or root is None:
        return []
    why = (
        f"the root Shard {root.name} sets spec.pki.issue false"
        if not root.spec.pki.issue
        else f"the root Shard {root.name} serves the user's certificate or trusts the user's CA"
    )
    missing = []
    if spec.cache.kubeconfig_ref is None:
        missing.append("spec.cache.kubeconfigSecretRef")
    if spec.root_shard_kubeconfig_secret_ref is None and needs_root_kubeconfig(
        shard, deprecating_release
    ):
        missing.append("spec.rootShardKubeconfigSecretRef")
    return [f"{ref} is unset and cannot be issued ({why}): set it" for ref in missing]


def requests(
    shard: Shard,
    root: Shard | None,
    deprecating_release: Version,
    *,
    service_account_key: bool = False,
    proxy: FrontProxy | None = None,
    virtual_workspaces: VirtualWorkspaceServer | None = None,
) -> list[Request]:
    """What the pass over ``shard`` issues with the installation's CA, CA first; nothing
    without ``spec.pki.issue`` or, for a non-root shard, without its root Shard (``root``).
    The installation's service-account key only with ``service_account_key``
    (:func:`takes_service_account_key`); with the installation's FrontProxy ``proxy``, the
    kubeconfig kcp reaches LogicalClusters through it with (the requestheader CA is
    :func:`requestheader_requests`); with the VirtualWorkspaceServer ``virtual_workspaces``
    serving it, the client certificate the shard reaches it with.

    A kubeconfig is issued only for a shard that a client certificate of the operator's CA
    reaches (:func:`issues_client_certificates`): one signed for a shard that trusts the
    user's CA, or served with the user's certificate, would not work.
    """
    issuing = _issuing_root(shard, root)
    if issuing is None:
        return []
    names = Names(issuing.name)
    spec = shard.spec
    found: list[Request] = []
    if issuing.spec.pki.ca_secret_ref is None:
        found.append(Request(names.ca, Purpose.CA, owner_of(issuing), f"{names.root} kcp CA"))
    if spec.tls.client_ca_secret_ref is None:
        found.append(
            Request(names.client_ca, Purpose.CLIENT_CA, owner_of(issuing), "client CA bundle")
        )
    if spec.tls.serving_cert_secret_ref is None:
        found.append(_serving(shard))
    if service_account_key and spec.tls.service_account_key_secret_ref is None:
        found.append(
            Request(
                names.service_account_key,
                Purpose.SERVICE_ACCOUNT_KEY,
                owner_of(issuing),
                "service-account signing key",
            )
        )
    if issues_client_certificates(shard):
        if spec.admin_kubeconfig_secret_ref is None:
            found.append(_admin(shard))
        if spec.logical_cluster_admin_kubeconfig_secret_ref is None:
            found.append(_logical_cluster_admin(shard))
        if virtual_workspaces is not None and spec.tls.shard_client_cert_secret_ref is None:
            found.append(
                client_request(
                    shard_client_secret(shard.name),
                    owner_of(shard),
                    spec.pki,
                    (f"{SHARD_CLIENT_USER}:{shard.name}", ADMIN_GROUP),
                )
            )
    if not spec.is_root and issues_client_certificates(issuing):
        if spec.cache.kubeconfig_ref is None:
            found.append(
                _kubeconfig(
                    names.cache_kubeconfig,
                    issuing,
                    base_url(issuing),
                    "cache",
                )
            )
        if (
            spec.root_shard_kubeconfig_secret_ref is None
            and issuing.spec.admin_kubeconfig_secret_ref is None
            and needs_root_kubeconfig(shard, deprecating_release)
        ):
            found.append(_admin(issuing))
    if (
        proxy is not None
        and takes_issued_clients(proxy)
        and spec.external_logical_cluster_admin_kubeconfig_secret_ref is None
    ):
        found.append(
            _kubeconfig(
                names.external_logical_cluster_admin,
                issuing,
                service_url(proxy),
                SHARD_BASE_CONTEXT,
                EXTERNAL_LOGICAL_CLUSTER_ADMIN,
            )
        )
    return found


def takes_issued_clients(proxy: FrontProxy) -> bool:
    """Whether a client certificate of the installation's CA reaches ``proxy``: it serves the
    issued certificate and trusts the installation's client CA."""
    tls = proxy.spec.tls
    return (
        proxy.spec.pki.issue
        and tls.serving_cert_secret_ref is None
        and tls.client_ca_secret_ref is None
    )


def trust_requests(shard: Shard, root: Shard | None, proxy: FrontProxy | None) -> list[Request]:
    """What the pass over ``shard`` issues with the installation's requestheader CA: the CA
    and its bundle, for a shard behind the FrontProxy ``proxy`` that names no requestheader
    CA of its own."""
    issuing = _issuing_root(shard, root)
    if proxy is None or issuing is None or shard.spec.tls.request_header_client_ca_secret_ref:
        return []
    return requestheader_requests(issuing)


def with_issued(
    shard: Shard,
    root: Shard | None,
    *,
    service_account_key: bool = False,
    proxy: FrontProxy | None = None,
    virtual_workspaces: VirtualWorkspaceServer | None = None,
) -> Shard:
    """``shard`` with every reference it leaves unset pointing at the Secret issued for it,
    and ``externalURL`` defaulting to its base URL where the issued logical-cluster-admin
    kubeconfig needs one (kcp requires it with that flag); the service-account key only with
    ``service_account_key``. Behind the installation's FrontProxy ``proxy``, the shard
    trusts its forwarded requests, advertises its URL and reaches LogicalClusters through
    it (:func:`behind`). With the VirtualWorkspaceServer ``virtual_workspaces`` serving it,
    the shard runs no virtual workspaces itself and advertises the server's URL
    (:func:`served_by`)."""
    issuing = _issuing_root(shard, root)
    if issuing is None:
        return shard
    names = Names(issuing.name)
    spec = shard.spec
    tls = replace(
        spec.tls,
        serving_cert_secret_ref=spec.tls.serving_cert_secret_ref
        or LocalObjectRef(serving_secret(shard)),
        client_ca_secret_ref=spec.tls.client_ca_secret_ref or LocalObjectRef(names.client_ca),
    )
    if service_account_key and tls.service_account_key_secret_ref is None:
        tls = replace(tls, service_account_key_secret_ref=LocalObjectRef(names.service_account_key))
    filled = replace(spec, tls=tls)
    if issues_client_certificates(shard):
        admin = SecretKeyRef(admin_kubeconfig_secret(shard))
        filled = replace(
            filled, admin_kubeconfig_secret_ref=spec.admin_kubeconfig_secret_ref or admin
        )
        if spec.logical_cluster_admin_kubeconfig_secret_ref is None:
            filled = replace(
                filled,
                logical_cluster_admin_kubeconfig_secret_ref=SecretKeyRef(
                    logical_cluster_admin_secret(shard)
                ),
                external_url=spec.external_url
                or (external_url(proxy) if proxy else base_url(shard)),
            )
    if not spec.is_root and issues_client_certificates(issuing):
        cache = spec.cache.kubeconfig_secret_ref
        if spec.cache.server_ref is None and cache is None:
            cache = SecretKeyRef(names.cache_kubeconfig)
        root_admin = issuing.spec.admin_kubeconfig_secret_ref or SecretKeyRef(
            admin_kubeconfig_secret(issuing)
        )
        filled = replace(
            filled,
            cache=replace(spec.cache, kubeconfig_secret_ref=cache),
            root_shard_kubeconfig_secret_ref=spec.root_shard_kubeconfig_secret_ref or root_admin,
        )
    if proxy is not None:
        filled = behind(filled, names, proxy)
    if virtual_workspaces is not None and issues_client_certificates(shard):
        filled = served_by(filled, shard.name, names, virtual_workspaces)
    return replace(shard, spec=filled)


def served_by(
    spec: ShardSpec, name: str, names: Names, virtual_workspaces: VirtualWorkspaceServer
) -> ShardSpec:
    """``spec`` of Shard ``name`` whose virtual workspaces ``virtual_workspaces`` runs: the
    shard advertises its URL, verifies it with the installation's CA bundle and proxies its
    own ``/services/`` requests there with its issued client certificate."""
    tls = replace(
        spec.tls,
        shard_client_cert_secret_ref=spec.tls.shard_client_cert_secret_ref
        or LocalObjectRef(shard_client_secret(name)),
        virtual_workspace_ca_secret_ref=spec.tls.virtual_workspace_ca_secret_ref
        or CASecretKeyRef(names.client_ca),
    )
    return replace(
        spec,
        tls=tls,
        virtual_workspace_url=spec.virtual_workspace_url
        or virtual_workspaces_url(virtual_workspaces),
    )


def behind(spec: ShardSpec, names: Names, proxy: FrontProxy) -> ShardSpec:
    """``spec`` of a shard served by ``proxy``: its requestheader CA trusts the front-proxy's
    forwarding certificate, its external URL (the URL of its workspaces) is the front-proxy's,
    and kcp reaches LogicalClusters on other shards through the front-proxy."""
    tls = replace(
        spec.tls,
        request_header_client_ca_secret_ref=spec.tls.request_header_client_ca_secret_ref
        or CASecretKeyRef(names.requestheader_client_ca),
    )
    external = spec.external_logical_cluster_admin_kubeconfig_secret_ref
    if external is None and takes_issued_clients(proxy):
        external = SecretKeyRef(names.external_logical_cluster_admin)
    return replace(
        spec,
        tls=tls,
        external_url=spec.external_url or external_url(proxy),
        external_logical_cluster_admin_kubeconfig_secret_ref=external,
    )
