"""Conditions, phase and the status body every kind shares (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.api.objects import KcpObject
from kcp_shard_operator.core.status.deployments import (
    deployed_version,
    rollout_complete,
)

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
DEPRECATED_FLAG_DROPPED = "DeprecatedFlagDropped"
IDENTITY_CACHE_CLEANED = "IdentityCacheCleaned"
DATA_DURABLE = "DataDurable"
ROLLED_OUT = "RolledOut"
WAITING_FOR_ROOT_SHARD = "WaitingForRootShard"
WAITING_FOR_CACHE_SERVER = "WaitingForCacheServer"
WAITING_FOR_SHARDS = "WaitingForShards"
WAITING_REASONS = (WAITING_FOR_ROOT_SHARD, WAITING_FOR_CACHE_SERVER, WAITING_FOR_SHARDS)


@dataclass(frozen=True)
class Failure:
    """Why something could not be done or checked: a condition's reason and message (never
    quoting a credential)."""

    reason: str
    message: str


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool | None
    """None: Unknown."""
    reason: str
    message: str


@dataclass(frozen=True)
class Progress:
    """Where a rollout stands: the version wanted and running, whether every replica runs
    the current template, and what holds it (an error, or what it waits for)."""

    wanted: str
    running: str | None
    complete: bool
    deployed: bool
    error: tuple[str, str] | None = None
    """(reason, message) of what stops it."""
    waiting: tuple[str, str] | None = None
    """(reason, message) of what it waits for."""

    @property
    def done(self) -> bool:
        return self.complete and self.running == self.wanted

    @classmethod
    def of(
        cls,
        wanted: str,
        deployment: JSON | None,
        error: tuple[str, str] | None = None,
        waiting: tuple[str, str] | None = None,
    ) -> Progress:
        """The rollout of ``wanted`` as ``deployment`` shows it."""
        return cls(
            wanted=wanted,
            running=deployed_version(deployment),
            complete=rollout_complete(deployment),
            deployed=deployment is not None,
            error=error,
            waiting=waiting,
        )


def progressing_condition(progress: Progress) -> Condition:
    """``Progressing``: stopped by an error, waiting, complete, or rolling out."""
    held = progress.error or progress.waiting
    if held is not None:
        return Condition(PROGRESSING, False, *held)
    if progress.done:
        return Condition(PROGRESSING, False, "Complete", f"kcp {progress.running} rolled out")
    return Condition(PROGRESSING, True, "RollingOut", f"rolling out kcp {progress.wanted}")


def degraded_condition(problems: list[tuple[str, str]]) -> Condition:
    """``Degraded``: every problem found, its reason the first one's."""
    if problems:
        return Condition(DEGRADED, True, problems[0][0], "; ".join(text for _, text in problems))
    return Condition(DEGRADED, False, "AsExpected", "no problem found")


def phase_of(progress: Progress, degraded: bool) -> str:
    """The phase ``kubectl get`` shows: an object that cannot work says so, whatever the
    reason; else what it waits for, Ready, Pending or Progressing."""
    if degraded:
        return DEGRADED
    if progress.waiting is not None:
        return progress.waiting[0]
    if progress.done:
        return READY
    return "Progressing" if progress.deployed else "Pending"


def object_status(
    obj: KcpObject[Any],
    deployment: JSON | None,
    phase: str,
    conditions: list[Condition],
    certificates: list[JSON],
    now: str,
) -> JSON:
    """What every kind's status holds: the generation seen, the phase, the conditions
    (unchanged ones keep their transition time), the version rolled out on every replica
    (the last one while a rollout goes on) and the issued certificates."""
    previous: JSON = obj.status or {}
    version = (
        deployed_version(deployment) if rollout_complete(deployment) else previous.get("version")
    )
    status: JSON = {
        "observedGeneration": obj.generation,
        "phase": phase,
        "conditions": merged_conditions(previous, conditions, obj.generation, now),
    }
    if version:
        status["version"] = version
    if certificates:
        status["certificates"] = certificates
    return status


def condition(status: JSON | None, type_: str) -> JSON | None:
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def merged_conditions(
    previous: JSON, conditions: list[Condition], generation: int, now: str
) -> list[JSON]:
    """``conditions`` as status entries, then the previous ones of other types.

    An entry whose status did not change keeps its ``lastTransitionTime``.
    """
    old = {c.get("type"): c for c in previous.get("conditions") or []}
    merged: list[JSON] = []
    for cond in conditions:
        truth = {True: "True", False: "False", None: "Unknown"}[cond.status]
        before = old.get(cond.type) or {}
        merged.append(
            {
                "type": cond.type,
                "status": truth,
                "reason": cond.reason,
                "message": cond.message,
                "observedGeneration": generation,
                "lastTransitionTime": before.get("lastTransitionTime", now)
                if before.get("status") == truth
                else now,
            }
        )
    known = {cond.type for cond in conditions}
    return merged + [c for c in previous.get("conditions") or [] if c.get("type") not in known]


def invalid_status(previous: JSON | None, generation: int, problem: str, now: str) -> JSON:
    """Status of a Shard whose spec could not be parsed at all."""
    base = dict(previous or {})
    conditions = [
        Condition(type_, truth, "InvalidSpec", problem)
        for type_, truth in ((READY, False), (PROGRESSING, False), (DEGRADED, True))
    ]
    base.update(
        observedGeneration=generation,
        phase="Degraded",
        conditions=merged_conditions(base, conditions, generation, now),
    )
    return base


ROOT_SHARD_NOT_FOUND = "RootShardNotFound"
CHILD_NOT_FOUND = "ChildNotFound"
"""Ready is False: a child that serves the object besides its Deployment does not exist."""
CACHE_SERVER_NOT_FOUND = "CacheServerNotFound"
