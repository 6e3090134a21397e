"""One reconcile pass over a Shard: read, let the planner decide, write children, then status."""

from __future__ import annotations

from dataclasses import replace

from kcp_shard_operator.constants import SHARD_KIND
from kcp_shard_operator.controller.backup import (
    backup_conditions,
    start_due,
    target_found,
    with_outcome,
    written,
)
from kcp_shard_operator.controller.certificates import issue
from kcp_shard_operator.controller.cleanup import clean_identity_cache
from kcp_shard_operator.controller.context import Context, Logger
from kcp_shard_operator.controller.health import shard_health
from kcp_shard_operator.controller.passes import (
    API_ERROR,
    degraded_reason,
    delete_pdb,
    now,
    request_pass,
    write_children,
)
from kcp_shard_operator.controller.reads import (
    cache_server_of,
    front_proxy_of,
    installation,
    pods,
    read,
    read_secrets,
    read_shard,
    root_of,
    virtual_workspaces_of,
)
from kcp_shard_operator.controller.restore import advance, begin, held_by
from kcp_shard_operator.controller.restore import conditions as restore_conditions
from kcp_shard_operator.controller.restore import recorded as with_restore
from kcp_shard_operator.controller.writes import write_status
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.backup.restore import installation_of
from kcp_shard_operator.core.installation.steps import container_args
from kcp_shard_operator.core.shard.args import STANDALONE_FLAG
from kcp_shard_operator.core.shard.backup import backup_gate
from kcp_shard_operator.core.shard.claim import Storage, claim_name, runs_on_empty_dir, storage_of
from kcp_shard_operator.core.shard.names import audit_policy_name, child_name
from kcp_shard_operator.core.shard.pki import with_issued
from kcp_shard_operator.core.shard.plan import plan
from kcp_shard_operator.core.shard.spec import Shard, parse_shard
from kcp_shard_operator.core.shard.status import Observation, shard_status
from kcp_shard_operator.core.shard.upgradebackup import minor_upgrade_target, waiting_for_backups
from kcp_shard_operator.core.status.conditions import invalid_status
from kcp_shard_operator.core.status.deployments import (
    deployment_revision,
    pods_refused_by_a_terminating_namespace,
    rollout_complete,
)
from kcp_shard_operator.core.virtualworkspaces.names import serves
from kcp_shard_operator.core.virtualworkspaces.spec import VirtualWorkspaceServer
from kcp_shard_operator.kube.client import (
    PLURALS,
    APIError,
    error_message,
)

CHILD_KINDS = tuple(
    (api_version, kind, PLURALS[kind])
    for api_version, kind in (
        ("v1", "Service"),
        ("v1", "PersistentVolumeClaim"),
        ("apps/v1", "Deployment"),
        ("policy/v1", "PodDisruptionBudget"),
        ("v1", "ConfigMap"),
    )
)
"""(apiVersion, kind, plural) of the objects rendered for a Shard."""
STORAGE_CLASSES_SECONDS = 10.0
"""How long a listing of the StorageClasses explains Pending claims before it is read again."""


def _child_name(shard: Shard, kind: str) -> str:
    if kind == "ConfigMap":
        return audit_policy_name(shard)
    return claim_name(shard) if kind == "PersistentVolumeClaim" else child_name(shard)


def _storage_classes(ctx: Context, claim: JSON | None) -> dict[str, JSON] | None:
    """The cluster's StorageClasses, read only while the shard's claim is Pending (to say
    why), and at most once per STORAGE_CLASSES_SECONDS for all Shards (a hundred new claims
    Pending at once would otherwise list them on each of their passes); None otherwise or
    when they cannot be read."""
    if ((claim or {}).get("status") or {}).get("phase") != "Pending":
        return None
    listed = ctx.storage_classes
    if listed is not None and ctx.clock() - listed[0] < STORAGE_CLASSES_SECONDS:
        return listed[1]
    try:
        classes = ctx.kube.storage_classes()
    except APIError:
        return None
    ctx.storage_classes = (ctx.clock(), classes)
    return classes


def _leave(ctx: Context, uid: str, namespace: str, logger: Logger) -> None:
    """Stop writing for a Shard whose namespace is being deleted: its children go with it,
    and neither a status nor an Event would tell anything (one line per namespace)."""
    if namespace not in ctx.terminating.values():
        logger.info("namespace %s is being deleted: no more writes or Events there", namespace)
    ctx.terminating[uid] = namespace


def _virtual_workspaces(ctx: Context, shard: Shard) -> VirtualWorkspaceServer | None:
    """The server that runs ``shard``'s virtual workspaces: once it is Ready, or when the
    shard's pods already proxy to it. Until then the shard runs them in-process, so that
    switching to a new server never leaves ``/services/`` without one."""
    found = virtual_workspaces_of(ctx, shard.namespace, shard.name)
    if found is None or serves(found) is not None:
        return found
    live = read(ctx, "apps/v1", "Deployment", shard.namespace, child_name(shard))
    standalone = any(arg == STANDALONE_FLAG for arg in container_args(live))
    return found if standalone else None


def reconcile(ctx: Context, namespace: str, name: str, logger: Logger) -> None:
    """Request a level-triggered pass over a Shard: children first, then status.

    A refusal or an unreachable API server ends the pass with one log line (and, when the
    status can still be written, ``Degraded``), never with a traceback retried by kopf.
    """
    request_pass(
        ctx, SHARD_KIND, namespace, name, lambda: _reconcile(ctx, namespace, name, logger), logger
    )


def _reconcile(ctx: Context, namespace: str, name: str, logger: Logger) -> str | None:
    """The pass; returns the reason of the problem it ended with, None if none."""

    def again() -> None:
        reconcile(ctx, namespace, name, logger)

    obj = read_shard(ctx, namespace, name)
    if obj is None:
        return None
    uid = str(obj["metadata"].get("uid", ""))
    if obj["metadata"].get("deletionTimestamp"):
        ctx.terminating.pop(uid, None)
        ctx.rolled_out.pop(uid, None)
        return None
    if uid in ctx.terminating:
        return None
    release = ctx.settings.deprecating_release
    generation = int(obj["metadata"].get("generation", 0))
    try:
        shard = parse_shard(obj, release)
    except SpecError as err:
        status = invalid_status(obj.get("status"), generation, str(err), now())
        write_status(ctx, obj, status)
        return degraded_reason(status)
    try:
        root = root_of(ctx, shard)
        proxy = front_proxy_of(ctx, shard)
        virtual = _virtual_workspaces(ctx, shard)
        shard, issuance = issue(ctx, shard, root, logger, proxy, virtual)
        root = None if root is None else with_issued(root, None, proxy=proxy)
        observed = {
            kind: read(ctx, api, kind, namespace, _child_name(shard, kind))
            for api, kind, _ in CHILD_KINDS
        }
        secrets = read_secrets(ctx, namespace, shard.spec.secret_names)
        backup_target_found = target_found(ctx, shard)
    except APIError as err:
        seen = Observation(
            deployment=None, error=f"reading: {error_message(err)}", error_reason=API_ERROR
        )
        write_status(ctx, obj, shard_status(shard, seen, now()))
        return API_ERROR
    if pods_refused_by_a_terminating_namespace(observed["Deployment"]):
        _leave(ctx, uid, namespace, logger)
        return None
    for issued in issuance.events:
        ctx.announce(obj, issued)
    classes = _storage_classes(ctx, observed["PersistentVolumeClaim"])
    cache = cache_server_of(ctx, shard)
    restore = begin(
        ctx,
        obj,
        shard,
        storage_of(shard.spec, runs_on_empty_dir(observed["Deployment"])),
        now(),
        logger,
        root,
    )
    upgrade_to = minor_upgrade_target(shard if root is None else root)
    members = installation(ctx, namespace, shard.name) if shard.spec.is_root else []
    backups_missing = waiting_for_backups(shard, members) if shard.spec.is_root else None
    decision = plan(
        shard,
        root,
        observed,
        release,
        secrets.revisions,
        classes,
        secrets.keys,
        cache,
        backup_claim_found=backup_target_found,
        waiting_for_backups=backups_missing,
        restoring=restore.phase,
    )
    failures = write_children(ctx, obj, decision.apply, observed, logger)
    if failures is None:
        _leave(ctx, uid, namespace, logger)
        return None
    pdb = observed.get("PodDisruptionBudget")
    if decision.delete_pdb and pdb is not None:
        failures += delete_pdb(ctx, pdb)
    deployment = observed.get("Deployment")
    rolled_out = deployment is not None and rollout_complete(deployment)
    watched_pods = shard.spec.backup is not None or restore.phase is not None or not rolled_out
    shard_pods = pods(ctx, shard) if watched_pods else []
    root_name = shard.spec.root_shard_ref.name if shard.spec.root_shard_ref else None
    restore = advance(
        ctx, shard, obj, restore, root_name, deployment, shard_pods, now(), logger,
        held_by(shard, root, members),
    )  # fmt: skip
    serving = (
        ("Service", "PersistentVolumeClaim") if decision.storage is Storage.CLAIM else ("Service",)
    )
    health = shard_health(ctx, shard, root, obj, deployment, logger, again)
    seen = Observation(
        deployment=deployment,
        error=decision.error,
        error_reason=decision.error_reason,
        waiting=decision.waiting,
        waiting_reason=decision.waiting_reason,
        dropped_args=decision.dropped_args,
        unused_refs=decision.unused_refs,
        apply_errors=failures,
        missing_secrets=decision.missing_secrets,
        missing_keys=decision.missing_keys,
        pods=[] if rolled_out else shard_pods,
        storage=decision.storage,
        claim=observed.get("PersistentVolumeClaim"),
        storage_problems=decision.storage_problems,
        pki_problems=issuance.problems,
        certificates=issuance.certificates,
        health=health,
        awaiting_kcp=rolled_out and health is None,
        missing_children=[
            f"{kind} {_child_name(shard, kind)}" for kind in serving if observed.get(kind) is None
        ],
        extra_conditions=[
            *backup_conditions(ctx, shard, backup_target_found),
            *restore_conditions(shard, restore),
        ],
    )
    status = shard_status(shard, seen, now())
    cleaned = clean_identity_cache(ctx, replace(shard, status=status), logger, again)
    if cleaned is not None:
        extra = [*seen.extra_conditions, cleaned]
        status = shard_status(shard, replace(seen, extra_conditions=extra), now())
    status, recorded = with_outcome(ctx, shard, status)
    status = with_restore(status, shard, restore)
    write_status(ctx, obj, status, deployment_revision(deployment))
    written(ctx, shard, recorded)
    if restore.phase is None:
        start_due(
            ctx, shard, obj, status, backup_target_found, shard_pods, upgrade_to,
            backup_gate(seen.health), logger, again,
            installation_of(shard.spec.is_root, status, None if root is None else root.status),
        )  # fmt: skip
    return degraded_reason(status)
