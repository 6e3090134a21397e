"""What one pass over a FrontProxy should do (pure): apply, wait, or report an error.

The front-proxy is the last of an installation to move: it starts once its root shard is
Ready, and rolls to a new kcp version only once every shard of the installation (the root
and the shards naming it) and every virtual-workspace server of those shards runs that
version or a newer one. While it waits, the rest of its spec still applies at the version it
runs.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.frontproxy.names import root_name
from kcp_shard_operator.core.frontproxy.pki import requests
from kcp_shard_operator.core.frontproxy.render import SPEC_FIELDS, render_front_proxy
from kcp_shard_operator.core.frontproxy.spec import FrontProxy
from kcp_shard_operator.core.kcp.podtemplate import secret_names
from kcp_shard_operator.core.kcp.secretkeys import absent_secrets, missing_keys
from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.core.pki.issuance import Names
from kcp_shard_operator.core.rollout.drift import drifted_from
from kcp_shard_operator.core.rollout.versions import held_at_running_version
from kcp_shard_operator.core.shard.names import issues_client_certificates
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.conditions import (
    READY,
    ROOT_SHARD_NOT_FOUND,
    WAITING_FOR_ROOT_SHARD,
    WAITING_FOR_SHARDS,
    condition,
)
from kcp_shard_operator.core.status.deployments import deployed_version
from kcp_shard_operator.core.virtualworkspaces.names import serves, service_url
from kcp_shard_operator.core.virtualworkspaces.spec import VirtualWorkspaceServer

POD_KINDS = frozenset({"Deployment", "PodDisruptionBudget"})


@dataclass(frozen=True)
class ProxyPlan:
    """Objects to bring in line, and why nothing (or not everything) is applied."""

    apply: list[JSON] = field(default_factory=list)
    delete_pdb: bool = False
    waiting: str | None = None
    waiting_reason: str = WAITING_FOR_ROOT_SHARD
    error: str | None = None
    error_reason: str = "InvalidSpec"
    missing_secrets: list[str] = field(default_factory=list)
    missing_keys: list[str] = field(default_factory=list)


def shard_ready(shard: Shard) -> bool:
    """Whether ``shard`` has rolled out and says it is Ready."""
    ready = condition(shard.status, READY) or {}
    return ready.get("status") == "True" and shard.status_version is not None


def waiting_for(
    proxy: FrontProxy,
    root: Shard,
    shards: Collection[Shard],
    deployment: JSON | None,
    servers: Collection[VirtualWorkspaceServer] = (),
) -> tuple[str, str] | None:
    """(reason, message) of what ``proxy`` waits for before it starts or rolls to its spec
    version; None when it may go ahead. ``shards`` are the installation's Shards, the root
    among them, ``servers`` the VirtualWorkspaceServers of those shards."""
    wanted = proxy.spec.version
    if deployed_version(deployment) == wanted:
        return None
    if deployment is None:
        if shard_ready(root):
            return None
        return (
            WAITING_FOR_ROOT_SHARD,
            f"root shard {root.name} is not Ready yet; the front-proxy starts once it is",
        )
    target = proxy.spec.kcp_version
    running: list[tuple[str, Version | None]] = [
        *((shard.name, shard.status_version) for shard in sorted(shards, key=lambda s: s.name)),
        *(
            (f"VirtualWorkspaceServer {server.name}", server.status_version)
            for server in sorted(servers, key=lambda s: s.name)
        ),
    ]
    behind = [
        f"{name} runs kcp {version or '(not rolled out yet)'}"
        for name, version in running
        if version is None or version < target
    ]
    if not behind:
        return None
    every = (
        f"every shard of {root.name} and their virtual-workspace servers run"
        if servers
        else f"every shard of {root.name} runs"
    )
    return (
        WAITING_FOR_SHARDS,
        f"{'; '.join(behind)}: the front-proxy rolls to kcp {wanted} once {every} kcp "
        f"{wanted} or newer",
    )


def services_server(
    server: VirtualWorkspaceServer | None, live_mapping: JSON | None
) -> VirtualWorkspaceServer | None:
    """The server the front-proxy sends ``/services/`` to: the root's ``server`` once it is
    Ready, and while it is not (it rolls to a new version: its ``Ready`` is False until it
    has) as long as the live mapping ConfigMap sends there already; else None (the root
    shard). Without the second, every rollout of the server would roll the front-proxy off
    it and back."""
    if server is None or serves(server) is not None:
        return server
    return server if service_url(server) in json.dumps((live_mapping or {}).get("data")) else None


def plan_front_proxy(
    proxy: FrontProxy,
    root: Shard | None,
    shards: Collection[Shard],
    observed: Mapping[str, JSON | None],
    deprecating_release: Version,
    secret_revisions: Mapping[str, str] | None = None,
    secret_keys: Mapping[str, Collection[str]] | None = None,
    virtual_workspaces: VirtualWorkspaceServer | None = None,
    servers: Collection[VirtualWorkspaceServer] = (),
) -> ProxyPlan:
    """Decide the pass for ``proxy``: ``root`` is its root Shard (None: not found), ``shards``
    the installation's Shards, ``observed`` maps kind -> live child or None,
    ``secret_revisions`` the resourceVersions of the Secrets that exist,
    ``virtual_workspaces`` the server running the root's virtual workspaces (None: none),
    ``servers`` the VirtualWorkspaceServers of the installation's shards (it rolls after
    them)."""
    if root is None:
        return ProxyPlan(
            error=f"root Shard {root_name(proxy)!r} (spec.rootShardRef) not found in "
            f"{proxy.namespace}",
            error_reason=ROOT_SHARD_NOT_FOUND,
        )
    deployment = observed.get("Deployment")
    waits = waiting_for(proxy, root, shards, deployment, servers)
    held = None if waits is None else held_at_running_version(proxy, deployment)
    target = held or proxy
    try:
        rendered = render_front_proxy(
            target, root, deprecating_release, secret_revisions, virtual_workspaces
        )
    except SpecError as err:
        return ProxyPlan(error=str(err))
    pod_spec = rendered.deployment["spec"]["template"]["spec"]
    absent = absent_secrets(secret_names(pod_spec), secret_revisions)
    objects = rendered.objects
    if deployment is None and (waits is not None or absent):
        # Nothing would start: the root is not serving, or a certificate is not there yet.
        objects = [obj for obj in objects if obj["kind"] not in POD_KINDS]
    reason, waiting = waits if waits is not None else (WAITING_FOR_ROOT_SHARD, None)
    return ProxyPlan(
        apply=[obj for obj in objects if drifted_from(observed.get(obj["kind"]), obj)],
        delete_pdb=rendered.pdb is None and observed.get("PodDisruptionBudget") is not None,
        waiting=waiting,
        waiting_reason=reason,
        missing_secrets=[name for name in absent if name not in issued_by_operator(proxy, root)],
        missing_keys=missing_keys(pod_spec, secret_keys or {}, SPEC_FIELDS),
    )


def issued_by_operator(proxy: FrontProxy, root: Shard) -> set[str]:
    """The Secrets the operator issues that ``proxy`` mounts (its own, and the client CA
    bundle of the root's installation): one of them not there yet is being issued (once the
    root has rolled out), not "not found"; what keeps it from being issued is told as a PKI
    problem."""
    wanted = requests(proxy, root)
    issued = {
        request.secret for request in (*wanted.by_installation_ca, *wanted.by_requestheader_ca)
    }
    if issues_client_certificates(root):
        issued.add(Names(root.name).client_ca)
    return issued
