"""One reconcile pass against an in-memory API server: what it writes, waits for, reports."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from kcp_shard_operator.controller.context import Context
from kcp_shard_operator.controller.passes import CONFLICTED_PASSES_REPORTED
from kcp_shard_operator.controller.writes import REPLACE_ATTEMPTS
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.rollout.drift import contains
from kcp_shard_operator.core.shard.pki import with_issued
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.status.events import Event
from kcp_shard_operator.identitycache.policy import RETRY_BASE_SECONDS, Outcome, Result
from kcp_shard_operator.kube.client import RefusedError, UnreachableError, namespace_terminating
from tests.conftest import NO_PKI, RELEASE, make, non_root_object, shard_object
from tests.fake_kube import (
    SECRETS,
    Effects,
    FakeKube,
    conflict,
    context,
    refused,
    respec,
    rolled_out,
    run,
    secret,
    settle,
    watched,
)


def status(kube: FakeKube, name: str) -> JSON:
    found: JSON = kube.objects[("Shard", "ns", name)].get("status") or {}
    return found


def conditions(kube: FakeKube, name: str) -> dict[str, JSON]:
    """The conditions of Shard ``name`` by type, as the API server holds them."""
    return {cond["type"]: cond for cond in status(kube, name).get("conditions") or []}


def condition(kube: FakeKube, name: str, type_: str) -> tuple[str, str]:
    found = conditions(kube, name)[type_]
    return found["status"], found["reason"]


def test_a_new_shard_gets_its_children_then_a_status_and_rolls_out() -> None:
    kube = FakeKube(shard_object())
    effects = Effects()
    ctx = context(kube, effects)
    run(ctx, "root")
    issued = [  # the installation's, then the Shard's own
        "root-kcp-ca",
        "root-kcp-client-ca",
        "root-kcp-service-account-key",
        "root-kcp-serving",
        "root-kcp-admin-kubeconfig",
        "root-kcp-logical-cluster-admin-kubeconfig",
    ]
    assert kube.writes == [
        *(("create", "Secret", name) for name in issued),
        ("apply", "Service", "root-kcp"),
        ("apply", "PersistentVolumeClaim", "root-kcp-data"),
        ("apply", "Deployment", "root-kcp"),
        ("status", "Shard", "root"),
    ]
    filled = with_issued(make(shard_object()), None, service_account_key=True)
    revisions = {
        name: kube.objects[("Secret", "ns", name)]["metadata"]["resourceVersion"]
        for name in filled.spec.secret_names
    }
    for child in render_shard(filled, None, RELEASE, revisions).objects:
        assert contains(kube.objects[(child["kind"], "ns", child["metadata"]["name"])], child)
    assert status(kube, "root")["phase"] == "Progressing"
    assert condition(kube, "root", "Ready") == ("False", "RollingOut")
    assert [event.reason for _, event in effects.events] == ["CertificateIssued"]
    assert all(name in effects.events[0][1].message for name in issued)
    # Every issued Secret but the service-account key, which does not expire.
    expiring = sorted(set(issued) - {"root-kcp-service-account-key"})
    assert [entry["secret"] for entry in status(kube, "root")["certificates"]] == expiring

    watched(ctx, kube.roll_out("ns", "root-kcp"))
    effects.events.clear()
    run(ctx, "root")
    assert kube.writes[len(issued) + 4 :] == [("status", "Shard", "root")]
    assert (status(kube, "root")["phase"], status(kube, "root")["version"]) == ("Ready", "0.34.0")
    assert [event.reason for _, event in effects.events] == ["RolledOut"]


def test_a_pass_over_an_in_sync_shard_calls_no_api() -> None:
    kube = FakeKube(shard_object(), non_root_object(), *SECRETS)
    ctx = context(kube)
    settle(ctx, kube, "root", "shard-1")
    assert condition(kube, "shard-1", "Degraded") == ("False", "AsExpected")
    calls = len(kube.calls)
    run(ctx, "root", "shard-1", "root")
    assert kube.calls[calls:] == []


def test_only_the_changed_child_is_written_and_the_change_is_an_event() -> None:
    kube = FakeKube(shard_object())
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    writes = len(kube.writes)
    respec(ctx, kube, "root", version="0.34.1")
    run(ctx, "root")
    assert kube.writes[writes:] == [
        ("apply", "Deployment", "root-kcp"),
        ("status", "Shard", "root"),
    ]
    assert effects.events[-1] == (
        "root",
        Event(
            "Normal", "Configured", "Deployment root-kcp updated to the Shard's spec (generation 2)"
        ),
    )
    assert condition(kube, "root", "Progressing") == ("True", "RollingOut")


HA: dict[str, Any] = {"replicas": 3, "etcd": {"endpoints": ["https://etcd:2379"]}}
"""Three replicas on an external etcd: the Deployment changes and a PodDisruptionBudget is new."""

ROOT_AT = {
    "missing": None,
    "not rolled out": shard_object(),
    "older": rolled_out(shard_object(version="0.33.0")),
    "same": rolled_out(shard_object()),
}


@pytest.mark.parametrize(
    ("root", "children", "phase", "progressing"),
    [
        ("missing", False, "Degraded", ("False", "RootShardNotFound")),
        ("not rolled out", False, "WaitingForRootShard", ("False", "WaitingForRootShard")),
        ("older", False, "WaitingForRootShard", ("False", "WaitingForRootShard")),
        ("same", True, "Progressing", ("True", "RollingOut")),
    ],
)
def test_a_non_root_shard_waits_for_its_root(
    root: str, children: bool, phase: str, progressing: tuple[str, str]
) -> None:
    found = ROOT_AT[root]
    kube = FakeKube(non_root_object(), *SECRETS, *([found] if found else []))
    ctx = context(kube)
    run(ctx, "shard-1")
    written = {kind for op, kind, _ in kube.writes if op == "apply"}
    assert written == ({"Service", "PersistentVolumeClaim", "Deployment"} if children else set())
    assert status(kube, "shard-1")["phase"] == phase
    assert condition(kube, "shard-1", "Progressing") == progressing


def test_a_missing_root_and_a_missing_cache_secret_are_both_reported() -> None:
    kube = FakeKube(non_root_object(), secret("root-admin"))
    ctx = context(kube)
    run(ctx, "shard-1")
    assert kube.writes == [("status", "Shard", "shard-1")]
    assert status(kube, "shard-1")["phase"] == "Degraded"
    degraded = conditions(kube, "shard-1")["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "RootShardNotFound")
    assert degraded["message"] == (
        "root Shard 'root' not found in ns; Secret(s) referenced by the spec not found: cache"
    )


def test_a_refused_write_is_degraded_apply_failed_and_the_other_children_still_written() -> None:
    kube = FakeKube(shard_object())
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    writes = len(kube.writes)
    kube.fail("apply", "Deployment", refused(), refused())
    kube.fail("replace", "Deployment", refused())
    respec(ctx, kube, "root", **HA)
    run(ctx, "root")
    assert kube.writes[writes:] == [
        ("apply", "Deployment", "root-kcp"),
        ("apply", "Deployment", "root-kcp"),
        ("replace", "Deployment", "root-kcp"),
        ("apply", "PodDisruptionBudget", "root-kcp"),
        ("status", "Shard", "root"),
    ]
    assert status(kube, "root")["phase"] == "Degraded"
    assert condition(kube, "root", "Degraded") == ("True", "ApplyFailed")
    message = "Deployment root-kcp: 422 Unprocessable Entity: refused by the fake API server"
    assert effects.events[-1] == ("root", Event("Warning", "ApplyFailed", message))

    run(ctx, "root")
    assert kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["replicas"] == 3
    assert condition(kube, "root", "Degraded") == ("False", "AsExpected")


def test_a_write_racing_another_writer_is_reported_only_when_it_keeps_racing() -> None:
    """A conflict that outlasts the pass's reads again is another writer's change (the
    Deployment controller's, say), which brings a pass of its own: it is no failure until
    the writes of that child have conflicted in CONFLICTED_PASSES_REPORTED passes in a row."""
    kube = FakeKube(shard_object())
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    respec(ctx, kube, "root", **HA)
    attempts = REPLACE_ATTEMPTS
    for _ in range(CONFLICTED_PASSES_REPORTED - 1):
        kube.fail("apply", "Deployment", refused(), refused())
        kube.fail("replace", "Deployment", *(conflict() for _ in range(attempts)))
        run(ctx, "root")
        assert condition(kube, "root", "Degraded") == ("False", "AsExpected")
        assert "ApplyFailed" not in [event.reason for _, event in effects.events]
    kube.fail("apply", "Deployment", refused(), refused())
    kube.fail("replace", "Deployment", *(conflict() for _ in range(attempts)))
    run(ctx, "root")
    assert condition(kube, "root", "Degraded") == ("True", "ApplyFailed")

    run(ctx, "root")
    assert kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["replicas"] == 3
    assert condition(kube, "root", "Degraded") == ("False", "AsExpected")
    assert ctx.conflicts == {}, "forgotten once the write went through"


def test_a_service_that_cannot_be_made_again_keeps_the_shard_from_ready() -> None:
    kube = FakeKube(shard_object(**NO_PKI))
    ctx = context(kube)
    settle(ctx, kube, "root")
    assert condition(kube, "root", "Ready") == ("True", "RolledOut")
    del kube.objects[("Service", "ns", "root-kcp")]
    ctx.store.deleted("Service", "ns", "root-kcp")
    kube.fail("apply", "Service", refused(), refused())
    run(ctx, "root")
    assert condition(kube, "root", "Ready") == ("False", "ChildNotFound")
    assert condition(kube, "root", "Degraded") == ("True", "ApplyFailed")
    run(ctx, "root")
    assert condition(kube, "root", "Ready") == ("True", "RolledOut"), "made again"


def test_an_unreachable_api_server_while_reading_is_reported() -> None:
    kube = FakeKube(shard_object(**NO_PKI))
    ctx = context(kube)
    kube.fail("list", "Service", UnreachableError("https://api:6443", "Connection refused"))
    run(ctx, "root")
    assert [op for op, _, _ in kube.writes] == ["status"]
    assert condition(kube, "root", "Degraded") == ("True", "APIError")
    message = conditions(kube, "root")["Degraded"]["message"]
    assert message == "reading: cannot reach api:6443: Connection refused"


def test_a_refused_status_write_ends_the_pass_with_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = FakeKube(shard_object())
    kube.fail("status", "Shard", refused(409, "Conflict"))
    run(context(kube), "root")
    assert "pass over Shard ns/root stopped: 409 Conflict" in caplog.text
    assert "status" not in kube.objects[("Shard", "ns", "root")]


def test_an_invalid_spec_is_reported_without_writing_children() -> None:
    kube = FakeKube(shard_object(version="not-a-version"))
    run(context(kube), "root")
    assert [op for op, _, _ in kube.writes] == ["status"]
    assert condition(kube, "root", "Degraded") == ("True", "InvalidSpec")


def test_a_deleted_or_deleting_shard_gets_no_pass() -> None:
    deleting = shard_object()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    kube = FakeKube(deleting)
    run(context(kube), "root", "gone")
    assert kube.writes == []


def test_a_pdb_no_longer_rendered_is_deleted() -> None:
    kube = FakeKube(shard_object(**HA))
    ctx = context(kube)
    settle(ctx, kube, "root")
    assert ("PodDisruptionBudget", "ns", "root-kcp") in kube.objects
    respec(ctx, kube, "root", replicas=1)
    run(ctx, "root")
    assert ("delete", "PodDisruptionBudget", "root-kcp") in kube.writes
    assert ("PodDisruptionBudget", "ns", "root-kcp") not in kube.objects
    assert ctx.store.lookup("PodDisruptionBudget", "ns", "root-kcp") == (True, None)


def test_pods_that_do_not_run_are_reported_while_rolling_out() -> None:
    kube = FakeKube(shard_object())
    ctx = context(kube)
    run(ctx, "root")
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}
    labels = {"app.kubernetes.io/name": "kcp", "app.kubernetes.io/instance": "root"}
    for name, pod_labels in (("root-kcp-a", labels), ("other-a", {"app": "other"})):
        watched(
            ctx,
            {
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "ns", "labels": pod_labels},
                "status": {"containerStatuses": [{"name": "kcp", "state": waiting}]},
            },
        )
    run(ctx, "root")
    assert condition(kube, "root", "Degraded") == ("True", "PodsNotRunning")
    message = conditions(kube, "root")["Degraded"]["message"]
    assert "root-kcp-a" in message
    assert "other-a" not in message


ADMIN: dict[str, Any] = {"adminKubeconfigSecretRef": {"name": "admin"}}
ADMIN_SECRET = secret("admin", kubeconfig="a3ViZWNvbmZpZw==")


@pytest.mark.parametrize(
    ("shard", "enabled", "settled", "cleaned", "reason"),
    [
        (non_root_object(**ADMIN), True, True, True, "Deleted"),
        (non_root_object(**ADMIN), False, True, False, None),
        (non_root_object(**ADMIN), True, False, False, None),
        (shard_object("shard-1", **ADMIN), True, True, False, None),
        (non_root_object(version="0.33.0", **ADMIN), True, True, False, None),
        (non_root_object(**NO_PKI), True, True, False, "NoAdminKubeconfig"),
        (non_root_object(adminKubeconfigSecretRef={"name": "nope"}), True, True, False,
         "SecretNotFound"),
    ],
)  # fmt: skip
def test_the_identity_cache_is_cleaned_only_when_the_pass_decides_it(
    shard: JSON, enabled: bool, settled: bool, cleaned: bool, reason: str | None
) -> None:
    kube = FakeKube(rolled_out(shard_object()), shard, *SECRETS, ADMIN_SECRET)
    effects = Effects()
    ctx = context(kube, effects, cleanup=enabled)
    if settled:
        settle(ctx, kube, "shard-1")
    else:
        run(ctx, "shard-1")
    assert effects.cleaned == ([b"kubeconfig"] if cleaned else [])
    found = conditions(kube, "shard-1").get("IdentityCacheCleaned")
    assert (found or {}).get("reason") == reason
    run(ctx, "shard-1")
    assert len(effects.cleaned) == int(cleaned)


def test_a_failed_cleanup_is_retried_after_a_growing_delay() -> None:
    kube = FakeKube(rolled_out(shard_object()), non_root_object(**ADMIN), *SECRETS, ADMIN_SECRET)
    effects = Effects(outcome=Outcome(Result.SHARD_UNREACHABLE, "cannot reach the shard"))
    ctx = context(kube, effects)
    settle(ctx, kube, "shard-1")
    assert len(effects.cleaned) == 1
    assert condition(kube, "shard-1", "IdentityCacheCleaned") == ("False", "ShardUnreachable")
    for delay, attempts in (
        (RETRY_BASE_SECONDS - 1, 1),
        (1, 2),
        (RETRY_BASE_SECONDS, 2),
        (RETRY_BASE_SECONDS, 3),
    ):
        effects.now += delay
        run(ctx, "shard-1")
        assert len(effects.cleaned) == attempts
    effects.outcome = Outcome(Result.DELETED, "deleted")
    effects.now += 4 * RETRY_BASE_SECONDS
    run(ctx, "shard-1")
    assert condition(kube, "shard-1", "IdentityCacheCleaned") == ("True", "Deleted")
    assert ctx.cleanup_failures == {}


def terminating(kind: str) -> RefusedError:
    return RefusedError(
        403,
        "Forbidden",
        f'{kind.lower()}s "x" is forbidden: unable to create new content in namespace ns '
        "because it is being terminated",
    )


def deleted_by_the_namespace_controller(ctx: Context, kube: FakeKube, kind: str, name: str) -> None:
    del kube.objects[(kind, "ns", name)]
    ctx.store.deleted(kind, "ns", name)


def test_a_terminating_namespace_gets_no_more_writes_nor_events(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = FakeKube(shard_object(), non_root_object(), *SECRETS)
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root", "shard-1")
    before, events = len(kube.calls), len(effects.events)
    for name in ("root", "shard-1"):
        deleted_by_the_namespace_controller(ctx, kube, "Service", f"{name}-kcp")
        deleted_by_the_namespace_controller(ctx, kube, "Deployment", f"{name}-kcp")
        kube.fail("apply", "Service", terminating("Service"), terminating("Service"))
    with caplog.at_level(logging.INFO):
        run(ctx, "root", "shard-1", "root", "shard-1")
    assert kube.calls[before:] == [
        ("apply", "Service", "root-kcp"),
        ("apply", "Service", "root-kcp"),
        ("apply", "Service", "shard-1-kcp"),
        ("apply", "Service", "shard-1-kcp"),
    ]
    assert effects.events[events:] == []
    assert condition(kube, "root", "Degraded") == ("False", "AsExpected")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == [
        "namespace ns is being deleted: no more writes or Events there"
    ]


def test_a_shard_of_a_namespace_created_again_is_reconciled() -> None:
    kube = FakeKube(shard_object())
    ctx = context(kube)
    settle(ctx, kube, "root")
    deleted_by_the_namespace_controller(ctx, kube, "Service", "root-kcp")
    kube.fail("apply", "Service", terminating("Service"), terminating("Service"))
    run(ctx, "root")
    assert ctx.terminating == {"uid-root": "ns"}
    gone = copy.deepcopy(kube.objects[("Shard", "ns", "root")])
    gone["metadata"]["deletionTimestamp"] = "2026-12-03T19:00:00Z"
    watched(ctx, kube.put(gone))
    run(ctx, "root")
    assert ctx.terminating == {}
    for kind, name in (
        ("Shard", "root"),
        ("PersistentVolumeClaim", "root-kcp-data"),
        ("Deployment", "root-kcp"),
    ):
        deleted_by_the_namespace_controller(ctx, kube, kind, name)
    again = shard_object()
    again["metadata"]["uid"] = "uid-root-2"
    watched(ctx, kube.put(again))
    writes = len(kube.writes)
    run(ctx, "root")
    assert [kind for _, kind, _ in kube.writes[writes:]] == [
        "Service",
        "PersistentVolumeClaim",
        "Deployment",
        "Shard",
    ]


def test_only_the_terminating_refusal_counts_as_a_namespace_being_deleted() -> None:
    assert namespace_terminating(terminating("Service"))
    assert not namespace_terminating(RefusedError(403, "Forbidden", "services is forbidden: RBAC"))
    assert not namespace_terminating(ConnectionRefusedError())


def rolled(ctx: Context, kube: FakeKube, name: str) -> None:
    """The Deployment controller finishes the rollout; the watches bring the passes."""
    watched(ctx, kube.roll_out("ns", f"{name}-kcp"))
    run(ctx, name, name)


@pytest.mark.parametrize(
    "change",
    [
        {"version": "0.34.0"},
        {"version": "0.33.1"},
        {"extraArgs": ["--v=2"]},
    ],
)
def test_a_spec_change_is_configured_once_and_rolled_out_once(change: dict[str, Any]) -> None:
    kube = FakeKube(shard_object(version="0.33.0", **HA))
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    rolled(ctx, kube, "root")
    before = len(effects.events)
    respec(ctx, kube, "root", **change)
    run(ctx, "root")
    for _ in range(3):
        rolled(ctx, kube, "root")
    assert [event.reason for _, event in effects.events[before:]] == ["Configured", "RolledOut"]
    assert status(kube, "root")["phase"] == "Ready"
    assert condition(kube, "root", "Progressing") == ("False", "Complete")


def test_a_spec_change_written_after_a_failure_is_configured_then() -> None:
    kube = FakeKube(shard_object(**HA))
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    before = len(effects.events)
    respec(ctx, kube, "root", extraArgs=["--v=2"])
    kube.fail("apply", "Deployment", refused(), refused())
    kube.fail("replace", "Deployment", refused())
    run(ctx, "root")
    run(ctx, "root")
    rolled(ctx, kube, "root")
    reasons = [event.reason for _, event in effects.events[before:]]
    assert reasons == ["ApplyFailed", "Configured", "RolledOut"]


def test_pods_refused_by_a_terminating_namespace_stop_the_writes_before_any_event() -> None:
    kube = FakeKube(shard_object())
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    deployment = copy.deepcopy(kube.objects[("Deployment", "ns", "root-kcp")])
    deployment["status"]["availableReplicas"] = 0
    deployment["status"]["conditions"] = [
        {
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreate",
            "message": terminating("Pod").message,
        }
    ]
    watched(ctx, kube.put(deployment))
    before, events = len(kube.calls), len(effects.events)
    run(ctx, "root", "root")
    assert (kube.calls[before:], effects.events[events:]) == ([], [])
    assert ctx.terminating == {"uid-root": "ns"}


def test_a_rotated_secret_is_configured_and_rolled_out_at_the_same_generation() -> None:
    kube = FakeKube(shard_object(tls={"clientCASecretRef": {"name": "ca"}}), secret("ca"))
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    before = len(effects.events)
    watched(ctx, kube.put(secret("ca", **{"ca.crt": "cm90YXRlZA=="})))
    run(ctx, "root")
    rolled(ctx, kube, "root")
    rolled(ctx, kube, "root")
    assert [event.reason for _, event in effects.events[before:]] == ["Configured", "RolledOut"]
    assert kube.objects[("Shard", "ns", "root")]["metadata"]["generation"] == 1
