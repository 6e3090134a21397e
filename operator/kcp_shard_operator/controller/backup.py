"""Backups of a Shard: a pass finds one due and starts it on the background runner; the
snapshot runs in the backup sidecar of a running pod (``pods/exec``), is verified, and its
outcome waits in the context until the next pass records it in the status.

A backup never writes the Deployment or touches the kcp container: the running shard goes on
serving while etcd streams the snapshot. Only files the operator wrote are ever removed (a
partial snapshot, backups retention let go); a snapshot that fails verification is kept aside.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

from kcp_shard_operator.controller.context import Context, Logger
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup import manifest, s3, snapshot
from kcp_shard_operator.core.backup.record import (
    BACKED_UP,
    Outcome,
    Request,
    backup_name,
    backup_path,
    bookkeeping,
    condition_of,
    entries,
    expired,
    format_time,
    on_target,
    recorded,
    wanted,
)
from kcp_shard_operator.core.backup.snapshot import AnswerError, Failure
from kcp_shard_operator.core.backup.spec import S3Target
from kcp_shard_operator.core.shard.backup import CONTAINER, backup_container_ready, etcd_of
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.conditions import Condition
from kcp_shard_operator.core.status.events import Event
from kcp_shard_operator.kube.client import APIError, Ran, error_message


class StepError(Exception):
    """A step of a backup that ended it, with the condition's reason and message."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def _key(shard: Shard) -> str:
    return f"backup/{shard.namespace}/{shard.name}"


def target_found(ctx: Context, shard: Shard) -> bool:
    """Whether the claim ``spec.backup`` names exists (read from the API: the watch sees only
    the operator's own claims); a bucket counts as found (the sidecar asks the store before
    each backup, with keys the operator never reads); False without ``spec.backup``."""
    backup = shard.spec.backup
    if backup is None:
        return False
    if backup.claim_ref is None:
        return True
    found = ctx.kube.get("v1", "PersistentVolumeClaim", shard.namespace, backup.claim_ref.name)
    return found is not None


def backup_conditions(ctx: Context, shard: Shard, found: bool) -> list[Condition]:
    """``BackedUp`` when there is news: the target is missing, or a backup ended."""
    backup = shard.spec.backup
    if backup is None:
        return []
    if not found:
        claim = backup.claim_ref.name if backup.claim_ref is not None else ""
        return [
            Condition(
                BACKED_UP,
                False,
                snapshot.TARGET_NOT_FOUND,
                f"PersistentVolumeClaim {claim} (spec.backup.claimRef) not found "
                f"in {shard.namespace}: no backup sidecar added and no backup taken; the shard "
                "runs as before",
            )
        ]
    outcome = ctx.backup_outcomes.get(_key(shard))
    return [] if outcome is None else [condition_of(outcome)]


def with_outcome(ctx: Context, shard: Shard, status: JSON) -> tuple[JSON, Outcome | None]:
    """``status`` with its schedule on the context's clock and the finished backup waiting in
    the context folded in; and that outcome."""
    status = bookkeeping(shard.spec.backup, status, shard.status, format_time(ctx.wall_clock()))
    outcome = ctx.backup_outcomes.get(_key(shard))
    if outcome is None or shard.spec.backup is None:
        return status, None
    return recorded(shard.spec.backup, status, outcome), outcome


def written(ctx: Context, shard: Shard, outcome: Outcome | None) -> None:
    """The status now holds ``outcome``: forget it."""
    if outcome is not None and ctx.backup_outcomes.get(_key(shard)) is outcome:
        del ctx.backup_outcomes[_key(shard)]


def start_due(
    ctx: Context,
    shard: Shard,
    obj: JSON,
    status: JSON,
    found: bool,
    pods: list[JSON],
    upgrade_to: str | None,
    gate: bool | Failure,
    logger: Logger,
    again: Callable[[], None],
    installation: str | None = None,
) -> None:
    """Start the backup due now, if any, on a running pod whose sidecar runs; ``upgrade_to``:
    the kcp minor the installation is about to move to (a backup before it is due); ``gate``:
    whether kcp's data may be backed up now (:func:`backup_gate`), a refusal answers the
    request as a failed backup."""
    backup = shard.spec.backup
    key = _key(shard)
    if backup is None or not found or key in ctx.backup_outcomes:
        return
    if ctx.background.running(key):
        return
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    request = wanted(backup, status, annotations, ctx.wall_clock(), upgrade_to)
    if request is None or gate is False:
        return
    if isinstance(gate, Failure):
        refused = Outcome(request, format_time(ctx.wall_clock()), failure=gate)
        ctx.backup_outcomes[key] = refused
        _report(ctx, obj, refused)
        logger.warning("backup of %s not taken: %s", shard.name, gate.reason)
        again()
        return
    ready = sorted(str(pod["metadata"]["name"]) for pod in pods if backup_container_ready(pod))
    if not ready:
        return
    pod = ready[0]
    version = str(status.get("version") or shard.spec.version)
    data_uid = status.get("dataUID")

    def work() -> None:
        outcome = take(ctx, shard, pod, request, version, data_uid, status, logger, installation)
        ctx.backup_outcomes[key] = outcome
        _report(ctx, obj, outcome)
        again()

    ctx.background.request(key, work, again=False)


def take(
    ctx: Context,
    shard: Shard,
    pod: str,
    request: Request,
    version: str,
    data_uid: str | None,
    status: JSON,
    logger: Logger,
    installation: str | None = None,
) -> Outcome:
    """One backup through ``pod``'s sidecar: (a bucket asked first), room, snapshot,
    verification, (upload), retention; ``installation`` names the installation the entry
    records (its root's data UID)."""
    backup = shard.spec.backup
    assert backup is not None
    claim = backup.claim_ref.name if backup.claim_ref is not None else None
    started = ctx.wall_clock()
    name = backup_name(shard.name, started)
    path = backup_path(shard.name, name)
    sidecar = _Sidecar(ctx, shard, pod)

    def finished(
        entry: JSON | None = None, failure: Failure | None = None, removed: list[str] | None = None
    ) -> Outcome:
        return Outcome(request, format_time(ctx.wall_clock()), entry, failure, removed or [])

    etcd = etcd_of(shard)
    try:
        if backup.s3 is not None:
            sidecar.s3(backup.s3, s3.check(backup.s3), "s3copy check")
        endpoint = _endpoint(ctx, shard, pod, etcd)
        database = snapshot.database_size(
            sidecar.run(snapshot.endpoint_status(etcd, endpoint), "etcdctl endpoint status")
        )
        room = snapshot.room_for(
            database, snapshot.available_bytes(sidecar.run(snapshot.free_space(), "df")), claim
        )
        if room is not None:
            return finished(failure=room)
        sidecar.run(snapshot.make_directory(shard.name), "mkdir")
        clock = time.monotonic()
        saved = ctx.kube.run_in_container(
            shard.namespace, pod, CONTAINER, snapshot.save(etcd, endpoint, path)
        )
        if saved.code != 0:
            sidecar.run(snapshot.remove([f"{path}.part"]), "rm")
            return finished(failure=snapshot.failed_save(saved.stderr + saved.stdout, claim))
        seconds = time.monotonic() - clock
        problem, facts = None, None
        try:
            facts = snapshot.facts(sidecar.run(snapshot.status(path), "etcdutl snapshot status"))
        except (StepError, AnswerError) as err:
            problem = str(err)
        failed = snapshot.unverified(facts, problem, path)
        if failed is not None or facts is None:
            sidecar.run(snapshot.set_aside(path), "mv")
            return finished(failure=failed)
        digest = snapshot.sha256_of(sidecar.run(snapshot.checksum(path), "sha256sum"))
        size = int(sidecar.run(snapshot.file_size(path), "stat").strip())
        where = {"claim": claim} if claim is not None else sidecar.upload(path, name, digest)
    except StepError as err:
        return finished(failure=err.failure)
    except (AnswerError, ValueError) as err:
        return finished(failure=Failure(snapshot.SNAPSHOT_FAILED, str(err)))
    except APIError as err:
        return finished(failure=Failure(snapshot.SNAPSHOT_FAILED, error_message(err)))
    entry: JSON = {
        "name": name,
        "time": format_time(started),
        "trigger": request.trigger.value,
        "kcpVersion": version,
        **where,
        "path": path,
        "size": size,
        "sha256": digest,
        "etcdHash": facts.hash,
        "revision": facts.revision,
        "keys": facts.keys,
        "durationSeconds": round(seconds, 3),
    }
    if etcd.external:
        entry["endpoint"] = endpoint
    if data_uid:
        entry["dataUID"] = data_uid
    if installation:
        entry["installation"] = installation
    if request.upgrade_to is not None:
        entry["upgradeTo"] = request.upgrade_to
    ctx.metrics.backup_seconds.observe(seconds)
    if "uploadSeconds" in where:
        ctx.metrics.backup_upload_seconds.observe(float(where["uploadSeconds"]))
    described = manifest.manifest(entry, shard.name, shard.namespace, shard.uid)
    try:
        sidecar.write_manifest(path, described)
    except StepError as err:
        # The backup is verified and listed; only the target's own record of it is missing.
        logger.warning("backup %s of %s: %s", name, shard.name, err.failure.message)
    removed = _retention(ctx, shard, pod, [entry, *entries(status)], logger)
    logger.info(
        "backup %s of %s taken from %s in %.1f s (%d bytes)",
        name, shard.name, endpoint, seconds, size,
    )  # fmt: skip
    return finished(entry=entry, removed=removed)


class _Sidecar:
    """The commands of one backup in ``pod``'s sidecar; a failed one raises StepError."""

    def __init__(self, ctx: Context, shard: Shard, pod: str) -> None:
        self.ctx, self.shard, self.pod = ctx, shard, pod

    def _exec(self, command: list[str], what: str) -> Ran:
        try:
            return self.ctx.kube.run_in_container(
                self.shard.namespace, self.pod, CONTAINER, command
            )
        except APIError as err:
            raise StepError(
                Failure(snapshot.SNAPSHOT_FAILED, f"{what} in pod {self.pod}: {error_message(err)}")
            ) from None

    def run(self, command: list[str], what: str) -> str:
        ran = self._exec(command, what)
        if ran.code != 0:
            raise StepError(
                Failure(
                    snapshot.SNAPSHOT_FAILED,
                    f"{what} in pod {self.pod} exited {ran.code}: "
                    f"{(ran.stderr or ran.stdout)[-400:]}",
                )
            )
        return ran.stdout

    def s3(self, target: S3Target, command: list[str], what: str) -> str:
        """An ``s3copy`` command: its failure named by what the store answered."""
        ran = self._exec(command, what)
        if ran.code != 0:
            raise StepError(s3.failure(ran.code, ran.stderr or ran.stdout, target))
        return ran.stdout

    def upload(self, path: str, name: str, digest: str) -> JSON:
        """The verified snapshot at ``path`` uploaded, then removed from the scratch volume
        whatever the upload's result; where it lies (the entry's fields)."""
        target = self.shard.spec.backup.s3 if self.shard.spec.backup else None
        assert target is not None
        key = s3.object_key(target, self.shard.namespace, self.shard.name, f"{name}.db")
        try:
            answer = s3.uploaded(self.s3(target, s3.put(target, path, key), "s3copy put"))
        finally:
            self._exec(snapshot.remove([path]), "rm")
        if answer.sha256 != digest:
            # Not a backup to list: the object it wrote goes, no other.
            self._exec(s3.delete(target, target.bucket, [key]), "s3copy delete")
            raise StepError(
                Failure(
                    s3.UPLOAD_FAILED,
                    f"s3copy put read sha256 {answer.sha256} of {path}, sha256sum {digest}: "
                    "the object was deleted, no backup listed",
                )
            )
        return s3.entry_fields(target.bucket, key, answer)

    def write_manifest(self, path: str, described: JSON) -> None:
        """The manifest beside the backup: on the claim, or uploaded beside its object."""
        written_at = manifest.manifest_path(path)
        self.run(manifest.write(written_at, described), "the manifest")
        backup = described["backup"]
        target = self.shard.spec.backup.s3 if self.shard.spec.backup else None
        if target is None or "key" not in backup:
            return
        key = manifest.manifest_path(str(backup["key"]))
        try:
            self.s3(target, s3.put(target, written_at, key), "s3copy put (manifest)")
        finally:
            self._exec(snapshot.remove([written_at]), "rm")


def _endpoint(ctx: Context, shard: Shard, pod: str, etcd: snapshot.Etcd) -> str:
    """The endpoint the snapshot is taken from: the embedded etcd's, or the first healthy one
    of an external etcd (``etcdctl snapshot save`` takes one)."""
    if not etcd.external:
        return etcd.endpoints[0]
    try:
        ran = ctx.kube.run_in_container(
            shard.namespace, pod, CONTAINER, snapshot.endpoint_health(etcd)
        )
    except APIError as err:
        raise StepError(
            Failure(
                snapshot.SNAPSHOT_FAILED,
                f"etcdctl endpoint health in pod {pod}: {error_message(err)}",
            )
        ) from None
    # etcdctl exits 1 when an endpoint is unhealthy, and lists every one all the same.
    return snapshot.healthy_endpoint(ran.stdout or ran.stderr, etcd)


def _retention(
    ctx: Context, shard: Shard, pod: str, backups: list[JSON], logger: Logger
) -> list[str]:
    """Delete the backups retention lets go, of those on the current target (the claim's
    files, or the bucket's objects the operator wrote: each entry's key and its manifest's);
    the names of those deleted."""
    backup = shard.spec.backup
    assert backup is not None
    now = ctx.wall_clock().astimezone(datetime.UTC)
    gone = expired([entry for entry in backups if on_target(entry, backup)], backup.retention, now)
    if not gone:
        return []
    if backup.s3 is not None:
        keys = manifest.with_manifests([str(entry["key"]) for entry in gone])
        command = s3.delete(backup.s3, backup.s3.bucket, keys)
    else:
        command = snapshot.remove(manifest.with_manifests([str(entry["path"]) for entry in gone]))
    try:
        ran = ctx.kube.run_in_container(shard.namespace, pod, CONTAINER, command)
    except APIError as err:
        logger.warning("retention of %s: %s", shard.name, error_message(err))
        return []
    if ran.code != 0:
        logger.warning("retention of %s: %s exited %d: %s", shard.name, command[0], ran.code,
                       ran.stderr)  # fmt: skip
        return []
    return [str(entry["name"]) for entry in gone]


def _report(ctx: Context, obj: JSON, outcome: Outcome) -> None:
    """The Event and the counters of a finished backup."""
    trigger = outcome.request.trigger.value
    cond = condition_of(outcome)
    if outcome.failure is not None:
        ctx.metrics.backups.labels(trigger, outcome.failure.reason).inc()
        ctx.announce(obj, Event("Warning", "BackupFailed", cond.message))
    else:
        ctx.metrics.backups.labels(trigger, cond.reason).inc()
        ctx.announce(obj, Event("Normal", "BackedUp", cond.message))
