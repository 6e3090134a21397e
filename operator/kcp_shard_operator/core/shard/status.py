"""Shard status from observed state (pure): conditions, phase, running version."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kcp_shard_operator.constants import NAMESPACE_TERMINATING
from kcp_shard_operator.core.api.meta import VERSION_ANNOTATION
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.api.objects import KcpObject
from kcp_shard_operator.core.shard.claim import Storage, claim_name
from kcp_shard_operator.core.shard.health import DATA_VERIFIED, Health, ready_note
from kcp_shard_operator.core.shard.spec import Shard

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
class Condition:
    type: str
    status: bool | None
    """None: Unknown."""
    reason: str
    message: str


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


def deployed_version(deployment: JSON | None) -> str | None:
    """The kcp version in the Deployment's pod template, if any."""
    if not deployment:
        return None
    template = deployment.get("spec", {}).get("template", {})
    value = (template.get("metadata", {}).get("annotations") or {}).get(VERSION_ANNOTATION)
    return str(value) if value else None


def rollout_complete(deployment: JSON | None) -> bool:
    """Every replica runs the current template and is available, as the controller saw it."""
    if not deployment:
        return False
    desired = deployment.get("spec", {}).get("replicas", 1)
    status: dict[str, Any] = deployment.get("status") or {}
    generation = deployment.get("metadata", {}).get("generation", 0)
    return bool(
        status.get("observedGeneration", -1) >= generation
        and status.get("updatedReplicas", 0) == desired
        and status.get("replicas", 0) == desired
        and status.get("availableReplicas", 0) == desired
    )


def _deadline_exceeded(deployment: JSON | None) -> str | None:
    for cond in (deployment or {}).get("status", {}).get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return str(cond.get("message", "progress deadline exceeded"))
    return None


DEPLOYMENT_REVISION = "deployment.kubernetes.io/revision"
"""Set by the Deployment controller: a new one for every new pod template rolled out."""


def deployment_revision(deployment: JSON | None) -> str | None:
    """The revision the Deployment controller gave the Deployment's pod template, if any."""
    annotations = ((deployment or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(DEPLOYMENT_REVISION)
    return str(value) if value is not None else None


def pods_refused_by_a_terminating_namespace(deployment: JSON | None) -> bool:
    """The Deployment's ReplicaFailure says its namespace is being deleted: the pods are
    refused because everything in it is going away, not because of the Shard."""
    for cond in (deployment or {}).get("status", {}).get("conditions") or []:
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return NAMESPACE_TERMINATING in str(cond.get("message", ""))
    return False


def _replica_failure(deployment: JSON | None) -> str | None:
    """The Deployment's ReplicaFailure (its ReplicaSet cannot create pods: quota, admission)."""
    for cond in (deployment or {}).get("status", {}).get("conditions") or []:
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return f"pods cannot be created: {cond.get('message') or cond.get('reason')}"
    return None


STUCK_CONTAINER_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
MAX_REPORTED_PODS = 3


def pod_problems(pods: list[JSON]) -> list[str]:
    """Why pods of the shard do not run: unschedulable, image or start-up failures."""
    problems: list[str] = []
    for pod in sorted(pods, key=lambda p: str(p.get("metadata", {}).get("name", ""))):
        name = pod.get("metadata", {}).get("name", "")
        status = pod.get("status") or {}
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                problems.append(f"pod {name} cannot be scheduled: {cond.get('message', '')}")
        for container in status.get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK_CONTAINER_REASONS:
                problems.append(
                    f"pod {name} container {container.get('name')}: {waiting['reason']}: "
                    f"{waiting.get('message', '')}".rstrip(": ")
                )
    return problems[:MAX_REPORTED_PODS]


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


def _problems(seen: Observation) -> list[tuple[str, str]]:
    """(reason, message) of everything that keeps the shard from its desired state."""
    found: list[tuple[str, str]] = []
    if seen.error:
        found.append((seen.error_reason, seen.error))
    found += [("ApplyFailed", error) for error in seen.apply_errors]
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
    replica_failure = _replica_failure(seen.deployment)
    if replica_failure:
        found.append(("ReplicaFailure", replica_failure))
    found += [("PodsNotRunning", problem) for problem in pod_problems(seen.pods)]
    stalled = _deadline_exceeded(seen.deployment)
    if stalled:
        found.append(("ProgressDeadlineExceeded", stalled))
    return found


def conditions_for(shard: Shard, seen: Observation) -> tuple[str, list[Condition]]:
    """The phase and conditions of ``shard`` given what was observed."""
    deployment = seen.deployment
    running = deployed_version(deployment)
    complete = rollout_complete(deployment)
    ready_replicas = (deployment or {}).get("status", {}).get("readyReplicas", 0)
    desired = shard.spec.replicas
    health = seen.health
    problems = (health.problems if health else []) + _problems(seen)

    if complete and health and health.not_ready:
        ready = Condition(READY, False, *health.not_ready)
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

    progress = Progress(
        wanted=shard.spec.version,
        running=running,
        complete=complete,
        deployed=deployment is not None,
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


def ready_replicas(deployment: JSON | None) -> int:
    return int(((deployment or {}).get("status") or {}).get("readyReplicas", 0))


def shard_status(shard: Shard, seen: Observation, now: str) -> JSON:
    """The full status to write."""
    phase, conditions = conditions_for(shard, seen)
    status = object_status(shard, seen.deployment, phase, conditions, seen.certificates, now)
    status["readyReplicas"] = ready_replicas(seen.deployment)
    data_uid = (seen.health and seen.health.data_uid) or (shard.status or {}).get("dataUID")
    if data_uid:
        status["dataUID"] = data_uid
    return status


def condition(status: JSON | None, type_: str) -> JSON | None:
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


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
