"""What kcp's answers about a shard mean: DataVerified, Degraded's problems, Ready's verdict."""

from __future__ import annotations

from typing import Any

import pytest

from kcp_shard_operator.core.shard.health import (
    ACCEPT_DATA_UID_ANNOTATION,
    Failure,
    NotRegistered,
    Probe,
    Registered,
    Registration,
    Subject,
    assess,
    interpret_data_uid,
    interpret_readyz,
    interpret_registration,
    no_admin_kubeconfig,
)

ROOT = Subject("root", "ns", "root-kcp", recorded_uid="uid-a")
NON_ROOT = Subject("shard-1", "ns", "shard-1-kcp", root="root", recorded_uid="uid-1")
UNREACHABLE = Failure("ShardUnreachable", "cannot reach https://root-kcp:6443: timed out")
NOT_FOUND = {"kind": "Status", "reason": "NotFound", "details": {"name": "shard-1"}}


def registered(uid: str = "reg-1") -> Registered:
    return Registered(uid)


def answered(uid: str, registration: Registration | None = None) -> Probe:
    return Probe(data_uid=uid, registration=registration)


@pytest.mark.parametrize(
    ("subject", "probe", "verified", "reason", "problems", "not_ready", "recorded"),
    [
        # All answers as before: verified.
        (ROOT, answered("uid-a"), True, "Verified", [], None, "uid-a"),
        (NON_ROOT, answered("uid-1", registered()), True, "Verified", [], None, "uid-1"),
        # The first UID seen is recorded.
        (Subject("root", "ns", "root-kcp"), answered("uid-a"), True, "Verified", [], None,
         "uid-a"),
        # Another UID: the data is gone; the recorded UID is kept until restored or accepted.
        (ROOT, answered("uid-b"), False, "DataLost", ["DataLost"], "DataLost", "uid-a"),
        (Subject("root", "ns", "root-kcp", recorded_uid="uid-a", accepted_uid="uid-b"),
         answered("uid-b"), True, "Verified", [], None, "uid-b"),
        (Subject("root", "ns", "root-kcp", recorded_uid="uid-a", accepted_uid="uid-c"),
         answered("uid-b"), False, "DataLost", ["DataLost"], "DataLost", "uid-a"),
        # The root does not list the shard.
        (NON_ROOT, answered("uid-1", NotRegistered()), False, "ShardNotRegistered",
         ["ShardNotRegistered"], "ShardNotRegistered", "uid-1"),
        # The root came back empty (its Shard says DataLost).
        (Subject("shard-1", "ns", "shard-1-kcp", root="root", recorded_uid="uid-1",
                 root_data_lost=True),
         answered("uid-1", registered()), False, "RootDataLost", ["RootDataLost"],
         "RootDataLost", "uid-1"),
        # The registration cannot be checked: Unknown, still Ready.
        (NON_ROOT, answered("uid-1", Failure("NoAdminKubeconfig", "no root kubeconfig")), None,
         "RootNoAdminKubeconfig", [], None, "uid-1"),
        (NON_ROOT, answered("uid-1", UNREACHABLE), None, "RootShardUnreachable", [], None,
         "uid-1"),
        # This shard cannot be asked.
        (ROOT, Probe(failure=no_admin_kubeconfig()), None, "NoAdminKubeconfig", [], None,
         "uid-a"),
        (ROOT, Probe(failure=UNREACHABLE), None, "ShardUnreachable", ["ShardUnreachable"],
         "ShardUnreachable", "uid-a"),
        (ROOT, Probe(failure=Failure("Forbidden", "403")), None, "Forbidden", ["Forbidden"],
         None, "uid-a"),
        (ROOT, Probe(failure=Failure("SecretNotFound", "gone")), None, "SecretNotFound",
         ["SecretNotFound"], None, "uid-a"),
        # kcp says it is not ready.
        (ROOT, Probe(not_ready="etcd"), None, "KcpNotReady", ["KcpNotReady"], "KcpNotReady",
         "uid-a"),
    ],
)  # fmt: skip
def test_the_assessment(
    subject: Subject,
    probe: Probe,
    verified: bool | None,
    reason: str,
    problems: list[str],
    not_ready: str | None,
    recorded: str,
) -> None:
    health = assess(subject, probe)
    assert (health.verified, health.reason) == (verified, reason)
    assert [found for found, _ in health.problems] == problems
    assert (health.not_ready[0] if health.not_ready else None) == not_ready
    assert health.data_uid == recorded


def test_data_lost_says_how_to_restore_or_accept() -> None:
    message = assess(ROOT, answered("uid-b")).message
    assert "uid-a" in message
    assert "Restore the shard's etcd from a backup" in message
    assert f"kubectl annotate shard root -n ns {ACCEPT_DATA_UID_ANNOTATION}=uid-b" in message


def test_a_lost_registration_says_how_kcp_registers_again() -> None:
    message = assess(NON_ROOT, answered("uid-1", NotRegistered())).message
    assert "kubectl rollout restart deployment/shard-1-kcp -n ns" in message


def test_data_loss_comes_before_the_lost_registration() -> None:
    subject = Subject("shard-1", "ns", "shard-1-kcp", root="root", recorded_uid="uid-1",
                      root_data_lost=True)  # fmt: skip
    health = assess(subject, answered("uid-2", NotRegistered()))
    assert [p for p, _ in health.problems] == ["DataLost", "RootDataLost", "ShardNotRegistered"]
    assert health.reason == "DataLost"


@pytest.mark.parametrize(
    ("status", "text", "meaning"),
    [
        (200, "ok", None),
        (500, "[+]ping ok\n[-]etcd failed: reason withheld\n[-]poststarthook/x failed: reason "
         "withheld\nreadyz check failed", "etcd failed: reason withheld, poststarthook/x failed: "
         "reason withheld"),
        (503, "Service Unavailable", "HTTP 503"),
    ],
)  # fmt: skip
def test_readyz_answers(status: int, text: str, meaning: Any) -> None:
    assert interpret_readyz(status, text) == meaning


@pytest.mark.parametrize(
    ("status", "reason", "hint"),
    [
        (401, "Unauthorized", "check its token or client certificate"),
        (403, "Forbidden", "it needs group system:masters on that shard"),
    ],
)
def test_a_refusal_tells_bad_credentials_from_a_missing_permission(
    status: int, reason: str, hint: str
) -> None:
    for found in (
        interpret_readyz(status, "refused"),
        interpret_data_uid(status, None),
        interpret_registration("shard-1", status, None),
    ):
        assert isinstance(found, Failure)
        assert (found.reason, hint in found.message) == (reason, True)


def test_readyz_lists_at_most_three_failed_checks() -> None:
    text = "\n".join(f"[-]check-{n} failed" for n in range(5))
    assert interpret_readyz(500, text) == (
        "check-0 failed, check-1 failed, check-2 failed and 2 more"
    )


@pytest.mark.parametrize(
    ("status", "body", "meaning"),
    [
        (200, {"kind": "LogicalCluster", "metadata": {"name": "cluster", "uid": "u"}}, "u"),
        (200, {"kind": "ConfigMap", "metadata": {"uid": "u"}}, "UnexpectedAnswer"),
        (404, None, "UnexpectedAnswer"),
        (403, {"kind": "Status"}, "Forbidden"),
    ],
)
def test_data_uid_answers(status: int, body: Any, meaning: str) -> None:
    found = interpret_data_uid(status, body)
    assert (found.reason if isinstance(found, Failure) else found) == meaning


@pytest.mark.parametrize(
    ("status", "body", "meaning"),
    [
        (200, {"kind": "Shard", "metadata": {"name": "shard-1", "uid": "r"}}, "Registered"),
        (200, {"kind": "Shard", "metadata": {"name": "other"}}, "Failure"),
        (404, NOT_FOUND, "NotRegistered"),
        (404, {"kind": "Status", "reason": "NotFound", "details": {"name": "x"}}, "Failure"),
        (404, None, "Failure"),
        (401, None, "Failure"),
    ],
)
def test_registration_answers(status: int, body: Any, meaning: str) -> None:
    assert type(interpret_registration("shard-1", status, body)).__name__ == meaning
