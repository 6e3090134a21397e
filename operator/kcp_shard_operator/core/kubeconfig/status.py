"""Kubeconfig status from what a pass did (pure): the Secret, its certificate's expiry, the
bindings made, and the conditions ``Issued``, ``Bound``, ``Ready`` and ``Degraded``."""

from __future__ import annotations

from dataclasses import dataclass, field

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.kubeconfig.access import Problem
from kcp_shard_operator.core.kubeconfig.spec import Kubeconfig
from kcp_shard_operator.core.status.conditions import (
    DEGRADED,
    READY,
    Condition,
    merged_conditions,
)

ISSUED = "Issued"
BOUND = "Bound"
WAITING_REASONS = frozenset({"WorkspaceNotReady", "WorkspaceNotChecked", "TargetNotReady"})
"""What the object waits for: not Degraded (it heals without a change of spec)."""


@dataclass(frozen=True)
class KubeconfigObservation:
    """What one pass over a Kubeconfig found and did."""

    problem: Problem | None = None
    """Why nothing was issued (a field at fault, or what it waits for)."""
    issue_problems: list[tuple[str, str]] = field(default_factory=list)
    secret: str | None = None
    not_after: str | None = None
    server: str | None = None
    bindings: list[JSON] = field(default_factory=list)
    """``status.bindings``: those made and not yet removed."""
    binding_problems: list[Problem] = field(default_factory=list)
    checked: bool = True
    """Whether the operator asked kcp (off with --no-kcp-checks: no workspace check, no
    bindings)."""


def _issued(seen: KubeconfigObservation) -> Condition:
    if seen.problem is not None:
        return Condition(
            ISSUED, False, seen.problem.reason, f"{seen.problem.field}: {seen.problem.message}"
        )
    if seen.issue_problems:
        reason = seen.issue_problems[0][0]
        return Condition(ISSUED, False, reason, "; ".join(text for _, text in seen.issue_problems))
    if seen.secret is None or seen.not_after is None:
        return Condition(ISSUED, False, "NotIssued", "not issued yet")
    return Condition(
        ISSUED,
        True,
        "Issued",
        f"Secret {seen.secret} holds a certificate valid until {seen.not_after}",
    )


def _bound(kubeconfig: Kubeconfig, seen: KubeconfigObservation) -> Condition:
    roles = kubeconfig.spec.cluster_roles
    if seen.binding_problems:
        first = seen.binding_problems[0]
        message = "; ".join(f"{p.field}: {p.message}" for p in seen.binding_problems)
        return Condition(BOUND, False, first.reason, message)
    if not roles:
        return Condition(BOUND, True, "NoClusterRoles", "spec.clusterRoles is empty")
    if not seen.checked:
        return Condition(BOUND, None, "NotVerified", "the operator runs with --no-kcp-checks")
    if seen.problem is not None:
        return Condition(BOUND, None, seen.problem.reason, "nothing is bound before it is issued")
    return Condition(
        BOUND,
        True,
        "Bound",
        f"{', '.join(roles)} bound to {kubeconfig.spec.username} in {kubeconfig.spec.workspace}",
    )


def kubeconfig_status(kubeconfig: Kubeconfig, seen: KubeconfigObservation, now: str) -> JSON:
    issued, bound = _issued(seen), _bound(kubeconfig, seen)
    ready = issued.status is True and bound.status is not False
    problems = [c for c in (issued, bound) if c.status is False and c.reason not in WAITING_REASONS]
    conditions = [
        issued,
        bound,
        Condition(
            READY,
            ready,
            "Ready" if ready else (issued if issued.status is not True else bound).reason,
            "the kubeconfig is issued and its bindings made"
            if ready
            else (issued if issued.status is not True else bound).message,
        ),
        Condition(
            DEGRADED,
            bool(problems),
            problems[0].reason if problems else "AsExpected",
            "; ".join(c.message for c in problems) if problems else "no problem found",
        ),
    ]
    phase = "Ready" if ready else ("Degraded" if problems else "Pending")
    status: JSON = {
        "observedGeneration": kubeconfig.generation,
        "phase": phase,
        "bindings": seen.bindings,
        "conditions": merged_conditions(
            kubeconfig.status or {}, conditions, kubeconfig.generation, now
        ),
    }
    if seen.secret is not None:
        status["secret"] = seen.secret
    if seen.not_after is not None:
        status["notAfter"] = seen.not_after
    if seen.server is not None:
        status["server"] = seen.server
    return status
