"""What the status says of a shard's backups, and what is due next (pure).

``status.backups`` lists the verified backups, newest first; ``status.backup`` holds the
bookkeeping (the schedule the next time was computed for, the last on-demand request handled,
the last success). A backup's outcome is folded into them by :func:`recorded`.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from enum import StrEnum

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.schedule import parse_cron
from kcp_shard_operator.core.backup.snapshot import Failure
from kcp_shard_operator.core.backup.spec import BACKUP_ANNOTATION, BackupSpec, RetentionSpec
from kcp_shard_operator.core.status.conditions import Condition

BACKED_UP = "BackedUp"
SUCCEEDED = "Succeeded"


UPGRADE_RETRY_SECONDS = 300
"""How long after a failed backup before a minor upgrade it is tried again."""


class Trigger(StrEnum):
    ON_DEMAND = "OnDemand"
    SCHEDULED = "Scheduled"
    BEFORE_UPGRADE = "BeforeUpgrade"


@dataclass(frozen=True)
class Request:
    """A backup to take now: why, the annotation value it answers (on demand), the kcp minor
    release the installation is about to move to (before an upgrade)."""

    trigger: Trigger
    token: str | None = None
    upgrade_to: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What one backup attempt ended with: the new entry, or why none; the entries retention
    removed."""

    request: Request
    finished: str
    """When it ended (RFC 3339)."""
    entry: JSON | None = None
    failure: Failure | None = None
    removed: list[str] = field(default_factory=list)


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def format_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def backup_name(shard: str, moment: datetime.datetime) -> str:
    """``<shard>-<UTC time to the second>``: unique per shard, sorted by time."""
    return f"{shard}-{moment.astimezone(datetime.UTC):%Y%m%dT%H%M%SZ}"


def backup_path(shard: str, name: str) -> str:
    """Where a backup lies on the claim."""
    return f"{shard}/{name}.db"


def entries(status: JSON | None) -> list[JSON]:
    return [dict(entry) for entry in (status or {}).get("backups") or []]


def upgrade_backup(status: JSON | None, upgrade_to: str) -> JSON | None:
    """The backup taken before the move to kcp minor ``upgrade_to``, if any; not one imported
    from a manifest (``importedFrom``), taken of data before the restore and not of the data
    that moves now."""
    for entry in entries(status):
        if entry.get("importedFrom"):
            continue
        if entry.get("trigger") == Trigger.BEFORE_UPGRADE and entry.get("upgradeTo") == upgrade_to:
            return entry
    return None


def on_target(entry: JSON, backup: BackupSpec) -> bool:
    """Whether backup ``entry`` lies on the target ``backup`` names now: an object of its
    bucket, or a file of a claim (retention acts on those only; the others stay listed)."""
    if backup.s3 is not None:
        return bool(entry.get("key")) and entry.get("bucket") == backup.s3.bucket
    return not entry.get("key")


def target_of(entry: JSON) -> str:
    """Where backup ``entry`` lies, as a human reads it."""
    if entry.get("location"):
        return str(entry["location"])
    return f"PersistentVolumeClaim {entry.get('claim')}"


def expired(backups: list[JSON], retention: RetentionSpec, now: datetime.datetime) -> list[JSON]:
    """The backups retention deletes: beyond the newest ``keep``, or older than
    ``maxAgeDays``; never the newest one. Backups taken before a minor upgrade do not count
    against ``keep`` (they are the way back), only against ``maxAgeDays``. Backups imported
    from a manifest (``importedFrom``: of a Shard this one did not take them of) are never
    deleted and do not count."""
    own = [entry for entry in backups if not entry.get("importedFrom")]
    ordered = sorted(own, key=lambda entry: str(entry.get("time", "")), reverse=True)
    gone = []
    counted = 0
    for entry in ordered[1:]:
        if entry.get("trigger") != Trigger.BEFORE_UPGRADE:
            counted += 1
        too_many = entry.get("trigger") != Trigger.BEFORE_UPGRADE and counted >= retention.keep
        age = now - parse_time(str(entry["time"]))
        too_old = retention.max_age_days is not None and age > datetime.timedelta(
            days=retention.max_age_days
        )
        if too_many or too_old:
            gone.append(entry)
    return gone


def next_scheduled(spec: BackupSpec, status: JSON | None, now: datetime.datetime) -> str | None:
    """When the next scheduled backup is due: as the status says, unless the schedule changed
    (then the first time after ``now``); None without a schedule."""
    if spec.schedule is None:
        return None
    kept = (status or {}).get("backup") or {}
    if kept.get("schedule") == spec.schedule and kept.get("nextScheduledTime"):
        return str(kept["nextScheduledTime"])
    return format_time(parse_cron(spec.schedule).next_after(now))


def wanted(
    spec: BackupSpec,
    status: JSON | None,
    annotations: JSON,
    now: datetime.datetime,
    upgrade_to: str | None = None,
) -> Request | None:
    """The backup due now, if any: an annotation value not handled yet, the one before the
    installation's move to kcp minor ``upgrade_to`` (again 5 minutes after it failed), else
    the schedule."""
    kept = (status or {}).get("backup") or {}
    token = annotations.get(BACKUP_ANNOTATION)
    if token and token != kept.get("lastRequest"):
        return Request(Trigger.ON_DEMAND, str(token))
    if upgrade_to is not None and upgrade_backup(status, upgrade_to) is None:
        failed = kept.get("lastUpgradeFailureTime")
        waited = failed is None or now - parse_time(str(failed)) >= datetime.timedelta(
            seconds=UPGRADE_RETRY_SECONDS
        )
        if waited:
            return Request(Trigger.BEFORE_UPGRADE, upgrade_to=upgrade_to)
    due = next_scheduled(spec, status, now)
    if due is not None and parse_time(due) <= now:
        return Request(Trigger.SCHEDULED)
    return None


def bookkeeping(spec: BackupSpec | None, status: JSON, previous: JSON | None, now: str) -> JSON:
    """``status`` with ``backup`` and ``backups`` carried over from ``previous`` and the next
    scheduled time of ``spec`` filled in."""
    kept = dict(((previous or {}).get("backup")) or {})
    backups = entries(previous)
    if backups:
        status["backups"] = backups
    if spec is not None and spec.schedule is not None:
        kept["schedule"] = spec.schedule
        kept["nextScheduledTime"] = next_scheduled(spec, previous, parse_time(now))
    else:
        kept.pop("schedule", None)
        kept.pop("nextScheduledTime", None)
    if kept:
        status["backup"] = kept
    return status


def recorded(spec: BackupSpec, status: JSON, outcome: Outcome) -> JSON:
    """``status`` (already carrying the bookkeeping) with ``outcome`` folded in."""
    kept = dict(status.get("backup") or {})
    finished = parse_time(outcome.finished)
    if outcome.request.trigger is Trigger.ON_DEMAND:
        kept["lastRequest"] = outcome.request.token
    elif outcome.request.trigger is Trigger.SCHEDULED and spec.schedule is not None:
        kept["schedule"] = spec.schedule
        kept["nextScheduledTime"] = format_time(parse_cron(spec.schedule).next_after(finished))
    backups = [entry for entry in entries(status) if entry.get("name") not in outcome.removed]
    if outcome.entry is not None:
        backups = [outcome.entry, *backups]
        kept["lastSuccessTime"] = outcome.finished
    else:
        kept["lastFailureTime"] = outcome.finished
        if outcome.request.trigger is Trigger.BEFORE_UPGRADE:
            kept["lastUpgradeFailureTime"] = outcome.finished
    status["backup"] = kept
    if backups:
        status["backups"] = backups
    else:
        status.pop("backups", None)
    return status


def condition_of(outcome: Outcome) -> Condition:
    """``BackedUp``: the last attempt's result."""
    if outcome.failure is not None:
        return Condition(BACKED_UP, False, outcome.failure.reason, outcome.failure.message)
    entry = outcome.entry or {}
    removed = f"; retention removed {', '.join(outcome.removed)}" if outcome.removed else ""
    source = f" from {entry['endpoint']}" if entry.get("endpoint") else ""
    return Condition(
        BACKED_UP,
        True,
        SUCCEEDED,
        f"backup {entry.get('name')} ({outcome.request.trigger.value}){source} verified: "
        f"{entry.get('keys')} keys at revision {entry.get('revision')}, {entry.get('size')} "
        f"bytes {'at' if entry.get('location') else 'on'} {target_of(entry)}{removed}",
    )


def status_schema() -> JSON:
    """The CRD schema of ``status.backup`` and ``status.backups``."""
    text = {"type": "string"}
    when = {"type": "string", "format": "date-time"}
    number = {"type": "integer", "format": "int64"}
    return {
        "backup": {
            "type": "object",
            "description": "Backup bookkeeping: the schedule and the next time it names, the "
            "last on-demand request handled (annotation kcpshard.dev/backup), the last "
            "success and failure.",
            "properties": {
                "schedule": text,
                "nextScheduledTime": when,
                "lastRequest": text,
                "lastSuccessTime": when,
                "lastFailureTime": when,
                "lastUpgradeFailureTime": when,
            },
        },
        "backups": {
            "type": "array",
            "description": "The verified backups of the shard, newest first: when, why, the "
            "kcp version and data UID they were taken with, where they lie (claim and path, or "
            "bucket and key), "
            "their size and sha256, and what etcdutl snapshot status read from them.",
            "items": {
                "type": "object",
                "properties": {
                    "name": text,
                    "time": when,
                    "trigger": {"type": "string", "enum": [t.value for t in Trigger]},
                    "kcpVersion": text,
                    "upgradeTo": {
                        "type": "string",
                        "description": "The kcp minor release the installation moved to "
                        "after this backup (trigger BeforeUpgrade).",
                    },
                    "dataUID": text,
                    "installation": {
                        "type": "string",
                        "description": "The installation the backup belongs to: its root "
                        "shard's data UID when it was taken. A restore of a backup of "
                        "another installation is refused.",
                    },
                    "endpoint": {
                        "type": "string",
                        "description": "The endpoint of the external etcd (spec.etcd."
                        "endpoints) the snapshot was taken from: the first healthy one.",
                    },
                    "claim": text,
                    "path": text,
                    "bucket": {
                        "type": "string",
                        "description": "The bucket (spec.backup.s3) holding the backup.",
                    },
                    "key": {"type": "string", "description": "Its object key in the bucket."},
                    "location": {
                        "type": "string",
                        "description": "s3://<bucket>/<key>: where the backup lies.",
                    },
                    "uploadSeconds": {"type": "number"},
                    "size": number,
                    "sha256": text,
                    "etcdHash": number,
                    "revision": number,
                    "keys": number,
                    "durationSeconds": {"type": "number"},
                    "importedFrom": {
                        "type": "object",
                        "description": "Set on a backup imported from its manifest on the "
                        "backup claim for a restore into a new Shard: the Shard it was taken "
                        "of. Retention never deletes it.",
                        "properties": {"name": text, "namespace": text, "uid": text},
                    },
                },
            },
        },
    }
