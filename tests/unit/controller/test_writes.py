"""How one child is written (apply, once more, replace, recreate) and when status is."""

from __future__ import annotations

import copy

import pytest

from kcp_shard_operator.controller.writes import REPLACE_ATTEMPTS, write_child, write_status
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.kube.client import RefusedError
from tests.conftest import make, shard_object
from tests.fake_kube import Effects, FakeKube, conflict, context, refused

HA = shard_object(replicas=3, etcd={"endpoints": ["https://etcd:2379"]})
RENDERED = render_shard(make(HA), None, make(HA).spec.kcp_version)
CHILDREN = {obj["kind"]: obj for obj in RENDERED.objects}


def served(child: JSON) -> tuple[FakeKube, JSON]:
    """An API server holding an older version of ``child``, and that object as last seen."""
    old = copy.deepcopy(child)
    old["spec"]["stale"] = True
    kube = FakeKube(old)
    return kube, copy.deepcopy(kube.objects[(child["kind"], "ns", child["metadata"]["name"])])


REFUSED_TWICE = {"apply": [refused(), refused()]}


@pytest.mark.parametrize(
    ("kind", "errors", "calls", "how"),
    [
        ("Deployment", {}, ["apply"], "applied"),
        ("Deployment", {"apply": [refused()]}, ["apply", "apply"], "applied"),
        ("Deployment", REFUSED_TWICE, ["apply", "apply", "replace"], "replaced"),
        ("Service", REFUSED_TWICE, ["apply", "apply", "replace"], "replaced"),
        ("Service", {**REFUSED_TWICE, "replace": [refused()]},
         ["apply", "apply", "replace", "delete", "apply"], "recreated"),
        ("PodDisruptionBudget", {**REFUSED_TWICE, "replace": [refused()]},
         ["apply", "apply", "replace", "delete", "apply"], "recreated"),
    ],
)  # fmt: skip
def test_a_refused_write_falls_back_step_by_step(
    kind: str, errors: dict[str, list[Exception]], calls: list[str], how: str
) -> None:
    child = CHILDREN[kind]
    kube, live = served(child)
    for op, queued in errors.items():
        kube.fail(op, kind, *queued)
    written, done = write_child(context(kube), child, live)
    assert ([op for op, _, _ in kube.calls], done) == (calls, how)
    assert written == kube.objects[(kind, "ns", child["metadata"]["name"])]
    assert written["spec"] == child["spec"]


def test_a_deployment_is_never_deleted() -> None:
    child = CHILDREN["Deployment"]
    kube, live = served(child)
    error = refused()
    kube.fail("apply", "Deployment", refused(), refused())
    kube.fail("replace", "Deployment", error)
    with pytest.raises(RefusedError) as raised:
        write_child(context(kube), child, live)
    assert raised.value is error
    assert [op for op, _, _ in kube.calls] == ["apply", "apply", "replace"]


CONFLICTED_CALLS = ["replace"] + ["get", "replace"] * (REPLACE_ATTEMPTS - 1)


@pytest.mark.parametrize("kind", ["Deployment", "Service", "PodDisruptionBudget"])
def test_a_replace_that_keeps_conflicting_is_reported_never_recreated(kind: str) -> None:
    child = CHILDREN[kind]
    kube, live = served(child)
    kube.fail("apply", kind, refused(), refused())
    kube.fail("replace", kind, *(conflict() for _ in range(REPLACE_ATTEMPTS)))
    with pytest.raises(RefusedError, match="409"):
        write_child(context(kube), child, live)
    assert [op for op, _, _ in kube.calls] == ["apply", "apply", *CONFLICTED_CALLS]
    assert kube.objects[(kind, "ns", child["metadata"]["name"])] == live


def test_a_replace_from_a_stale_read_reads_again_and_succeeds() -> None:
    child = CHILDREN["Deployment"]
    kube, live = served(child)
    name = child["metadata"]["name"]
    kube.put(kube.objects[("Deployment", "ns", name)])
    kube.fail("apply", "Deployment", refused(), refused())
    written, how = write_child(context(kube), child, live)
    assert ([op for op, _, _ in kube.calls], how) == (
        ["apply", "apply", "replace", "get", "replace"],
        "replaced",
    )
    assert written == kube.objects[("Deployment", "ns", name)]
    assert written["spec"] == child["spec"]


def test_a_hand_edit_replaced_from_a_stale_read_is_retried_within_the_pass() -> None:
    """The issue-19 case: foreign fields found, the Deployment controller wrote the object
    after the read, so the first replace conflicts; the pass reads again and puts it back."""
    child = CHILDREN["Deployment"]
    kube = FakeKube(child)
    name = child["metadata"]["name"]
    live = copy.deepcopy(kube.objects[("Deployment", "ns", name)])
    live["metadata"]["managedFields"] = [
        {"manager": "kubectl-patch", "fieldsV1": {"f:spec": {"f:paused": {}}}}
    ]
    live["spec"]["paused"] = True
    kube.put(copy.deepcopy(live))
    stale = copy.deepcopy(live)
    kube.put(kube.objects[("Deployment", "ns", name)])
    written, how = write_child(context(kube), child, stale)
    assert ([op for op, _, _ in kube.calls], how) == (
        ["dry-run", "get", "dry-run", "replace"],
        "replaced",
    )
    assert "paused" not in written["spec"]


def test_an_object_gone_between_a_conflict_and_the_read_again_is_applied() -> None:
    child = CHILDREN["Service"]
    kube, live = served(child)
    kube.fail("apply", "Service", refused(), refused())
    kube.fail("replace", "Service", conflict())
    del kube.objects[("Service", "ns", child["metadata"]["name"])]
    written, how = write_child(context(kube), child, live)
    assert ([op for op, _, _ in kube.calls], how) == (
        ["apply", "apply", "replace", "get", "apply"],
        "applied",
    )
    assert written["spec"] == child["spec"]


def test_a_refused_new_child_is_reported_not_replaced() -> None:
    kube = FakeKube()
    kube.fail("apply", "Deployment", refused(), refused())
    with pytest.raises(RefusedError):
        write_child(context(kube), CHILDREN["Deployment"], None)
    assert [op for op, _, _ in kube.calls] == ["apply", "apply"]


class KeepingKube(FakeKube):
    """Server-side apply as it is: containers another manager added stay."""

    def apply(self, obj: JSON) -> JSON:
        written = super().apply(obj)
        written["spec"]["template"]["spec"]["containers"].append({"name": "sidecar"})
        return self.put(written)


def test_an_apply_that_leaves_differences_is_followed_by_a_replace() -> None:
    child = CHILDREN["Deployment"]
    kube = KeepingKube()
    written, how = write_child(context(kube), child, None)
    assert ([op for op, _, _ in kube.calls], how) == (["apply", "replace"], "replaced")
    assert written["spec"] == child["spec"]


def test_foreign_fields_are_replaced_at_once_unless_they_change_nothing() -> None:
    child = CHILDREN["Deployment"]
    kube = FakeKube(child)
    live = copy.deepcopy(kube.objects[("Deployment", "ns", child["metadata"]["name"])])
    live["metadata"]["managedFields"] = [
        {"manager": "kubectl-edit", "fieldsV1": {"f:spec": {"f:paused": {}}}}
    ]
    written, how = write_child(context(kube), child, live)
    assert ([op for op, _, _ in kube.calls], how) == (["dry-run"], "unchanged")
    assert written is live
    live["spec"]["paused"] = True
    kube.calls.clear()
    written, how = write_child(context(kube), child, live)
    assert ([op for op, _, _ in kube.calls], how) == (["dry-run", "replace"], "replaced")
    assert "paused" not in written["spec"]


def test_status_is_written_only_when_it_changes_with_the_events_of_the_change() -> None:
    kube = FakeKube(shard_object())
    effects = Effects()
    ctx = context(kube, effects)
    obj = copy.deepcopy(kube.objects[("Shard", "ns", "root")])
    status: JSON = {"phase": "Ready", "version": "0.34.0"}
    write_status(ctx, obj, status)
    assert kube.writes == [("status", "Shard", "root")]
    assert [event.reason for _, event in effects.events] == ["RolledOut"]
    written = ctx.store.lookup("Shard", "ns", "root")[1]
    assert written is not None
    assert written["status"] == status
    write_status(ctx, written, dict(status))
    assert len(kube.writes) == 1
    assert len(effects.events) == 1
