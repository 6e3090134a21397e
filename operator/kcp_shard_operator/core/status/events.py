"""The Events a human should see for a change of status (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.status.conditions import (
    DATA_DURABLE,
    DEGRADED,
    DEPRECATED_FLAG_DROPPED,
    IDENTITY_CACHE_CLEANED,
    PROGRESSING,
    ROLLED_OUT,
    WAITING_REASONS,
    condition,
)


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


REFUSED_OR_UNREACHABLE = ("ShardUnreachable", "Forbidden", "Unauthorized")
"""Reasons of a failed identity-cache cleanup that a human should hear about (Warning)."""


def _rollout_finished(before: JSON | None, after: JSON) -> bool:
    """``Progressing`` went from ``RollingOut`` to ``Complete``: a rollout of the same kcp
    version (``extraArgs``, resources, a rotated Secret) finished."""
    old = condition(before, PROGRESSING) or {}
    new = condition(after, PROGRESSING) or {}
    return (old.get("status"), old.get("reason")) == ("True", "RollingOut") and (
        new.get("status"),
        new.get("reason"),
    ) == ("False", "Complete")


def events_between(before: JSON | None, after: JSON) -> list[Event]:
    """Events a human should see for the change from ``before`` to ``after``."""
    events: list[Event] = []
    old_version = (before or {}).get("version")
    if after.get("version") and (
        after.get("version") != old_version or _rollout_finished(before, after)
    ):
        events.append(
            Event("Normal", ROLLED_OUT, f"kcp {after['version']} is rolled out on every replica")
        )
    for type_, event_type in (
        (PROGRESSING, "Normal"),
        (DEGRADED, "Warning"),
        (DEPRECATED_FLAG_DROPPED, "Warning"),
        (IDENTITY_CACHE_CLEANED, "Normal"),
        (DATA_DURABLE, "Warning"),
    ):
        new = condition(after, type_)
        old = condition(before, type_)
        if new is None or (
            old and (old["status"], old["reason"]) == (new["status"], new["reason"])
        ):
            continue
        interesting = new["status"] == "True" or new["reason"] in (
            *WAITING_REASONS,
            *REFUSED_OR_UNREACHABLE,
        )
        if type_ == PROGRESSING and new["reason"] in ("Complete", "RollingOut"):
            # A rollout starts with the write that posts ``Configured`` (none on creation).
            interesting = False
        if type_ == DATA_DURABLE:
            # A claim binding is no news; data that will not survive a restart is.
            interesting = new["reason"] in ("Ephemeral", "EmptyDirKept")
        if interesting:
            kind = "Warning" if new["reason"] in REFUSED_OR_UNREACHABLE else event_type
            events.append(Event(kind, new["reason"], new["message"]))
    return events


def change_event(
    kind: str, name: str, cause: str, generation: int, owner: str = "Shard"
) -> Event | None:
    """The Event for writing a child: a hand edit put back, or the spec rolled into it."""
    if cause == "Drift":
        return Event(
            "Normal",
            "Updated",
            f"{kind} {name} brought back to the rendered state (edited by hand)",
        )
    if cause == "SpecChanged":
        return Event(
            "Normal",
            "Configured",
            f"{kind} {name} updated to the {owner}'s spec (generation {generation})",
        )
    return None
