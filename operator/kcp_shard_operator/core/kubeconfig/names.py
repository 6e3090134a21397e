"""What a Kubeconfig's Secret and ClusterRoleBindings are called, and the URLs of its
workspace (pure)."""

from __future__ import annotations

from kcp_shard_operator.constants import API_GROUP
from kcp_shard_operator.core.kubeconfig.spec import Kubeconfig

OWNER_LABEL = f"{API_GROUP}/kubeconfig"
"""On each ClusterRoleBinding made for a Kubeconfig: that object's uid."""


def secret_name(kubeconfig: Kubeconfig) -> str:
    return kubeconfig.spec.secret_name or f"{kubeconfig.name}-kubeconfig"


def binding_name(kubeconfig: Kubeconfig, cluster_role: str) -> str:
    """One ClusterRoleBinding per Kubeconfig and ClusterRole; the namespace keeps two
    installations' users apart in a shared workspace."""
    return f"{API_GROUP}:{kubeconfig.namespace}:{kubeconfig.name}:{cluster_role}"


def workspace_url(server: str, path: str) -> str:
    """The URL of workspace ``path`` at ``server`` (a front-proxy's or shard's base URL)."""
    return f"{server.rstrip('/')}/clusters/{path}"


def parent_and_name(path: str) -> tuple[str, str] | None:
    """The parent workspace and the name of ``path`` (None for ``root``, which has none)."""
    parent, _, name = path.rpartition(":")
    return (parent, name) if parent else None
