"""One reconcile pass over a Kubeconfig: find its target, check its workspace, issue or renew
the user's kubeconfig, make its ClusterRoleBindings, then status; and what its deletion
removes inside kcp."""

from __future__ import annotations

from dataclasses import replace

from kcp_shard_operator.constants import KUBECONFIG_API_VERSION, KUBECONFIG_KIND
from kcp_shard_operator.controller.certificates import (
    CERTIFICATE_CONFLICT,
    issue_requests,
)
from kcp_shard_operator.controller.context import Context, Logger
from kcp_shard_operator.controller.passes import degraded_reason, now, request_pass
from kcp_shard_operator.controller.reads import every, front_proxies, read
from kcp_shard_operator.controller.writes import write_status
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.kubeconfig.access import (
    Problem,
    Target,
    certificate_request,
    target,
)
from kcp_shard_operator.core.kubeconfig.spec import Kubeconfig, parse_kubeconfig
from kcp_shard_operator.core.kubeconfig.status import KubeconfigObservation, kubeconfig_status
from kcp_shard_operator.core.shard import pki
from kcp_shard_operator.core.shard.spec import Shard, parse_shard
from kcp_shard_operator.core.status.conditions import invalid_status
from kcp_shard_operator.core.status.events import Event
from kcp_shard_operator.kube.client import APIError, error_message
from kcp_shard_operator.useraccess.workspace import WorkspaceCalls


def reconcile_kubeconfig(ctx: Context, namespace: str, name: str, logger: Logger) -> None:
    """Request a level-triggered pass; an unreachable API server ends it with one log line."""
    request_pass(
        ctx,
        KUBECONFIG_KIND,
        namespace,
        name,
        lambda: _reconcile(ctx, namespace, name, logger),
        logger,
    )


def _shards(ctx: Context, namespace: str) -> list[Shard]:
    found = []
    for body in every(ctx, "Shard", namespace):
        try:
            found.append(parse_shard(body, ctx.settings.deprecating_release))
        except SpecError:
            continue
    return found


def _inside(ctx: Context, kubeconfig: Kubeconfig, to: Target) -> WorkspaceCalls | Problem:
    """The calls into kcp through ``to`` with its admin kubeconfig."""
    secret = to.admin_secret
    try:
        admin = ctx.kube.secret_value(kubeconfig.namespace, secret, "kubeconfig")
    except APIError as err:
        return Problem("spec.target", "TargetNotReady", f"Secret {secret}: {error_message(err)}")
    if admin is None:
        return Problem(
            "spec.target", "TargetNotReady", f"Secret {secret} (its admin kubeconfig) not found"
        )
    return ctx.workspaces(admin, to)


def _target(ctx: Context, kubeconfig: Kubeconfig) -> Target | Problem:
    found = target(
        kubeconfig, front_proxies(ctx, kubeconfig.namespace), _shards(ctx, kubeconfig.namespace)
    )
    if isinstance(found, Target) and found.root.status_version is None:
        return Problem(
            "spec.target",
            "TargetNotReady",
            f"the root Shard {found.root.name} has not rolled out yet (its CA signs)",
        )
    return found


def _issue(
    ctx: Context, obj: JSON, kubeconfig: Kubeconfig, to: Target, logger: Logger
) -> KubeconfigObservation:
    request = certificate_request(kubeconfig, to)
    user_ca = to.root.spec.pki.ca_secret_ref is not None
    where = f"spec.pki.caSecretRef of Shard {to.root.name}" if user_ca else None
    issued = issue_requests(
        ctx, kubeconfig.namespace, pki.ca_secret(to.root), where, [request], logger
    )
    for event in issued.events:
        ctx.announce(obj, event)
    problems = [
        (
            reason,
            f"spec.secretName: Secret {request.secret} exists and was not made by the operator "
            "for this Kubeconfig: nothing is issued over it; delete it or name another Secret",
        )
        if reason == CERTIFICATE_CONFLICT
        else (reason, message)
        for reason, message in issued.problems
    ]
    entry = next(iter(issued.certificates), None)
    return KubeconfigObservation(
        issue_problems=problems,
        secret=request.secret if entry is not None else None,
        not_after=str(entry["notAfter"]) if entry is not None else None,
        server=request.server,
    )


def _reconcile(ctx: Context, namespace: str, name: str, logger: Logger) -> str | None:
    obj = read(ctx, KUBECONFIG_API_VERSION, KUBECONFIG_KIND, namespace, name)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None
    generation = int(obj["metadata"].get("generation", 0))
    try:
        kubeconfig = parse_kubeconfig(obj)
    except SpecError as err:
        status = invalid_status(obj.get("status"), generation, str(err), now())
        write_status(ctx, obj, status)
        return degraded_reason(status)
    recorded = list((kubeconfig.status or {}).get("bindings") or [])
    seen = KubeconfigObservation(bindings=recorded, checked=ctx.settings.kcp_checks)
    to = _target(ctx, kubeconfig)
    inside: WorkspaceCalls | None = None
    if isinstance(to, Target) and ctx.settings.kcp_checks:
        calls = _inside(ctx, kubeconfig, to)
        problem = calls if isinstance(calls, Problem) else calls.check(kubeconfig.spec.workspace)
        if problem is not None:
            to = problem
        elif not isinstance(calls, Problem):
            inside = calls
    if isinstance(to, Problem):
        seen = replace(seen, problem=to)
    else:
        seen = replace(
            _issue(ctx, obj, kubeconfig, to, logger), bindings=recorded, checked=seen.checked
        )
        if inside is not None:
            bound = inside.bind(kubeconfig, recorded)
            seen = replace(seen, bindings=bound.made, binding_problems=bound.problems)
            _announce_bindings(ctx, obj, recorded, bound.made)
    status = kubeconfig_status(kubeconfig, seen, now())
    write_status(ctx, obj, status)
    return degraded_reason(status)


def _announce_bindings(ctx: Context, obj: JSON, before: list[JSON], after: list[JSON]) -> None:
    """An Event for each ClusterRoleBinding made or removed."""

    def keys(entries: list[JSON]) -> set[tuple[str, str]]:
        return {(str(e.get("workspace")), str(e.get("name"))) for e in entries}

    for verb, entries in (
        ("made", keys(after) - keys(before)),
        ("removed", keys(before) - keys(after)),
    ):
        for workspace, binding in sorted(entries):
            reason = "BindingMade" if verb == "made" else "BindingRemoved"
            ctx.announce(
                obj, Event("Normal", reason, f"{verb} ClusterRoleBinding {binding} in {workspace}")
            )


def release(ctx: Context, obj: JSON, logger: Logger) -> list[str]:
    """What deleting a Kubeconfig removes inside kcp: the ClusterRoleBindings its status
    records. The problems left (empty: done); a target that is gone leaves nothing to reach,
    and the bindings are left where they are (logged)."""
    bindings = list((obj.get("status") or {}).get("bindings") or [])
    if not bindings:
        return []
    try:
        kubeconfig = parse_kubeconfig(obj)
    except SpecError as err:
        logger.warning("Kubeconfig deleted with an invalid spec (%s): bindings left in kcp", err)
        return []
    to = target(
        kubeconfig, front_proxies(ctx, kubeconfig.namespace), _shards(ctx, kubeconfig.namespace)
    )
    if isinstance(to, Problem):
        logger.warning(
            "%s: %s; ClusterRoleBindings left in kcp: %s", to.field, to.message, bindings
        )
        return []
    inside = _inside(ctx, kubeconfig, to)
    if isinstance(inside, Problem):
        return [f"{inside.field}: {inside.message}"]
    done = inside.unbind(kubeconfig, bindings)
    return [f"{p.field}: {p.message}" for p in done.problems]
