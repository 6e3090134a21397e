from __future__ import annotations

from typing import Any

import pytest

from kcp_shard_operator.core.api.meta import VERSION_ANNOTATION
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.shard.health import Health
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.shard.status import Observation, shard_status
from kcp_shard_operator.core.status.conditions import condition, invalid_status
from kcp_shard_operator.core.status.deployments import pod_problems, rollout_complete
from kcp_shard_operator.core.status.events import change_event, events_between
from tests.conftest import make, shard_object

NOW = "2026-12-02T10:00:00Z"
LATER = "2026-12-02T11:00:00Z"


def deployment(version: str = "0.34.0", desired: int = 1, **status: Any) -> JSON:
    full = {
        "observedGeneration": 2,
        "replicas": desired,
        "updatedReplicas": desired,
        "availableReplicas": desired,
        "readyReplicas": desired,
    }
    full.update(status)
    return {
        "metadata": {"generation": 2},
        "spec": {
            "replicas": desired,
            "template": {"metadata": {"annotations": {VERSION_ANNOTATION: version}}},
        },
        "status": full,
    }


@pytest.mark.parametrize(
    ("status", "complete"),
    [
        ({}, True),
        ({"observedGeneration": 1}, False),
        ({"updatedReplicas": 0}, False),
        ({"availableReplicas": 0}, False),
        ({"replicas": 2}, False),
    ],
)
def test_rollout_complete(status: dict[str, Any], complete: bool) -> None:
    assert rollout_complete(deployment(**status)) is complete


def test_rollout_complete_without_deployment() -> None:
    assert not rollout_complete(None)


def status_of(shard: Shard, seen: Observation, now: str = NOW) -> JSON:
    return shard_status(shard, seen, now)


@pytest.mark.parametrize(
    ("seen", "phase", "ready", "progressing_reason", "degraded"),
    [
        (Observation(deployment=None), "Pending", "False", "RollingOut", "False"),
        (Observation(deployment=deployment()), "Ready", "True", "Complete", "False"),
        (
            Observation(deployment=deployment(updatedReplicas=0)),
            "Progressing",
            "False",
            "RollingOut",
            "False",
        ),
        (
            Observation(deployment=deployment("0.32.3"), waiting="root shard runs 0.32.3"),
            "WaitingForRootShard",
            "True",
            "WaitingForRootShard",
            "False",
        ),
        (
            Observation(deployment=None, error="bad", error_reason="RootShardNotFound"),
            "Degraded",
            "False",
            "RootShardNotFound",
            "True",
        ),
    ],
)
def test_phase_and_conditions(
    seen: Observation, phase: str, ready: str, progressing_reason: str, degraded: str
) -> None:
    status = status_of(make(shard_object()), seen)
    assert status["phase"] == phase
    assert status["observedGeneration"] == 1
    assert condition(status, "Ready")["status"] == ready  # type: ignore[index]
    assert condition(status, "Progressing")["reason"] == progressing_reason  # type: ignore[index]
    assert condition(status, "Degraded")["status"] == degraded  # type: ignore[index]
    assert all(c["observedGeneration"] == 1 for c in status["conditions"])


def test_version_is_only_written_when_rolled_out() -> None:
    shard = make(shard_object())
    assert "version" not in status_of(shard, Observation(deployment=deployment(updatedReplicas=0)))
    assert status_of(shard, Observation(deployment=deployment()))["version"] == "0.34.0"


def test_version_keeps_last_rolled_out_during_a_rollout() -> None:
    obj = shard_object()
    obj["status"] = {"version": "0.32.3"}
    status = status_of(make(obj), Observation(deployment=deployment(updatedReplicas=0)))
    assert status["version"] == "0.32.3"


def test_stalled_rollout_is_degraded() -> None:
    stalled = deployment(
        updatedReplicas=0,
        conditions=[{"type": "Progressing", "reason": "ProgressDeadlineExceeded", "message": "x"}],
    )
    status = status_of(make(shard_object()), Observation(deployment=stalled))
    assert condition(status, "Degraded")["reason"] == "ProgressDeadlineExceeded"  # type: ignore[index]


def test_dropped_flag_condition() -> None:
    seen = Observation(
        deployment=deployment(),
        dropped_args=["--root-shard-kubeconfig-file /x"],
        unused_refs=["spec.rootShardKubeconfigSecretRef"],
    )
    cond = condition(status_of(make(shard_object()), seen), "DeprecatedFlagDropped")
    assert cond is not None
    assert cond["status"] == "True"
    assert "--root-shard-kubeconfig-file /x" in cond["message"]
    assert "spec.rootShardKubeconfigSecretRef (unused)" in cond["message"]


def test_transition_time_is_kept_while_status_is_unchanged() -> None:
    obj = shard_object()
    obj["status"] = status_of(make(obj), Observation(deployment=deployment()), NOW)
    again = status_of(make(obj), Observation(deployment=deployment()), LATER)
    assert again == obj["status"]
    changed = status_of(make(obj), Observation(deployment=None), LATER)
    assert condition(changed, "Ready")["lastTransitionTime"] == LATER  # type: ignore[index]
    assert condition(changed, "Degraded")["lastTransitionTime"] == NOW  # type: ignore[index]


def test_foreign_conditions_are_preserved() -> None:
    obj = shard_object()
    foreign = {"type": "IdentityCacheCleaned", "status": "True", "reason": "Deleted"}
    obj["status"] = {"conditions": [foreign]}
    status = status_of(make(obj), Observation(deployment=deployment()))
    assert foreign in status["conditions"]


def test_invalid_status() -> None:
    status = invalid_status({"version": "0.32.3"}, 4, "spec.version: bad", NOW)
    assert status["phase"] == "Degraded"
    assert status["version"] == "0.32.3"
    degraded = condition(status, "Degraded")
    assert degraded == {
        "type": "Degraded",
        "status": "True",
        "reason": "InvalidSpec",
        "message": "spec.version: bad",
        "observedGeneration": 4,
        "lastTransitionTime": NOW,
    }


def test_events_between() -> None:
    shard = make(shard_object())
    waiting = status_of(shard, Observation(deployment=None, waiting="root runs 0.32.3"))
    ready = status_of(shard, Observation(deployment=deployment()))
    assert [(e.type, e.reason) for e in events_between(None, waiting)] == [
        ("Normal", "WaitingForRootShard")
    ]
    assert [(e.type, e.reason) for e in events_between(waiting, ready)] == [("Normal", "RolledOut")]
    rolling = status_of(shard, Observation(deployment=deployment(updatedReplicas=0)))
    assert (condition(rolling, "Progressing") or {}).get("reason") == "RollingOut"
    assert events_between(None, rolling) == []
    assert events_between(ready, rolling) == []
    assert events_between(ready, ready) == []
    dropped = status_of(shard, Observation(deployment=deployment(), dropped_args=["--x"]))
    assert [(e.type, e.reason) for e in events_between(ready, dropped)] == [
        ("Warning", "IgnoredByKcpVersion")
    ]


UNSCHEDULABLE = {
    "metadata": {"name": "root-kcp-1"},
    "status": {
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available",
            }
        ]
    },
}
PULL_FAILS = {
    "metadata": {"name": "root-kcp-2"},
    "status": {
        "containerStatuses": [
            {"name": "kcp", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "m"}}}
        ]
    },
}
REPLICA_FAILURE: dict[str, Any] = {
    "conditions": [
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "quota"}
    ]
}


DEADLINE: dict[str, Any] = {
    "conditions": [
        {"type": "Progressing", "reason": "ProgressDeadlineExceeded", "message": "too slow"}
    ]
}
UNVERIFIED = Health(
    None, "SecretNotFound", "admin Secret not found", [("SecretNotFound", "admin Secret not found")]
)


@pytest.mark.parametrize(
    ("seen", "reason", "words"),
    [
        (
            Observation(deployment(), apply_errors=["Deployment root-kcp: 422 Invalid: bad"]),
            "ApplyFailed",
            "Deployment root-kcp: 422 Invalid: bad",
        ),
        (
            Observation(deployment(), missing_secrets=["ca", "tls"]),
            "SecretNotFound",
            "not found: ca, tls",
        ),
        (
            Observation(deployment(availableReplicas=0), pods=[UNSCHEDULABLE, PULL_FAILS]),
            "PodsNotRunning",
            "pod root-kcp-1 cannot be scheduled: 0/3 nodes are available; "
            "pod root-kcp-2 container kcp: ImagePullBackOff: m",
        ),
        (
            Observation(deployment(availableReplicas=0, **REPLICA_FAILURE)),
            "ReplicaFailure",
            "pods cannot be created: quota",
        ),
        (
            Observation(deployment(availableReplicas=0, **DEADLINE)),
            "ProgressDeadlineExceeded",
            "too slow",
        ),
        (
            Observation(deployment(), storage_problems=[("StorageClassNotFound", "no class")]),
            "StorageClassNotFound",
            "no class",
        ),
        (Observation(deployment(), health=UNVERIFIED), "SecretNotFound", "admin Secret not found"),
        (
            Observation(None, waiting="root not rolled out", missing_secrets=["cache"]),
            "SecretNotFound",
            "not found: cache",
        ),
    ],
)
def test_every_problem_makes_the_shard_degraded_and_its_phase_says_so(
    seen: Observation, reason: str, words: str
) -> None:
    status = shard_status(make(shard_object()), seen, NOW)
    degraded = condition(status, "Degraded")
    assert degraded is not None
    assert (degraded["status"], degraded["reason"]) == ("True", reason)
    assert words in degraded["message"]
    assert status["phase"] == "Degraded"
    events = events_between(None, status)
    assert ("Warning", reason) in [(e.type, e.reason) for e in events]


def test_change_events_tell_drift_from_spec_changes() -> None:
    drift = change_event("Deployment", "root-kcp", "Drift", 3)
    spec = change_event("Deployment", "root-kcp", "SpecChanged", 3)
    assert drift is not None
    assert spec is not None
    assert (drift.reason, spec.reason) == ("Updated", "Configured")
    assert "brought back to the rendered state" in drift.message
    assert "generation 3" in spec.message
    assert change_event("Service", "root-kcp", "Created", 1) is None


def test_refused_downgrade_is_degraded_while_the_running_version_serves() -> None:
    obj = shard_object(version="0.27.1")
    obj["status"] = {"version": "0.28.0"}
    shard = make(obj)
    ready = status_of(shard, Observation(deployment=deployment("0.28.0")))
    seen = Observation(
        deployment=deployment("0.28.0"), error="stays at 0.28.0", error_reason="DowngradeRefused"
    )
    refused = status_of(shard, seen)
    assert refused["phase"] == "Degraded"
    assert refused["version"] == "0.28.0"
    assert condition(refused, "Ready")["status"] == "True"  # type: ignore[index]
    assert condition(refused, "Progressing")["status"] == "False"  # type: ignore[index]
    assert condition(refused, "Degraded")["reason"] == "DowngradeRefused"  # type: ignore[index]
    assert [(e.type, e.reason) for e in events_between(ready, refused)] == [
        ("Warning", "DowngradeRefused")
    ]
    assert events_between(refused, refused) == []


@pytest.mark.parametrize(
    ("reason", "kind"),
    [("Unauthorized", "Warning"), ("Forbidden", "Warning"), ("OlderVersion", None)],
)
def test_a_refused_cleanup_is_a_warning_event(reason: str, kind: str | None) -> None:
    cleaned = {"type": "IdentityCacheCleaned", "status": "False", "reason": reason, "message": "m"}
    events = events_between(None, {"conditions": [cleaned]})
    assert [(e.type, e.reason) for e in events] == ([(kind, reason)] if kind else [])


def _progressing(status: str, reason: str, version: str = "0.34.0") -> JSON:
    cond = {"type": "Progressing", "status": status, "reason": reason, "message": "m"}
    return {"version": version, "conditions": [cond]}


@pytest.mark.parametrize(
    ("before", "after", "reasons"),
    [
        (_progressing("True", "RollingOut"), _progressing("False", "Complete"), ["RolledOut"]),
        (_progressing("False", "Complete"), _progressing("False", "Complete"), []),
        (_progressing("True", "RollingOut"), _progressing("True", "RollingOut"), []),
        (
            _progressing("True", "RollingOut", "0.33.0"),
            _progressing("False", "Complete"),
            ["RolledOut"],
        ),
    ],
)
def test_a_finished_rollout_is_rolled_out_whether_or_not_the_version_changed(
    before: JSON, after: JSON, reasons: list[str]
) -> None:
    assert [event.reason for event in events_between(before, after)] == reasons


def test_ready_is_never_said_over_a_child_that_does_not_exist() -> None:
    shard = make(shard_object())
    seen = Observation(deployment(), missing_children=["Service root-kcp"])
    found = status_of(shard, seen)
    ready = condition(found, "Ready") or {}
    assert (ready["status"], ready["reason"]) == ("False", "ChildNotFound")
    assert ready["message"].startswith("Service root-kcp not found")
    assert found["phase"] != "Ready"
    served = status_of(shard, Observation(deployment()))
    assert (condition(served, "Ready") or {}).get("status") == "True"


def test_a_pod_waiting_for_its_claim_to_bind_is_no_problem() -> None:
    """The scheduler holds a pod back while its new claim is provisioned: no fault to page on
    (a claim that cannot be bound is reported by the storage checks)."""
    waiting = {
        "metadata": {"name": "root-kcp-1"},
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/4 nodes are available: pod has unbound immediate "
                    "PersistentVolumeClaims. preemption: 0/4 nodes are available: 4 Preemption "
                    "is not helpful for scheduling.",
                }
            ]
        },
    }
    assert pod_problems([waiting]) == []
    assert pod_problems([UNSCHEDULABLE]) == [
        "pod root-kcp-1 cannot be scheduled: 0/3 nodes are available"
    ]
