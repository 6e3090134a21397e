"""Where a shard keeps its data: the claim of kcp's root directory, from spec to pass."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kcp_shard_operator.controller.handlers import _owners
from kcp_shard_operator.controller.shard import STORAGE_CLASSES_SECONDS
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.shard.claim import Storage, claim_name, pending_problem, storage_of
from kcp_shard_operator.core.shard.plan import plan
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.spec import parse_shard
from kcp_shard_operator.core.shard.status import Observation, shard_status
from kcp_shard_operator.core.status.events import events_between
from kcp_shard_operator.core.storage.claim import refused_change
from tests.conftest import RELEASE, make, shard_object
from tests.fake_kube import Effects, FakeKube, context, refused, run, watched

EXTERNAL = {"endpoints": ["https://etcd:2379"]}
STANDARD = {
    "metadata": {
        "name": "standard",
        "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
    }
}


def volumes(deployment: JSON) -> list[JSON]:
    found: list[JSON] = deployment["spec"]["template"]["spec"]["volumes"]
    return found


def data(deployment: JSON) -> JSON:
    return next(v for v in volumes(deployment) if v["name"] == "data")


def test_embedded_etcd_gets_a_retained_claim_and_recreate() -> None:
    rendered = render_shard(make(shard_object()), None, RELEASE)
    assert rendered.storage is Storage.CLAIM
    assert rendered.claim is not None
    assert rendered.claim["metadata"]["name"] == "root-kcp-data"
    assert "ownerReferences" not in rendered.claim["metadata"]
    assert rendered.claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "10Gi"}},
    }
    assert data(rendered.deployment) == {
        "name": "data",
        "persistentVolumeClaim": {"claimName": "root-kcp-data"},
    }
    assert rendered.deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_delete_policy_owns_the_claim_and_the_class_is_passed() -> None:
    obj = shard_object(storage={"size": "2Gi", "storageClassName": "fast", "whenDeleted": "Delete"})
    claim = render_shard(make(obj), None, RELEASE).claim
    assert claim is not None
    assert [o["uid"] for o in claim["metadata"]["ownerReferences"]] == ["uid-root"]
    assert claim["spec"]["storageClassName"] == "fast"
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"


@pytest.mark.parametrize(
    ("spec", "storage"),
    [
        ({"storage": {"ephemeral": True}}, Storage.EPHEMERAL),
        ({"etcd": EXTERNAL}, Storage.EXTERNAL_ETCD),
    ],
)
def test_no_claim_without_embedded_etcd_or_when_ephemeral(
    spec: dict[str, Any], storage: Storage
) -> None:
    rendered = render_shard(make(shard_object(**spec)), None, RELEASE)
    assert rendered.storage is storage
    assert rendered.claim is None
    assert data(rendered.deployment) == {"name": "data", "emptyDir": {}}
    assert rendered.deployment["spec"]["strategy"]["type"] == "RollingUpdate"


@pytest.mark.parametrize(
    ("ephemeral", "on_empty_dir", "storage"),
    [
        (None, False, Storage.CLAIM),
        (None, True, Storage.KEPT_EMPTY_DIR),
        (False, True, Storage.CLAIM),
        (False, False, Storage.CLAIM),
        (True, False, Storage.EPHEMERAL),
        (True, True, Storage.EPHEMERAL),
    ],
)
def test_storage_of(ephemeral: bool | None, on_empty_dir: bool, storage: Storage) -> None:
    spec = shard_object() if ephemeral is None else shard_object(storage={"ephemeral": ephemeral})
    assert storage_of(make(spec).spec, on_empty_dir) is storage


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"etcd": EXTERNAL, "storage": {"size": "1Gi"}}, "applies to embedded etcd only"),
        ({"storage": {"size": "0"}}, "is not a positive quantity"),
        ({"storage": {"size": "ten"}}, "is not a positive quantity"),
        ({"storage": {"storageClassName": "Not_A_Name"}}, "does not match"),
        ({"storage": {"whenDeleted": "Never"}}, "must be one of Retain, Delete"),
        ({"storage": {"sizes": "1Gi"}}, "unknown field"),
    ],
)
def test_bad_storage_is_refused_offline(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_shard(shard_object(**spec), RELEASE)


def live_claim(storage: str = "10Gi", class_name: str = "standard", phase: str = "Bound") -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "root-kcp-data", "namespace": "ns"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": storage}},
            "storageClassName": class_name,
            "volumeName": "pv-1",
        },
        "status": {"phase": phase, "capacity": {"storage": storage}},
    }


def desired_claim(**storage: str) -> JSON:
    claim = render_shard(make(shard_object(storage=storage)), None, RELEASE).claim
    assert claim is not None
    return claim


@pytest.mark.parametrize(
    ("storage", "live", "refusal"),
    [
        ({}, live_claim(), None),
        ({"size": "20Gi"}, live_claim(), None),
        ({"size": "10240Mi"}, live_claim(), None),
        ({"size": "5Gi"}, live_claim(), "cannot shrink to 5Gi"),
        ({"storageClassName": "standard"}, live_claim(), None),
        ({"storageClassName": "fast"}, live_claim(), "cannot change to 'fast'"),
    ],
)
def test_refused_change(storage: dict[str, str], live: JSON, refusal: str | None) -> None:
    found = refused_change(desired_claim(**storage), live)
    assert (found is None) if refusal is None else (refusal in (found or ""))


@pytest.mark.parametrize(
    ("live", "classes", "reason"),
    [
        (live_claim(), {}, None),
        (live_claim(phase="Pending"), None, None),
        (live_claim(phase="Pending"), {"standard": STANDARD}, None),
        (
            live_claim(phase="Pending", class_name="nope"),
            {"standard": STANDARD},
            "StorageClassNotFound",
        ),
        (live_claim(phase="Pending", class_name=""), {}, "NoDefaultStorageClass"),
        (live_claim(phase="Lost"), {}, "ClaimLost"),
    ],
)
def test_pending_problem(live: JSON, classes: dict[str, JSON] | None, reason: str | None) -> None:
    found = pending_problem(desired_claim(), live, classes)
    assert (found[0] if found else None) == reason


def empty_dir_deployment() -> JSON:
    rendered = render_shard(make(shard_object(storage={"ephemeral": True})), None, RELEASE, {})
    return copy.deepcopy(rendered.deployment)


def test_a_shard_on_an_empty_dir_keeps_it_until_the_spec_decides() -> None:
    observed: dict[str, JSON | None] = {"Deployment": empty_dir_deployment()}
    kept = plan(make(shard_object()), None, observed, RELEASE, {})
    assert kept.storage is Storage.KEPT_EMPTY_DIR
    assert [o["kind"] for o in kept.apply] == ["Service"]
    moved = plan(make(shard_object(storage={"ephemeral": False})), None, observed, RELEASE, {})
    assert moved.storage is Storage.CLAIM
    assert [o["kind"] for o in moved.apply] == ["Service", "PersistentVolumeClaim", "Deployment"]


def test_a_refused_claim_change_is_reported_and_the_claim_left_alone() -> None:
    shard = make(shard_object(storage={"size": "1Gi"}))
    decision = plan(shard, None, {"PersistentVolumeClaim": live_claim()}, RELEASE, {})
    assert "PersistentVolumeClaim" not in [o["kind"] for o in decision.apply]
    assert [reason for reason, _ in decision.storage_problems] == ["StorageChangeRefused"]
    status = shard_status(
        shard, Observation(deployment=None, storage_problems=decision.storage_problems), "t"
    )
    assert status["phase"] == "Degraded"
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["reason"], "cannot shrink to 1Gi" in degraded["message"]) == (
        "StorageChangeRefused",
        True,
    )


@pytest.mark.parametrize(
    ("spec", "claim", "truth", "reason"),
    [
        ({}, live_claim(), "True", "ClaimBound"),
        ({}, live_claim(phase="Pending"), "False", "ClaimNotBound"),
        ({}, None, "False", "ClaimNotBound"),
        ({"storage": {"ephemeral": True}}, None, "False", "Ephemeral"),
        ({"etcd": EXTERNAL}, None, "True", "ExternalEtcd"),
    ],
)
def test_data_durable_condition(
    spec: dict[str, Any], claim: JSON | None, truth: str, reason: str
) -> None:
    shard = make(shard_object(**spec))
    seen = Observation(deployment=None, storage=storage_of(shard.spec), claim=claim)
    found = next(
        c for c in shard_status(shard, seen, "t")["conditions"] if c["type"] == "DataDurable"
    )
    assert (found["status"], found["reason"]) == (truth, reason)


def test_data_that_will_not_survive_a_restart_is_a_warning_event_once() -> None:
    shard = make(shard_object())
    kept = shard_status(shard, Observation(deployment=None, storage=Storage.KEPT_EMPTY_DIR), "t")
    bound = shard_status(
        shard, Observation(deployment=None, storage=Storage.CLAIM, claim=live_claim()), "t"
    )
    assert [(e.type, e.reason) for e in events_between(None, kept)] == [("Warning", "EmptyDirKept")]
    assert events_between(kept, kept) == []
    assert [e.reason for e in events_between(kept, bound)] == []


def test_a_claim_is_never_replaced_or_deleted() -> None:
    """The volume binder's volumeName is another manager's field, and a refused claim apply
    is reported: neither leads to a PUT or a DELETE of the claim."""
    kube = FakeKube(shard_object())
    ctx = context(kube)
    run(ctx, "root")
    claim = kube.objects[("PersistentVolumeClaim", "ns", "root-kcp-data")]
    bound = {
        **claim,
        "spec": {**claim["spec"], "volumeName": "pv-1"},
        "status": {"phase": "Bound"},
        "metadata": {
            **claim["metadata"],
            "managedFields": [
                {"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {"f:volumeName": {}}}}
            ],
        },
    }
    watched(ctx, kube.put(bound))
    calls = len(kube.calls)
    run(ctx, "root")
    assert [c for c in kube.calls[calls:] if c[1] == "PersistentVolumeClaim"] == []

    kube.objects[("Shard", "ns", "root")]["spec"]["storage"] = {"size": "20Gi"}
    watched(ctx, kube.put(kube.objects[("Shard", "ns", "root")]))
    kube.fail("apply", "PersistentVolumeClaim", refused(), refused())
    calls = len(kube.calls)
    run(ctx, "root")
    claim_calls = [c[0] for c in kube.calls[calls:] if c[1] == "PersistentVolumeClaim"]
    assert claim_calls == ["apply", "apply"]
    status = kube.objects[("Shard", "ns", "root")]["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ApplyFailed"
    assert "PersistentVolumeClaim root-kcp-data" in degraded["message"]


def test_storage_classes_are_listed_only_for_a_pending_claim() -> None:
    kube = FakeKube(shard_object(storage={"storageClassName": "nope"}))
    ctx = context(kube)
    run(ctx, "root")
    assert ("list", "StorageClass", "") not in kube.calls
    claim = kube.objects[("PersistentVolumeClaim", "ns", "root-kcp-data")]
    watched(ctx, kube.put({**claim, "status": {"phase": "Pending"}}))
    run(ctx, "root")
    assert ("list", "StorageClass", "") in kube.calls
    status = kube.objects[("Shard", "ns", "root")]["status"]
    assert status["phase"] == "Degraded"
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "StorageClassNotFound"
    assert "StorageClass 'nope' does not exist" in degraded["message"]


def test_storage_classes_are_listed_once_for_many_pending_claims_then_again_later() -> None:
    names = [f"s{i}" for i in range(5)]
    kube = FakeKube(*(shard_object(name, storage={"storageClassName": "nope"}) for name in names))
    effects = Effects()
    ctx = context(kube, effects)
    run(ctx, *names)
    for name in names:
        claim = kube.objects[("PersistentVolumeClaim", "ns", f"{name}-kcp-data")]
        watched(ctx, kube.put({**claim, "status": {"phase": "Pending"}}))
    run(ctx, *names)
    run(ctx, *names)
    assert kube.calls.count(("list", "StorageClass", "")) == 1
    for name in names:
        degraded = next(
            c for c in kube.objects[("Shard", "ns", name)]["status"]["conditions"]
            if c["type"] == "Degraded"
        )  # fmt: skip
        assert degraded["reason"] == "StorageClassNotFound"
    effects.now += STORAGE_CLASSES_SECONDS
    run(ctx, names[0])
    assert kube.calls.count(("list", "StorageClass", "")) == 2


SHARD = ("Shard", "kcpshard.dev/v1alpha1")
CACHE = ("CacheServer", "kcpshard.dev/v1alpha1")
PROXY = ("FrontProxy", "kcpshard.dev/v1alpha1")


@pytest.mark.parametrize(
    ("meta", "owner", "names"),
    [
        (
            {"ownerReferences": [{"kind": "Shard", "apiVersion": SHARD[1], "name": "a"}]},
            SHARD,
            ["a"],
        ),
        ({"ownerReferences": [{"kind": "Shard", "apiVersion": SHARD[1], "name": "a"}]}, CACHE, []),
        ({"labels": {"app.kubernetes.io/instance": "b"}}, SHARD, ["b"]),
        ({"labels": {"app.kubernetes.io/instance": "b"}}, CACHE, []),
        ({"labels": {"app.kubernetes.io/instance": "b"}}, PROXY, []),
        (
            {
                "labels": {
                    "app.kubernetes.io/instance": "c",
                    "app.kubernetes.io/name": "kcp-cache-server",
                }
            },
            CACHE,
            ["c"],
        ),
        (
            {
                "labels": {
                    "app.kubernetes.io/instance": "c",
                    "app.kubernetes.io/name": "kcp-cache-server",
                }
            },
            SHARD,
            [],
        ),
        ({}, SHARD, []),
    ],
)
def test_a_retained_claim_finds_its_owner_by_label(
    meta: JSON, owner: tuple[str, str], names: list[str]
) -> None:
    assert _owners(meta, *owner) == names


def test_claim_name() -> None:
    assert claim_name(make(shard_object("shard-1"))) == "shard-1-kcp-data"
