"""What a child Deployment and its pods say about a rollout (pure)."""

from __future__ import annotations

from typing import Any

from kcp_shard_operator.constants import NAMESPACE_TERMINATING
from kcp_shard_operator.core.api.meta import VERSION_ANNOTATION
from kcp_shard_operator.core.api.model import JSON


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


def deadline_exceeded(deployment: JSON | None) -> str | None:
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


def replica_failure(deployment: JSON | None) -> str | None:
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


SETTLE_SECONDS = 30.0
"""After a rollout, how long a Service that cannot be reached is taken for the Service catching
up with the new pods (its endpoints, the cluster DNS) rather than reported."""
SETTLE_RETRY_SECONDS = 3.0
"""How soon what asks through it asks again meanwhile."""
MAX_REPORTED_PODS = 3
WAITING_FOR_CLAIMS = "pod has unbound immediate PersistentVolumeClaims"
"""The scheduler's word for a pod whose claim is not bound yet: the claim's provisioning is
under way (a Pending claim that cannot be bound is reported as such, by the storage checks)."""


def pod_problems(pods: list[JSON]) -> list[str]:
    """Why pods of the shard do not run: unschedulable (other than waiting for their claims to
    bind), image or start-up failures."""
    problems: list[str] = []
    for pod in sorted(pods, key=lambda p: str(p.get("metadata", {}).get("name", ""))):
        name = pod.get("metadata", {}).get("name", "")
        status = pod.get("status") or {}
        for cond in status.get("conditions") or []:
            message = str(cond.get("message", ""))
            if (
                cond.get("type") == "PodScheduled"
                and cond.get("reason") == "Unschedulable"
                and WAITING_FOR_CLAIMS not in message
            ):
                problems.append(f"pod {name} cannot be scheduled: {message}")
        for container in status.get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK_CONTAINER_REASONS:
                problems.append(
                    f"pod {name} container {container.get('name')}: {waiting['reason']}: "
                    f"{waiting.get('message', '')}".rstrip(": ")
                )
    return problems[:MAX_REPORTED_PODS]


def ready_replicas(deployment: JSON | None) -> int:
    return int(((deployment or {}).get("status") or {}).get("readyReplicas", 0))
