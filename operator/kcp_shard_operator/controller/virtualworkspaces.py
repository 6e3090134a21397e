"""One reconcile pass over a VirtualWorkspaceServer: issue its PKI, write its children, then
status."""

from __future__ import annotations

from dataclasses import dataclass

from kcp_shard_operator.constants import VIRTUAL_WORKSPACES_KIND
from kcp_shard_operator.controller.certificates import Issued, issue_requests
from kcp_shard_operator.controller.context import Context, Logger
from kcp_shard_operator.controller.passes import (
    degraded_reason,
    delete_pdb,
    now,
    request_pass,
    write_children,
)
from kcp_shard_operator.controller.reads import (
    front_proxies,
    front_proxy_of,
    labelled_pods,
    read,
    read_secrets,
    read_shard,
    read_virtual_workspaces,
    root_of,
)
from kcp_shard_operator.controller.writes import write_status
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.frontproxy.names import child_name as proxy_child_name
from kcp_shard_operator.core.frontproxy.names import mapping_name
from kcp_shard_operator.core.kcp.podtemplate import secret_names
from kcp_shard_operator.core.pki.issuance import Names
from kcp_shard_operator.core.shard import pki
from kcp_shard_operator.core.shard.spec import CHILD_SUFFIX as SHARD_SUFFIX
from kcp_shard_operator.core.shard.spec import Shard, parse_shard
from kcp_shard_operator.core.status.conditions import invalid_status
from kcp_shard_operator.core.status.deployments import deployment_revision, rollout_complete
from kcp_shard_operator.core.virtualworkspaces import pki as vwpki
from kcp_shard_operator.core.virtualworkspaces.names import child_name, shard_name
from kcp_shard_operator.core.virtualworkspaces.plan import plan_virtual_workspaces
from kcp_shard_operator.core.virtualworkspaces.release import still_sent_to
from kcp_shard_operator.core.virtualworkspaces.render import (
    render_virtual_workspaces,
    selector_labels,
)
from kcp_shard_operator.core.virtualworkspaces.spec import (
    VirtualWorkspaceServer,
    parse_virtual_workspace_server,
)
from kcp_shard_operator.core.virtualworkspaces.status import (
    ServerObservation,
    virtual_workspaces_status,
)

CHILDREN = (
    ("v1", "Service"),
    ("apps/v1", "Deployment"),
    ("policy/v1", "PodDisruptionBudget"),
)
NOT_ISSUED = "CertificateNotIssued"


def reconcile_virtual_workspaces(ctx: Context, namespace: str, name: str, logger: Logger) -> None:
    """Request a level-triggered pass; an unreachable API server ends it with one log line."""
    request_pass(
        ctx,
        VIRTUAL_WORKSPACES_KIND,
        namespace,
        name,
        lambda: _reconcile(ctx, namespace, name, logger),
        logger,
    )


@dataclass(frozen=True)
class Served:
    """The Shard a server serves: as its spec says, as its pass fills it in, and the root
    of its installation."""

    shard: Shard
    filled: Shard
    root: Shard | None


def _served(ctx: Context, server: VirtualWorkspaceServer) -> Served | None:
    """The Shard ``server`` serves (None: not found or invalid)."""
    body = read_shard(ctx, server.namespace, shard_name(server))
    if body is None:
        return None
    try:
        shard = parse_shard(body, ctx.settings.deprecating_release)
    except SpecError:
        return None
    root = root_of(ctx, shard)
    filled = pki.with_issued(
        shard, root, proxy=front_proxy_of(ctx, shard), virtual_workspaces=server
    )
    return Served(shard, filled, pki.installation_root(shard, root))


def _issue(
    ctx: Context, server: VirtualWorkspaceServer, shard: Shard, root: Shard | None, logger: Logger
) -> Issued:
    """Issue what ``server`` mounts of its own, once its installation's root has rolled out
    (its CA exists then)."""
    if root is None or not root.status_version:
        return Issued()
    wanted = vwpki.requests(server, shard, root)
    done = Issued([(NOT_ISSUED, why) for why in wanted.not_issued])
    if not wanted.by_installation_ca:
        return done
    with ctx.lock(server.namespace, f"{root.name}/pki"):
        user_ca = root.spec.pki.ca_secret_ref is not None
        where = f"spec.pki.caSecretRef of Shard {root.name}" if user_ca else None
        done.add(
            issue_requests(
                ctx, server.namespace, pki.ca_secret(root), where, wanted.by_installation_ca, logger
            )
        )
    return done


def mounted_secrets(ctx: Context, server: VirtualWorkspaceServer, shard: Shard | None) -> list[str]:
    """The Secrets the server's pods mount (none while its shard is unknown)."""
    if shard is None:
        return []
    try:
        rendered = render_virtual_workspaces(server, shard, ctx.settings.deprecating_release)
    except SpecError:
        return []
    return secret_names(rendered.deployment["spec"]["template"]["spec"])


def _reconcile(ctx: Context, namespace: str, name: str, logger: Logger) -> str | None:
    obj = read_virtual_workspaces(ctx, namespace, name)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None
    generation = int(obj["metadata"].get("generation", 0))
    try:
        server = parse_virtual_workspace_server(obj)
    except SpecError as err:
        status = invalid_status(obj.get("status"), generation, str(err), now())
        write_status(ctx, obj, status)
        return degraded_reason(status)
    served = _served(ctx, server)
    shard = None if served is None else served.filled
    root = None if served is None else served.root
    issued = Issued() if served is None else _issue(ctx, server, served.shard, root, logger)
    for issued_event in issued.events:
        ctx.announce(obj, issued_event)
    observed = {kind: read(ctx, api, kind, namespace, child_name(server)) for api, kind in CHILDREN}
    secrets = read_secrets(ctx, namespace, mounted_secrets(ctx, server, shard))
    own = frozenset(
        request.secret
        for request in (
            vwpki.requests(server, served.shard, root).by_installation_ca
            if served is not None and root is not None
            else []
        )
    )
    installation = frozenset({Names(root.name).client_ca}) if root is not None else frozenset()
    decision = plan_virtual_workspaces(
        server,
        shard,
        observed,
        ctx.settings.deprecating_release,
        secrets.revisions,
        own | installation,
    )
    failures = write_children(ctx, obj, decision.apply, observed, logger)
    if failures is None:
        return None
    pdb = observed.get("PodDisruptionBudget")
    if decision.delete_pdb and pdb is not None:
        failures += delete_pdb(ctx, pdb)
    deployment = observed.get("Deployment")
    seen = ServerObservation(
        deployment=deployment,
        error=decision.error,
        error_reason=decision.error_reason,
        waiting=decision.waiting,
        pods=[]
        if deployment is None or rollout_complete(deployment)
        else labelled_pods(ctx, namespace, selector_labels(server)),
        apply_errors=failures,
        missing_secrets=decision.missing_secrets,
        pki_problems=issued.problems,
        certificates=issued.certificates,
    )
    status = virtual_workspaces_status(server, seen, now())
    write_status(ctx, obj, status, deployment_revision(deployment))
    return degraded_reason(status)


def still_sent_to_deleted(ctx: Context, body: JSON) -> list[str]:
    """What still sends requests to the deleted VirtualWorkspaceServer ``body``
    (:func:`release.still_sent_to`): its shard's Deployment and the namespace's front-proxies
    as the watches last saw them."""
    try:
        server = parse_virtual_workspace_server(body)
    except SpecError:
        return []
    namespace = server.namespace
    shard = read(ctx, "apps/v1", "Deployment", namespace, f"{shard_name(server)}{SHARD_SUFFIX}")
    proxies = {
        proxy.name: (
            read(ctx, "v1", "ConfigMap", namespace, mapping_name(proxy)),
            read(ctx, "apps/v1", "Deployment", namespace, proxy_child_name(proxy)),
        )
        for proxy in front_proxies(ctx, namespace)
    }
    return still_sent_to(server, shard, proxies)
