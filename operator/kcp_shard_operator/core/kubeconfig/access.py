"""What a Kubeconfig asks for (pure): the target it points at, the client certificate the
operator signs, the workspace it checks and the ClusterRoleBindings it makes there, and what
kcp's answers mean.

The certificate is signed by the installation's CA (the root Shard's): the front-proxy's
``--client-ca-file`` and every shard's are that CA's bundle, so kcp takes the certificate's
CN as the user and its O attributes as the groups; the front-proxy forwards both to the shard
that holds the workspace in ``X-Remote-User`` and ``X-Remote-Group`` (dropping
``system:masters`` unless its flags pass it on).
"""

from __future__ import annotations

from dataclasses import dataclass

from kcp_shard_operator.constants import (
    API_GROUP,
    FIELD_MANAGER,
    FRONT_PROXY_KIND,
    KUBECONFIG_API_VERSION,
    KUBECONFIG_KIND,
    SHARD_KIND,
)
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.frontproxy import names as proxynames
from kcp_shard_operator.core.frontproxy.spec import FrontProxy
from kcp_shard_operator.core.kubeconfig.names import (
    OWNER_LABEL,
    binding_name,
    parent_and_name,
    secret_name,
    workspace_url,
)
from kcp_shard_operator.core.kubeconfig.spec import Kubeconfig
from kcp_shard_operator.core.pki.issuance import Owner, Purpose, Request
from kcp_shard_operator.core.shard import names as shardnames
from kcp_shard_operator.core.shard.spec import Shard

RBAC = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
WORKSPACES = "/apis/tenancy.kcp.io/v1alpha1/workspaces"
APP = "kcp-kubeconfig"


@dataclass(frozen=True)
class Target:
    """The FrontProxy or Shard a Kubeconfig points at, as the operator reaches it."""

    kind: str
    name: str
    root: Shard
    """The root Shard of its installation (its CA signs)."""
    server: str
    """Where the user's kubeconfig points (the workspace's URL is under it)."""
    operator_url: str
    """Where the operator reaches it (its Service, or a shard's base URL)."""
    admin_secret: str
    """The Secret of the admin kubeconfig the operator reaches it with."""


@dataclass(frozen=True)
class Problem:
    """Why nothing is issued: the field at fault, a reason and a message."""

    field: str
    reason: str
    message: str


def target(
    kubeconfig: Kubeconfig, proxies: list[FrontProxy], shards: list[Shard]
) -> Target | Problem:
    """The target ``spec.target`` names among the namespace's FrontProxies and Shards, or
    why it cannot be used."""
    ref = kubeconfig.spec.target
    by_name = {shard.name: shard for shard in shards}
    if ref.front_proxy_ref is not None:
        field = "spec.target.frontProxyRef"
        proxy = next((p for p in proxies if p.name == ref.front_proxy_ref.name), None)
        if proxy is None:
            return Problem(
                field, "TargetNotFound", f"FrontProxy {ref.front_proxy_ref.name} not found"
            )
        root = by_name.get(proxynames.root_name(proxy))
        if (
            not proxy.spec.pki.issue
            or proxy.spec.tls.client_ca_secret_ref is not None
            or root is None
            or not shardnames.issues_client_certificates(root)
        ):
            return Problem(
                field,
                "TargetNotIssuing",
                f"FrontProxy {proxy.name} does not trust the installation's CA for client "
                "certificates (its spec.pki.issue is false, it names spec.tls.clientCASecretRef, "
                "or its root Shard does not issue): the operator cannot sign for it",
            )
        return Target(
            FRONT_PROXY_KIND,
            proxy.name,
            root,
            proxynames.external_url(proxy),
            proxynames.service_url(proxy),
            proxynames.admin_kubeconfig_secret(proxy),
        )
    assert ref.shard_ref is not None, "validate() requires one target"
    field = "spec.target.shardRef"
    shard = by_name.get(ref.shard_ref.name)
    if shard is None:
        return Problem(field, "TargetNotFound", f"Shard {ref.shard_ref.name} not found")
    root = shard if shard.spec.is_root else by_name.get(_root_name(shard))
    if root is None or not (
        shardnames.issues_client_certificates(shard) and shardnames.issues_client_certificates(root)
    ):
        return Problem(
            field,
            "TargetNotIssuing",
            f"Shard {shard.name} does not trust the installation's CA for client certificates "
            "(spec.pki.issue false, or its own serving certificate or client CA): the "
            "operator cannot sign for it",
        )
    url = shardnames.base_url(shard)
    server = shard.spec.external_url or url
    return Target(SHARD_KIND, shard.name, root, server, url, shardnames.admin_kubeconfig(shard))


def _root_name(shard: Shard) -> str:
    return shard.spec.root_shard_ref.name if shard.spec.root_shard_ref else shard.name


def owner(kubeconfig: Kubeconfig) -> Owner:
    return Owner(
        KUBECONFIG_API_VERSION,
        KUBECONFIG_KIND,
        kubeconfig.name,
        kubeconfig.namespace,
        kubeconfig.uid,
        APP,
    )


def certificate_request(kubeconfig: Kubeconfig, to: Target) -> Request:
    """The user's kubeconfig: a client certificate for ``spec.username`` in ``spec.groups``,
    its context ``spec.workspace`` at the target."""
    spec = kubeconfig.spec
    groups = tuple(spec.groups)
    return Request(
        secret=secret_name(kubeconfig),
        purpose=Purpose.KUBECONFIG,
        owner=owner(kubeconfig),
        common_name=spec.username,
        organization=groups[0] if groups else None,
        more_groups=groups[1:],
        server=workspace_url(to.server, spec.workspace),
        context=spec.workspace,
        lifetime_seconds=spec.validity_seconds,
        renew_before_seconds=spec.renew_before_seconds,
    )


def workspace_lookup(to: Target, path: str) -> str | None:
    """The URL of the Workspace object of ``path`` in its parent (None for ``root``, which
    always exists)."""
    found = parent_and_name(path)
    if found is None:
        return None
    parent, name = found
    return f"{workspace_url(to.operator_url, parent)}{WORKSPACES}/{name}"


def workspace_problem(path: str, status: int, body: JSON | None) -> Problem | None:
    """What the answer to :func:`workspace_lookup` means: None when the workspace is there
    and Ready, else why the kubeconfig waits for it."""
    field = "spec.workspace"
    if status == 404:
        return Problem(field, "WorkspaceNotFound", f"workspace {path} does not exist")
    if status != 200:
        return Problem(
            field, "WorkspaceNotChecked", f"looking up workspace {path}: {_why(status, body)}"
        )
    phase = ((body or {}).get("status") or {}).get("phase")
    if phase != "Ready":
        return Problem(field, "WorkspaceNotReady", f"workspace {path} is {phase or 'not Ready'}")
    return None


def _why(status: int, body: JSON | None) -> str:
    return f"HTTP {status}: {(body or {}).get('message') or 'no message'}"


def bindings(kubeconfig: Kubeconfig) -> list[JSON]:
    """The ClusterRoleBindings of ``spec.clusterRoles``, binding each to the user."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {
                "name": binding_name(kubeconfig, role),
                "labels": {
                    "app.kubernetes.io/managed-by": FIELD_MANAGER,
                    OWNER_LABEL: kubeconfig.uid,
                },
                "annotations": {f"{API_GROUP}/owner": f"{kubeconfig.namespace}/{kubeconfig.name}"},
            },
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": kubeconfig.spec.username,
                }
            ],
        }
        for role in kubeconfig.spec.cluster_roles
    ]


def bindings_url(operator_url: str, path: str, name: str | None = None) -> str:
    url = f"{workspace_url(operator_url, path)}{RBAC}"
    return f"{url}/{name}" if name else url


def made_by(kubeconfig: Kubeconfig, live: JSON) -> bool:
    """Whether ClusterRoleBinding ``live`` was made for ``kubeconfig`` (never write over, or
    delete, one that was not)."""
    labels = (live.get("metadata") or {}).get("labels") or {}
    return bool(kubeconfig.uid) and labels.get(OWNER_LABEL) == kubeconfig.uid


def fits(wanted: JSON, live: JSON) -> bool:
    """Whether ``live`` binds what ``wanted`` binds (a ClusterRoleBinding's roleRef cannot be
    changed; a different one is deleted and made again)."""
    return all(live.get(key) == wanted[key] for key in ("roleRef", "subjects"))


def stale(kubeconfig: Kubeconfig, made: list[JSON]) -> list[JSON]:
    """The bindings ``status.bindings`` recorded that the spec no longer asks for (another
    workspace, a dropped ClusterRole); all of them once the object is deleted."""
    wanted = {
        (kubeconfig.spec.workspace, binding["metadata"]["name"]) for binding in bindings(kubeconfig)
    }
    return [entry for entry in made if (entry.get("workspace"), entry.get("name")) not in wanted]


def binding_entry(path: str, binding: JSON) -> JSON:
    """A ``status.bindings`` entry."""
    return {
        "workspace": path,
        "name": binding["metadata"]["name"],
        "clusterRole": binding["roleRef"]["name"],
    }


def answer_problem(what: str, status: int, body: JSON | None) -> Problem:
    """A request about a ClusterRoleBinding that kcp refused."""
    return Problem("spec.clusterRoles", "BindingFailed", f"{what}: {_why(status, body)}")
