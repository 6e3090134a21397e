"""A shard restored in place from one of its backups (pure): what the annotation asks, whether
it may be done, and the phases it goes through.

The phases, each advanced by a pass: ``Stopping`` (the Deployment at zero replicas, until no
pod of the shard is left), ``Restoring`` (a Job runs ``etcdutl snapshot restore`` into the
shard's claim and swaps etcd's member directory, the replaced one kept aside), ``Starting``
(the Deployment at the backup's kcp version, which the downgrade refusal lets through), then
``Done``; ``Failed`` when the Job failed (the member directory is swapped only after a
complete restore, so the shard starts again on its own data); ``Refused`` when it may not be
done. Each value of the annotation is answered once.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.record import entries
from kcp_shard_operator.core.kcp.versions import parse_or_none
from kcp_shard_operator.core.status.conditions import Condition

RESTORE_ANNOTATION = "kcpshard.dev/restore"
"""Set to the name of a backup in ``status.backups`` to restore the shard from it."""
RESTORED = "Restored"
EXTERNAL_ETCD_RESTORE = "docs/backups.md#an-external-etcd"
"""Where the restore of an external etcd by hand is shown."""


class Phase(StrEnum):
    STOPPING = "Stopping"
    RESTORING = "Restoring"
    STARTING = "Starting"
    DONE = "Done"
    FAILED = "Failed"
    REFUSED = "Refused"


RUNNING = frozenset({Phase.STOPPING, Phase.RESTORING, Phase.STARTING})
STOPPED = frozenset({Phase.STOPPING, Phase.RESTORING})


def current(status: JSON | None) -> JSON:
    return dict((status or {}).get("restore") or {})


def in_progress(status: JSON | None) -> Phase | None:
    """The phase of a restore going on, None when none is."""
    phase = current(status).get("phase")
    return Phase(phase) if phase in {p.value for p in RUNNING} else None


def requested(annotations: JSON, status: JSON | None) -> str | None:
    """The backup the annotation asks to restore, when that request is not answered yet."""
    name = annotations.get(RESTORE_ANNOTATION)
    if not name or in_progress(status) is not None:
        return None
    return None if current(status).get("request") == name else str(name)


def backup_entry(status: JSON | None, name: str) -> JSON | None:
    return next((entry for entry in entries(status) if entry.get("name") == name), None)


def installation_of(is_root: bool, status: JSON | None, root_status: JSON | None) -> str | None:
    """What names the installation of a shard (``status``; ``root_status`` its root's, None when
    not found): the root shard's recorded data UID (the UID of the root's own data, which a
    restore of the root brings back); None while it is not known."""
    uid = ((status if is_root else root_status) or {}).get("dataUID")
    return str(uid) if uid else None


def refusal(
    status: JSON | None,
    name: str,
    spec_version: str,
    on_claim: bool,
    installation: str | None = None,
    running: str | None = None,
    external_etcd: bool = False,
    bucket_target: bool = False,
) -> str | None:
    """Why the shard may not be restored from backup ``name``, or None. ``installation``:
    what names the installation the shard belongs to now (:func:`installation_of`);
    ``running``: the kcp the shard runs (``status.version``); ``external_etcd``: the shard
    runs on spec.etcd.endpoints, an etcd the operator does not run and cannot restore;
    ``bucket_target``: spec.backup names a bucket (the restore Job reads the backup from the
    target the spec names now)."""
    if external_etcd:
        return (
            f"the shard runs on an external etcd (spec.etcd.endpoints), which the operator "
            f"does not run: restore backup {name} by hand with etcdutl on that etcd's members "
            f"({EXTERNAL_ETCD_RESTORE}); nothing done"
        )
    entry = backup_entry(status, name)
    if entry is None:
        return (
            f"backup {name!r} ({RESTORE_ANNOTATION}) is not one of this shard's verified "
            "backups (status.backups; kcp-shard-operator backups lists them): nothing done"
        )
    if not on_claim:
        return "the shard does not keep its embedded etcd on its claim: nothing to restore into"
    if bool(entry.get("key")) != bucket_target:
        kept = f"in {entry.get('location')}" if entry.get("key") else "on a claim"
        named = "a bucket (spec.backup.s3)" if bucket_target else "a claim (spec.backup.claimRef)"
        return (
            f"backup {name} lies {kept}, and spec.backup names {named}: the restore reads "
            "the backup from the target the spec names; set it back to restore; nothing done"
        )
    recorded = entry.get("installation")
    if recorded and installation and recorded != installation:
        return (
            f"backup {name} is of another installation (its root shard's data UID was "
            f"{recorded}, this installation's is {installation}): its workspaces are not the "
            "ones this root lists; nothing done"
        )
    version = str(entry.get("kcpVersion"))
    taken, now = parse_or_none(version), parse_or_none(running)
    if taken is not None and now is not None and taken > now:
        return (
            f"backup {name} was taken with kcp {version}, newer than the kcp {now} the shard "
            "runs: a restore goes back, never forward (upgrade with spec.version instead); "
            "nothing done"
        )
    if version != spec_version:
        return (
            f"backup {name} was taken with kcp {version}, and the shard starts the version of "
            f"its spec: set spec.version (and spec.image.tag, if set) to {version} with the "
            "annotation; nothing done"
        )
    return None


def waits_for_root(root: str, root_status: JSON | None) -> str | None:
    """Why a non-root shard whose data is restored does not start yet, or None: its root is
    being restored too. The root records which shard holds each workspace, and a shard starts
    reading from it: started first, it would serve beside a root still on other data."""
    phase = in_progress(root_status)
    if phase is None:
        return None
    return (
        f"data restored; the shard starts once root shard {root} runs on its restored data "
        f"(its restore: {phase.value})"
    )


def waits_for_shards(others: Mapping[str, JSON | None]) -> str | None:
    """Why a root restored with its installation does not replace its data yet, or None: a
    shard of the installation (``others``: name -> status) restored with it still runs, and
    could still write to the root what the point restored does not hold."""
    stopping = sorted(
        name for name, status in others.items() if in_progress(status) is Phase.STOPPING
    )
    if not stopping:
        return None
    return f"stopped; the Job waits until {', '.join(stopping)}, restored with it, has stopped too"


def started(name: str, entry: JSON, now: str) -> JSON:
    """``status.restore`` of a restore that begins."""
    return {
        "request": name,
        "backup": name,
        "phase": Phase.STOPPING.value,
        "started": now,
        "message": (
            f"restoring backup {name} of {entry.get('time')} (kcp {entry.get('kcpVersion')}): "
            "everything the shard stored after it is replaced; the data it replaces stays on "
            "the claim as etcd-server/member.before-restore-<time>. The shard is stopped"
        ),
    }


def moved(record: JSON, phase: Phase, message: str, now: str) -> JSON:
    """``record`` in ``phase``."""
    out = {**record, "phase": phase.value, "message": message}
    if phase not in RUNNING:
        out["finished"] = now
    return out


def refused(name: str, why: str, now: str) -> JSON:
    return {"request": name, "backup": name, "phase": Phase.REFUSED.value, "message": why,
            "finished": now}  # fmt: skip


def condition_of(record: JSON) -> Condition | None:
    """``Restored``: Unknown while a restore goes on, True once done, False when refused or
    failed; None without a restore."""
    phase = record.get("phase")
    if not phase:
        return None
    message = str(record.get("message", ""))
    if phase == Phase.DONE:
        return Condition(RESTORED, True, phase, message)
    if phase in (Phase.FAILED, Phase.REFUSED):
        return Condition(RESTORED, False, f"Restore{phase}", message)
    return Condition(RESTORED, None, str(phase), message)


def status_schema() -> JSON:
    """The CRD schema of ``status.restore``."""
    text = {"type": "string"}
    return {
        "restore": {
            "type": "object",
            "description": "The last restore (annotation kcpshard.dev/restore): the request "
            "answered, the backup, its phase (Stopping, Restoring, Starting, Done, Failed, "
            "Refused), when it started and finished, and what it did.",
            "properties": {
                "request": text,
                "backup": text,
                "phase": {"type": "string", "enum": [p.value for p in Phase]},
                "started": {"type": "string", "format": "date-time"},
                "finished": {"type": "string", "format": "date-time"},
                "job": text,
                "message": text,
            },
        }
    }
