"""One reconcile pass over a FrontProxy: issue its PKI, write its children, ask through it,
then status."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kcp_shard_operator.constants import FRONT_PROXY_KIND
from kcp_shard_operator.controller.certificates import Issued, issue_requests
from kcp_shard_operator.controller.context import Context, Logger, Routed
from kcp_shard_operator.controller.health import PROBE_INTERVAL_SECONDS
from kcp_shard_operator.controller.passes import (
    degraded_reason,
    delete_pdb,
    now,
    request_pass,
    write_children,
)
from kcp_shard_operator.controller.reads import (
    installation,
    labelled_pods,
    read,
    read_front_proxy,
    read_secrets,
    virtual_workspace_servers,
    virtual_workspaces_of,
)
from kcp_shard_operator.controller.writes import write_status
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.frontproxy import pki as frontproxypki
from kcp_shard_operator.core.frontproxy.names import (
    admin_kubeconfig_secret,
    child_name,
    mapping_name,
    service_url,
)
from kcp_shard_operator.core.frontproxy.plan import plan_front_proxy, services_server
from kcp_shard_operator.core.frontproxy.render import mounted, selector_labels
from kcp_shard_operator.core.frontproxy.spec import FrontProxy, parse_front_proxy
from kcp_shard_operator.core.frontproxy.status import (
    ProxyObservation,
    Route,
    front_proxy_status,
    settling,
)
from kcp_shard_operator.core.pki.issuance import Names
from kcp_shard_operator.core.shard import pki
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.conditions import invalid_status
from kcp_shard_operator.core.status.deployments import (
    SETTLE_RETRY_SECONDS,
    deployment_revision,
    rollout_complete,
)
from kcp_shard_operator.kube.client import APIError, error_message

CHILDREN = (
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("apps/v1", "Deployment"),
    ("policy/v1", "PodDisruptionBudget"),
)
NOT_ISSUED = "CertificateNotIssued"


def reconcile_front_proxy(ctx: Context, namespace: str, name: str, logger: Logger) -> None:
    """Request a level-triggered pass; an unreachable API server ends it with one log line."""
    request_pass(
        ctx,
        FRONT_PROXY_KIND,
        namespace,
        name,
        lambda: _reconcile(ctx, namespace, name, logger),
        logger,
    )


def _child_name(proxy: FrontProxy, kind: str) -> str:
    return mapping_name(proxy) if kind == "ConfigMap" else child_name(proxy)


def _issue(ctx: Context, proxy: FrontProxy, root: Shard | None, logger: Logger) -> Issued:
    """Issue what ``proxy`` leaves unset, once its root has rolled out (its installation's
    CA exists then)."""
    if root is None or not root.status_version or not root.spec.is_root:
        return Issued()
    wanted = frontproxypki.requests(proxy, root)
    done = Issued([(NOT_ISSUED, why) for why in wanted.not_issued])
    if not (wanted.by_installation_ca or wanted.by_requestheader_ca):
        return done
    names = Names(root.name)
    with ctx.lock(proxy.namespace, f"{root.name}/pki"):
        user_ca = root.spec.pki.ca_secret_ref is not None
        where = f"spec.pki.caSecretRef of Shard {root.name}" if user_ca else None
        ca = pki.ca_secret(root)
        done.add(issue_requests(ctx, proxy.namespace, ca, where, wanted.by_installation_ca, logger))
        if wanted.by_requestheader_ca:
            done.add(
                issue_requests(
                    ctx,
                    proxy.namespace,
                    names.requestheader_ca,
                    None,
                    wanted.by_requestheader_ca,
                    logger,
                )
            )
    return done


def _route(
    ctx: Context, proxy: FrontProxy, deployment: JSON | None, again: Callable[[], None]
) -> Route | None:
    """What the last read through the front-proxy gave (None: none yet, or it rolls out);
    read again in the background at most every PROBE_INTERVAL_SECONDS."""
    key = f"{proxy.namespace}/{proxy.name}"
    now = ctx.clock()
    last = ctx.routes.get(key)
    if not rollout_complete(deployment):
        if last is not None:
            ctx.routes[key] = replace(last, rolled_out_at=None)
        return None
    if not ctx.settings.kcp_checks:
        return Route(None, "NotVerified", "the operator runs with --no-kcp-checks")
    if not proxy.spec.pki.issue:
        return Route(None, "NoAdminKubeconfig", "not verified: nothing is issued (spec.pki)")
    if last is None or last.rolled_out_at is None:
        last = ctx.routes[key] = Routed(last.route if last else None, now, now)
    if now >= last.next_at:
        ctx.background.request(
            ("route", key), lambda: _read_through(ctx, proxy, again), again=False
        )
    found = ctx.routes.get(key)
    return None if found is None else found.route


def _read_through(ctx: Context, proxy: FrontProxy, again: Callable[[], None]) -> None:
    """The background work: read through the front-proxy with its admin kubeconfig; a
    changed answer calls ``again`` (a pass over the FrontProxy). Right after a rollout, an
    unreachable Service is asked again soon instead (:func:`settling`), in a pass of its own."""
    key = f"{proxy.namespace}/{proxy.name}"
    secret = admin_kubeconfig_secret(proxy)
    try:
        kubeconfig = ctx.kube.secret_value(proxy.namespace, secret, "kubeconfig")
    except APIError as err:
        route = Route(None, "APIError", f"reading Secret {secret}: {error_message(err)}")
    else:
        if kubeconfig is None:
            route = Route(
                False, "SecretNotFound", f"Secret {secret} (the admin kubeconfig) not found"
            )
        else:
            route = ctx.route(kubeconfig, service_url(proxy))
    now = ctx.clock()
    last = ctx.routes.get(key)
    if last is None:
        return
    since = now - (last.rolled_out_at if last.rolled_out_at is not None else now)
    if settling(route, since):
        ctx.routes[key] = replace(last, next_at=now + SETTLE_RETRY_SECONDS)
        ctx.later(SETTLE_RETRY_SECONDS, again)
        return
    ctx.routes[key] = replace(last, route=route, next_at=now + PROBE_INTERVAL_SECONDS)
    if last.route != route:
        again()


def _reconcile(ctx: Context, namespace: str, name: str, logger: Logger) -> str | None:
    def again() -> None:
        reconcile_front_proxy(ctx, namespace, name, logger)

    obj = read_front_proxy(ctx, namespace, name)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None
    generation = int(obj["metadata"].get("generation", 0))
    try:
        proxy = parse_front_proxy(obj)
    except SpecError as err:
        status = invalid_status(obj.get("status"), generation, str(err), now())
        write_status(ctx, obj, status)
        return degraded_reason(status)
    root_ref = proxy.spec.root_shard_ref.name
    shards = installation(ctx, namespace, root_ref)
    root = next((shard for shard in shards if shard.name == root_ref), None)
    issued = _issue(ctx, proxy, root, logger)
    for issued_event in issued.events:
        ctx.announce(obj, issued_event)
    observed = {
        kind: read(ctx, api, kind, namespace, _child_name(proxy, kind)) for api, kind in CHILDREN
    }
    try:
        names = mounted(proxy).secrets
    except SpecError:
        names = []
    secrets = read_secrets(ctx, namespace, names)
    release = ctx.settings.deprecating_release
    decision = plan_front_proxy(
        proxy,
        root,
        shards,
        observed,
        release,
        secrets.revisions,
        secrets.keys,
        services_server(virtual_workspaces_of(ctx, namespace, root_ref), observed.get("ConfigMap")),
        [
            server
            for server in virtual_workspace_servers(ctx, namespace)
            if any(shard.name == server.spec.shard_ref.name for shard in shards)
        ],
    )
    failures = write_children(ctx, obj, decision.apply, observed, logger)
    if failures is None:
        return None
    pdb = observed.get("PodDisruptionBudget")
    if decision.delete_pdb and pdb is not None:
        failures += delete_pdb(ctx, pdb)
    deployment = observed.get("Deployment")
    seen = ProxyObservation(
        deployment=deployment,
        error=decision.error,
        error_reason=decision.error_reason,
        waiting=decision.waiting,
        waiting_reason=decision.waiting_reason,
        pods=[]
        if deployment is None or rollout_complete(deployment)
        else labelled_pods(ctx, namespace, selector_labels(proxy)),
        apply_errors=failures,
        missing_secrets=decision.missing_secrets,
        missing_keys=decision.missing_keys,
        pki_problems=issued.problems,
        certificates=issued.certificates,
        route=_route(ctx, proxy, deployment, again),
    )
    status = front_proxy_status(proxy, seen, now())
    write_status(ctx, obj, status, deployment_revision(deployment))
    return degraded_reason(status)
