"""A Shard restored in place from one of its backups (annotation ``kcpshard.dev/restore``):
each pass reads where the restore stands, lets the planner stop or start the shard, and moves
it on: the Job once no pod is left, the start once the Job succeeded, done once the backup's
version has rolled out. See :mod:`kcp_shard_operator.core.backup.restore`."""

from __future__ import annotations

from dataclasses import dataclass

from kcp_shard_operator.controller.context import Context, Logger
from kcp_shard_operator.controller.reads import pods
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup import manifest, s3
from kcp_shard_operator.core.backup.manifest import IMPORTED_FROM
from kcp_shard_operator.core.backup.record import entries, target_of
from kcp_shard_operator.core.backup.restore import (
    Phase,
    backup_entry,
    condition_of,
    current,
    in_progress,
    installation_of,
    moved,
    refusal,
    refused,
    requested,
    started,
    waits_for_root,
    waits_for_shards,
)
from kcp_shard_operator.core.backup.snapshot import BACKUP_MOUNT
from kcp_shard_operator.core.shard.backup import CONTAINER, backup_container_ready
from kcp_shard_operator.core.shard.claim import Storage
from kcp_shard_operator.core.shard.restore import restore_job, restore_job_name
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.conditions import Condition
from kcp_shard_operator.core.status.deployments import deployed_version, rollout_complete
from kcp_shard_operator.core.status.events import Event
from kcp_shard_operator.kube.client import APIError, error_message


@dataclass(frozen=True)
class Restore:
    """Where a restore stands in this pass: the phase the planner follows (None: none goes
    on), ``status.restore`` as it is to be written (None: leave it as it is) and the entry
    imported from its manifest into ``status.backups`` (None: none)."""

    phase: Phase | None
    record: JSON | None
    imported: JSON | None = None


def begin(
    ctx: Context,
    obj: JSON,
    shard: Shard,
    storage: Storage,
    now: str,
    logger: Logger,
    root: Shard | None = None,
) -> Restore:
    """A restore going on (the phase the status records), one the annotation asks for now
    (recorded, nothing stopped yet), or none; ``root`` the root shard of a non-root one. A
    backup the status does not list is looked up on the backup claim (:func:`_import`)."""
    status = shard.status
    phase = in_progress(status)
    if phase is not None:
        return Restore(phase, None)
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    name = requested(annotations, status)
    if name is None:
        return Restore(None, None)
    imported = None
    restorable = storage is Storage.CLAIM and shard.spec.embedded_etcd
    unlisted = backup_entry(status, name) is None and manifest.named(name)
    if unlisted and shard.spec.backup is not None and restorable:
        looked_up = _import(ctx, shard, name, logger)
        if looked_up is None:
            return Restore(None, None)
        if isinstance(looked_up, str):
            return Restore(None, refused(name, looked_up, now))
        imported = looked_up
        status = {**(status or {}), "backups": [imported, *entries(status)]}
    installation = installation_of(
        shard.spec.is_root, status, None if root is None else root.status
    )
    why = refusal(
        status,
        name,
        shard.spec.version,
        storage is Storage.CLAIM,
        # A root seeded from a backup it did not take becomes that backup's installation;
        # a non-root shard's imported backup must be of its root's installation.
        None if imported is not None and shard.spec.is_root else installation,
        (status or {}).get("version"),
        external_etcd=not shard.spec.embedded_etcd,
        bucket_target=shard.spec.backup is not None and shard.spec.backup.s3 is not None,
    )
    if why is not None or shard.spec.backup is None:
        return Restore(None, refused(name, why or "spec.backup is not set", now))
    entry = backup_entry(status, name)
    assert entry is not None
    # Recorded first, stopped from the next pass on: a restore whose record the status does
    # not keep (a CRD older than the operator prunes it) stops nothing, rather than running
    # again on every pass.
    record = started(name, entry, now)
    if imported is not None:
        origin = imported[IMPORTED_FROM]
        record["message"] = (
            f"backup {name} imported from its manifest on {target_of(imported)} (taken of "
            f"Shard {origin['namespace']}/{origin['name']}); "
            f"{record['message']}"
        )
    return Restore(None, record, imported)


def _import(ctx: Context, shard: Shard, name: str, logger: Logger) -> JSON | str | None:
    """The entry of backup ``name`` read from its manifest on the backup target (the claim,
    or the bucket under the spec's prefix, by default that of the Shard the backup was taken
    of) through a running backup sidecar of the shard; why
    it cannot be used (the refusal's message); None while no sidecar runs to read it (the next
    pass looks again)."""
    backup = shard.spec.backup
    assert backup is not None
    found_at: JSON | None = None
    if backup.s3 is not None:
        # Under the prefix of the Shard the backup was taken of (its name says which).
        file = manifest.manifest_path(f"{name}.db")
        key = s3.object_key(backup.s3, shard.namespace, manifest.shard_of(name), file)
        command = s3.cat(backup.s3, key)
        where = s3.location(backup.s3.bucket, key)
        db = key.removesuffix(manifest.SUFFIX) + ".db"
        found_at = {
            "bucket": backup.s3.bucket,
            "key": db,
            "location": s3.location(backup.s3.bucket, db),
        }
        claim = None
    else:
        assert backup.claim_ref is not None
        claim = backup.claim_ref.name
        command = manifest.read(name)
        where = f"{command[-1].removeprefix(BACKUP_MOUNT + '/')} on PersistentVolumeClaim {claim}"
    ready = sorted(
        str(pod["metadata"]["name"]) for pod in pods(ctx, shard) if backup_container_ready(pod)
    )
    if not ready:
        return None
    try:
        ran = ctx.kube.run_in_container(shard.namespace, ready[0], CONTAINER, command)
    except APIError as err:
        logger.warning("%s: reading manifest %s: %s", shard.name, where, error_message(err))
        return None
    if ran.code != 0:
        return (
            f"backup {name!r} is not in status.backups and its manifest {where} could not be "
            f"read ({(ran.stderr or ran.stdout).strip()[-200:]}): nothing done"
        )
    try:
        return manifest.parse(ran.stdout, name, claim, found_at)
    except manifest.ManifestError as err:
        return f"the manifest {where} of backup {name!r} cannot be used: {err}; nothing done"


@dataclass(frozen=True)
class Held:
    """What a restore of the whole installation waits for: the root's Job until the other
    shards restored with it have stopped, a non-root shard's start until its root runs on its
    restored data (None: nothing)."""

    job: str | None = None
    start: str | None = None


def held_by(shard: Shard, root: Shard | None, installation: list[Shard]) -> Held:
    """:class:`Held` of ``shard``: ``root`` its root shard (None for a root), ``installation``
    the Shards of a root's installation."""
    if root is not None:
        return Held(start=waits_for_root(root.name, root.status))
    others = {member.name: member.status for member in installation if member.name != shard.name}
    return Held(job=waits_for_shards(others))


def advance(
    ctx: Context,
    shard: Shard,
    obj: JSON,
    restore: Restore,
    root_name: str | None,
    deployment: JSON | None,
    pods: list[JSON],
    now: str,
    logger: Logger,
    held: Held | None = None,
) -> Restore:
    """The restore moved on by what this pass saw (its Job applied when the shard has
    stopped, its outcome read, the start seen through); ``held`` what a restore of the
    whole installation waits for (:func:`held_by`)."""
    held = held or Held()
    if restore.phase is None:
        return restore
    record = restore.record or current(shard.status)
    name = str(record.get("backup"))
    entry = backup_entry(shard.status, name) or {}
    if restore.phase is Phase.STOPPING:
        stopped = deployment is not None and not pods and _replicas(deployment) == 0
        if not stopped:
            return Restore(Phase.STOPPING, record)
        if held.job is not None:
            return Restore(Phase.STOPPING, {**record, "message": held.job})
        job = restore_job(
            shard, root_name, entry, restore_job_name(shard, name, str(record.get("started")))
        )
        try:
            ctx.kube.apply(job)
        except APIError as err:
            return Restore(Phase.STOPPING, {**record, "message": f"the Job: {error_message(err)}"})
        message = f"shard stopped; Job {job['metadata']['name']} restores backup {name}"
        return Restore(
            Phase.RESTORING,
            {**moved(record, Phase.RESTORING, message, now), "job": job["metadata"]["name"]},
        )
    if restore.phase is Phase.RESTORING:
        job_name = str(record.get("job"))
        try:
            found = ctx.kube.get("batch/v1", "Job", shard.namespace, job_name)
        except APIError:
            return Restore(Phase.RESTORING, record)
        state = (found or {}).get("status") or {}
        if state.get("succeeded") and held.start is not None:
            return Restore(Phase.RESTORING, {**record, "message": held.start})
        if state.get("succeeded"):
            message = f"backup {name} restored; starting kcp {shard.spec.version} on it"
            ctx.announce(obj, Event("Normal", "Restoring", message))
            return Restore(Phase.STARTING, moved(record, Phase.STARTING, message, now))
        if state.get("failed") or found is None:
            message = (
                f"Job {job_name} failed (kubectl logs -n {shard.namespace} job/{job_name}); the "
                "shard's data was not replaced and it starts again on it"
            )
            ctx.announce(obj, Event("Warning", "RestoreFailed", message))
            return Restore(None, moved(record, Phase.FAILED, message, now))
        return Restore(Phase.RESTORING, record)
    if _serving(deployment, shard):
        message = (
            f"backup {name} of {entry.get('time')} restored; kcp {shard.spec.version} runs on it"
        )
        logger.info("%s: %s", shard.name, message)
        ctx.announce(obj, Event("Normal", "Restored", message))
        return Restore(None, moved(record, Phase.DONE, message, now))
    return Restore(Phase.STARTING, record)


def _serving(deployment: JSON | None, shard: Shard) -> bool:
    """Whether ``deployment`` runs the shard again: every replica of its spec ready on the
    rolled-out ``spec.version`` (not the stopped Deployment, rolled out at zero replicas)."""
    if not rollout_complete(deployment) or deployed_version(deployment) != shard.spec.version:
        return False
    assert deployment is not None
    replicas = int((deployment.get("spec") or {}).get("replicas", 1) or 0)
    ready = int((deployment.get("status") or {}).get("readyReplicas", 0) or 0)
    return replicas == shard.spec.replicas and ready >= replicas


def _replicas(deployment: JSON) -> int:
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    return max(int(spec.get("replicas", 1) or 0), int(status.get("replicas", 0) or 0))


def conditions(shard: Shard, restore: Restore) -> list[Condition]:
    """``Restored`` when this pass has news of a restore."""
    if restore.record is None:
        return []
    found = condition_of(restore.record)
    return [] if found is None else [found]


def recorded(status: JSON, shard: Shard, restore: Restore) -> JSON:
    """``status`` (its backups already carried over) with ``status.restore`` kept or updated,
    the backup imported for it listed; the backup's data UID once its data is back (the probe
    then finds that UID again)."""
    if restore.imported is not None:
        status["backups"] = [restore.imported, *entries(status)]
    record = restore.record if restore.record is not None else current(shard.status)
    if not record:
        return status
    status["restore"] = record
    if restore.record is not None and record.get("phase") in (Phase.STARTING, Phase.DONE):
        entry = backup_entry(shard.status, str(record.get("backup"))) or {}
        if entry.get("dataUID"):
            status["dataUID"] = entry["dataUID"]
    return status
