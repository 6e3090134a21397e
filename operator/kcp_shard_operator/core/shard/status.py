"""Shard status from observed state (pure): conditions, phase, running version."""

from __future__ import annotations

from dataclasses import dataclass, field

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.record import bookkeeping
from kcp_shard_operator.core.shard.claim import Storage, claim_name
from kcp_shard_operator.core.shard.health import DATA_VERIFIED, Health, ready_note
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.conditions import (
    CHILD_NOT_FOUND,
    DATA_DURABLE,
    DEPRECATED_FLAG_DROPPED,
    READY,
    WAITING_FOR_ROOT_SHARD,
    Condition,
    Progress,
    condition,
    degraded_condition,
    object_status,
    phase_of,
    progressing_condition,
)
from kcp_shard_operator.core.status.deployments import (
    deadline_exceeded,
    deployed_version,
    pod_problems,
    ready_replicas,
    replica_failure,
    rollout_complete,
)

VERIFYING = "Verifying"
"""Ready's reason (and the phase) between a rollout's end and kcp's first answer about it."""


@dataclass(frozen=True)
class Observation:
    """What the shell saw and decided in one reconcile pass."""

    deployment: JSON | None
    error: str | None = None
    error_reason: str = "InvalidSpec"
    waiting: str | None = None
    waiting_reason: str = WAITING_FOR_ROOT_SHARD
    dropped_args: list[str] = field(default_factory=list)
    unused_refs: list[str] = field(default_factory=list)
    extra_conditions: list[Condition] = field(default_factory=list)
    apply_errors: list[str] = field(default_factory=list)
    missing_secrets: list[str] = field(default_factory=list)
    missing_keys: list[str] = field(default_factory=list)
    pods: list[JSON] = field(default_factory=list)
    storage: Storage = Storage.CLAIM
    claim: JSON | None = None
    """The live PersistentVolumeClaim of the shard's data, if any."""
    storage_problems: list[tuple[str, str]] = field(default_factory=list)
    pki_problems: list[tuple[str, str]] = field(default_factory=list)
    """What kept the operator from issuing a certificate (reason, message)."""
    certificates: list[JSON] = field(default_factory=list)
    """``status.certificates``: the issued Secrets and when each expires."""
    health: Health | None = None
    """What kcp answered (:mod:`kcp_shard_operator.core.shard.health`); None while rolling out."""
    awaiting_kcp: bool = False
    """The rollout is complete and kcp, asked about it, has not answered since."""
    missing_children: list[str] = field(default_factory=list)
    """The children that serve the shard beside its Deployment (its Service, its claim) that
    do not exist after the pass's writes, as "kind name": a rolled-out shard missing one is
    neither Ready nor as expected."""


def _problems(seen: Observation) -> list[tuple[str, str]]:
    """(reason, message) of everything that keeps the shard from its desired state."""
    found: list[tuple[str, str]] = []
    if seen.error:
        found.append((seen.error_reason, seen.error))
    found += [("ApplyFailed", error) for error in seen.apply_errors]
    if seen.missing_children and rollout_complete(seen.deployment):
        found.append((CHILD_NOT_FOUND, _not_found(seen.missing_children)))
    found += seen.storage_problems
    found += seen.pki_problems
    if seen.missing_secrets:
        found.append(
            (
                "SecretNotFound",
                "Secret(s) referenced by the spec not found: " + ", ".join(seen.missing_secrets),
            )
        )
    found += [("SecretKeyNotFound", problem) for problem in seen.missing_keys]
    failure = replica_failure(seen.deployment)
    if failure:
        found.append(("ReplicaFailure", failure))
    found += [("PodsNotRunning", problem) for problem in pod_problems(seen.pods)]
    stalled = deadline_exceeded(seen.deployment)
    if stalled:
        found.append(("ProgressDeadlineExceeded", stalled))
    return found


def _was_ready(shard: Shard) -> bool:
    """Whether the status already says Ready: after an operator restart the last answer
    stands until kcp is asked again; only a rollout this process saw waits for a new one."""
    before = condition(shard.status, READY) or {}
    return before.get("status") == "True"


def _not_found(children: list[str]) -> str:
    return f"{', '.join(children)} not found: the shard is not served as it should be"


def conditions_for(shard: Shard, seen: Observation) -> tuple[str, list[Condition]]:
    """The phase and conditions of ``shard`` given what was observed."""
    deployment = seen.deployment
    running = deployed_version(deployment)
    complete = rollout_complete(deployment)
    ready_replicas = (deployment or {}).get("status", {}).get("readyReplicas", 0)
    desired = shard.spec.replicas
    health = seen.health
    problems = (health.problems if health else []) + _problems(seen)
    verifying = complete and seen.awaiting_kcp and not _was_ready(shard)

    if complete and seen.missing_children:
        ready = Condition(READY, False, CHILD_NOT_FOUND, _not_found(seen.missing_children))
    elif complete and health and health.not_ready:
        ready = Condition(READY, False, *health.not_ready)
    elif verifying:
        ready = Condition(
            READY,
            False,
            VERIFYING,
            f"kcp {running} rolled out on {ready_replicas}/{desired} replicas; waiting for "
            "kcp's first answer since (its /readyz and the UID of its data)",
        )
    elif complete:
        ready = Condition(
            READY,
            True,
            "RolledOut",
            f"kcp {running} ready on {ready_replicas}/{desired} replicas{ready_note(health)}",
        )
    elif deployment is None:
        ready = Condition(READY, False, "NoDeployment", "the shard's Deployment does not exist yet")
    else:
        ready = Condition(READY, False, "RollingOut", f"{ready_replicas}/{desired} replicas ready")

    progress = Progress.of(
        shard.spec.version,
        deployment,
        error=(seen.error_reason, seen.error) if seen.error else None,
        waiting=(seen.waiting_reason, seen.waiting) if seen.waiting else None,
    )
    progressing = progressing_condition(progress)
    degraded = degraded_condition(problems)

    dropped = seen.dropped_args + [f"{ref} (unused)" for ref in seen.unused_refs]
    if dropped:
        flag_cond = Condition(
            DEPRECATED_FLAG_DROPPED,
            True,
            "IgnoredByKcpVersion",
            f"kcp {shard.spec.version} ignores these deprecated flags or settings "
            "(kcp-shard-operator migrate-values --explain): " + ", ".join(dropped),
        )
    else:
        flag_cond = Condition(DEPRECATED_FLAG_DROPPED, False, "NothingDropped", "nothing dropped")

    phase = phase_of(progress, bool(degraded.status))
    if verifying and phase == READY:
        phase = VERIFYING
    checked = (
        [Condition(DATA_VERIFIED, health.verified, health.reason, health.message)] if health else []
    )
    conditions = [ready, progressing, degraded, flag_cond, durability(shard, seen), *checked]
    return phase, [*conditions, *seen.extra_conditions]


def durability(shard: Shard, seen: Observation) -> Condition:
    """Whether the shard's data outlives its pods, and where it is kept."""
    if seen.storage is Storage.EXTERNAL_ETCD:
        return Condition(
            DATA_DURABLE,
            True,
            "ExternalEtcd",
            "kcp keeps its data in etcd at " + ",".join(shard.spec.etcd.endpoints),
        )
    if seen.storage is Storage.EPHEMERAL:
        return Condition(
            DATA_DURABLE,
            False,
            "Ephemeral",
            "spec.storage.ephemeral is true: kcp's embedded etcd is on an emptyDir, so every "
            "workspace of this shard is lost whenever its pod is replaced",
        )
    if seen.storage is Storage.KEPT_EMPTY_DIR:
        return Condition(
            DATA_DURABLE,
            False,
            "EmptyDirKept",
            "this shard's Deployment keeps kcp's embedded etcd on an emptyDir (made by an "
            "older operator, or while spec.storage.ephemeral was true), which loses every "
            "workspace whenever the pod is replaced; it is kept so as not to start kcp empty "
            "now. Set spec.storage.ephemeral to false to move it "
            "to a PersistentVolumeClaim (kcp then starts once on an empty etcd: back up its "
            "workspaces first), or to true to keep the emptyDir",
        )
    name = claim_name(shard)
    phase = ((seen.claim or {}).get("status") or {}).get("phase")
    if phase == "Bound":
        size = ((seen.claim or {}).get("status") or {}).get("capacity", {}).get("storage", "")
        return Condition(
            DATA_DURABLE,
            True,
            "ClaimBound",
            f"kcp's embedded etcd is on PersistentVolumeClaim {name} ({size})".replace(" ()", ""),
        )
    return Condition(
        DATA_DURABLE,
        False,
        "ClaimNotBound",
        f"PersistentVolumeClaim {name} is {phase or 'not created yet'}",
    )


def shard_status(shard: Shard, seen: Observation, now: str) -> JSON:
    """The full status to write."""
    phase, conditions = conditions_for(shard, seen)
    status = object_status(shard, seen.deployment, phase, conditions, seen.certificates, now)
    status["readyReplicas"] = ready_replicas(seen.deployment)
    data_uid = (seen.health and seen.health.data_uid) or (shard.status or {}).get("dataUID")
    if data_uid:
        status["dataUID"] = data_uid
    return bookkeeping(shard.spec.backup, status, shard.status, now)
