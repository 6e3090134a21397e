"""What other kinds know a FrontProxy by: the proxy an installation's shards advertise, its
children's and Secrets' names, its URLs (pure). Another kind imports this module and spec,
nothing else."""

from __future__ import annotations

from collections.abc import Iterable

from kcp_shard_operator.core.frontproxy.spec import CHILD_SUFFIX, FrontProxy
from kcp_shard_operator.core.kcp.podtemplate import PORT


def serving(proxies: Iterable[FrontProxy], root: str) -> FrontProxy | None:
    """The FrontProxy the Shards of root shard ``root`` advertise and trust: the first by
    name of those naming ``root`` (one is what an installation has; more serve all the same,
    but the shards' external URL is the first's)."""
    named = sorted((p for p in proxies if root_name(p) == root), key=lambda p: p.name)
    return named[0] if named else None


def child_name(proxy: FrontProxy) -> str:
    return f"{proxy.name}{CHILD_SUFFIX}"


def mapping_name(proxy: FrontProxy) -> str:
    return f"{child_name(proxy)}-mapping"


def service_url(proxy: FrontProxy) -> str:
    """Where the installation's shards and the operator reach the front-proxy."""
    return f"https://{child_name(proxy)}.{proxy.namespace}.svc:{PORT}"


def external_url(proxy: FrontProxy) -> str:
    """Where users reach it: ``spec.externalURL``, else its Service."""
    return proxy.spec.external_url or service_url(proxy)


def root_name(proxy: FrontProxy) -> str:
    return proxy.spec.root_shard_ref.name


def serving_secret(proxy: FrontProxy) -> str:
    return f"{child_name(proxy)}-serving"


def requestheader_secret(proxy: FrontProxy) -> str:
    return f"{child_name(proxy)}-requestheader"


def kubeconfig_secret(proxy: FrontProxy) -> str:
    return f"{child_name(proxy)}-kubeconfig"


def admin_kubeconfig_secret(proxy: FrontProxy) -> str:
    return f"{child_name(proxy)}-admin-kubeconfig"
