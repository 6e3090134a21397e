"""What the Shards the operator knows say about themselves, counted for /metrics (pure).

Every figure comes from a Shard's own status as the watch last delivered it, so a scrape
reads no API object.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.status.conditions import PROGRESSING, condition

UNKNOWN = "unknown"
"""The phase or version of a Shard whose status does not say (not reconciled yet)."""


@dataclass(frozen=True)
class Expiry:
    """When an issued certificate a Shard mounts or is reached with expires."""

    namespace: str
    shard: str
    secret: str
    not_after: float
    """Seconds since the epoch."""


@dataclass(frozen=True)
class Backups:
    """What a Shard's status says of its verified backups (status.backup, status.backups)."""

    namespace: str
    shard: str
    last_success: float | None
    """When the last verified backup finished, seconds since the epoch."""
    newest_size: float | None
    """Bytes of the newest backup the status lists."""
    kept: int


@dataclass(frozen=True)
class Census:
    """Shards by phase and by the kcp version rolled out, rollouts going on, certificates,
    backups."""

    phases: Counter[str] = field(default_factory=Counter)
    versions: Counter[str] = field(default_factory=Counter)
    rolling_out: int = 0
    expiries: list[Expiry] = field(default_factory=list)
    backups: list[Backups] = field(default_factory=list)


def timestamp(text: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 time as Kubernetes writes it, or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def rolling_out(status: JSON | None) -> bool:
    """Whether ``Progressing`` says a rollout is going on."""
    progressing = condition(status, PROGRESSING) or {}
    return (progressing.get("status"), progressing.get("reason")) == ("True", "RollingOut")


def rollout_seconds(before: JSON | None, finished_at: float) -> float | None:
    """How long the rollout that finishes at ``finished_at`` took: since ``Progressing``
    turned to ``RollingOut`` in the status ``before`` it (None when it was not rolling out).

    The start is kept in the Shard's status, so a rollout that outlives an operator pod is
    measured from its real start.
    """
    if not rolling_out(before):
        return None
    started = timestamp((condition(before, PROGRESSING) or {}).get("lastTransitionTime"))
    if started is None:
        return None
    return max(0.0, finished_at - started)


def _backups(namespace: str, name: str, status: JSON) -> Backups | None:
    listed = status.get("backups") or []
    success = timestamp((status.get("backup") or {}).get("lastSuccessTime"))
    if success is None and not listed:
        return None
    size = float(listed[0].get("size") or 0) if listed else None
    return Backups(namespace, name, success, size, len(listed))


def census(shards: Iterable[JSON]) -> Census:
    """Count ``shards`` (Shard objects, as the store keeps them), in one pass: a caller may
    hand them over one at a time."""
    phases: Counter[str] = Counter()
    versions: Counter[str] = Counter()
    rolling = 0
    expiries: list[Expiry] = []
    backups: list[Backups] = []
    for shard in shards:
        meta = shard.get("metadata") or {}
        status = shard.get("status") or {}
        backed_up = _backups(str(meta.get("namespace", "")), str(meta.get("name", "")), status)
        if backed_up is not None:
            backups.append(backed_up)
        phases[str(status.get("phase") or UNKNOWN)] += 1
        versions[str(status.get("version") or UNKNOWN)] += 1
        rolling += rolling_out(status)
        for entry in status.get("certificates") or []:
            not_after = timestamp(entry.get("notAfter"))
            if not_after is not None:
                expiries.append(
                    Expiry(
                        str(meta.get("namespace", "")),
                        str(meta.get("name", "")),
                        str(entry.get("secret", "")),
                        not_after,
                    )
                )
    return Census(phases, versions, rolling, expiries, backups)
