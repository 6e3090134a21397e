"""The planner (core/planner.py): what one reconcile pass should do, from observed state."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from kcp_shard_operator.constants import FIELD_MANAGER
from kcp_shard_operator.core.api.meta import VERSION_ANNOTATION
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.api.quantity import quantity
from kcp_shard_operator.core.rollout.drift import (
    Cause,
    cause_of,
    contains,
    foreign_fields,
    replacement,
    spec_field_managers,
)
from kcp_shard_operator.core.rollout.versions import held_at_running_version
from kcp_shard_operator.core.shard.plan import plan
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.spec import Shard
from tests.conftest import RELEASE, make, non_root_object, shard_object
from tests.fake_kube import READY_STATUS


def root_with(version: str | None, spec_version: str = "0.34.0") -> Shard:
    obj = shard_object(version=spec_version)
    if version:
        obj["status"] = {"version": version, **READY_STATUS}
    return make(obj)


def deployment_at(version: str) -> JSON:
    return {"spec": {"template": {"metadata": {"annotations": {VERSION_ANNOTATION: version}}}}}


@pytest.mark.parametrize(
    ("root_version", "running", "wanted", "waits"),
    [
        (None, None, "0.34.0", True),
        ("0.32.3", "0.32.3", "0.34.0", True),
        ("0.34.0", "0.32.3", "0.34.0", False),
        ("0.35.0", "0.32.3", "0.34.0", False),
        ("0.32.3", "0.34.0", "0.34.0", False),
        ("0.32.3", None, "0.32.3", False),
        ("not-a-version", None, "0.34.0", True),
    ],
)
def test_non_root_waits_for_root(
    root_version: str | None, running: str | None, wanted: str, waits: bool
) -> None:
    shard = make(non_root_object(version=wanted))
    observed: dict[str, JSON | None] = {"Deployment": deployment_at(running) if running else None}
    decision = plan(shard, root_with(root_version), observed, RELEASE)
    assert (decision.waiting is not None) is waits
    if waits:
        assert decision.apply == []
        assert "root shard root runs kcp" in (decision.waiting or "")


def test_root_shard_never_waits() -> None:
    decision = plan(make(shard_object()), None, {}, RELEASE)
    assert decision.waiting is None
    assert [o["kind"] for o in decision.apply] == ["Service", "PersistentVolumeClaim", "Deployment"]


def test_missing_root_is_an_error() -> None:
    decision = plan(make(non_root_object()), None, {}, RELEASE)
    assert decision.error_reason == "RootShardNotFound"
    assert decision.apply == []


def test_a_missing_root_is_told_with_the_missing_secrets() -> None:
    revisions = {"cache": "", "root-admin": "7"}
    decision = plan(make(non_root_object(version="0.32.3")), None, {}, RELEASE, revisions)
    assert (decision.error_reason, decision.error) == (
        "RootShardNotFound",
        "root Shard 'root' not found in ns",
    )
    assert decision.missing_secrets == ["cache"]
    assert decision.apply == []


def test_a_missing_root_is_told_with_the_spec_problem() -> None:
    shard = make(non_root_object(extraArgs=["--secure-port=1"]))
    decision = plan(shard, None, {}, RELEASE, {"cache": "1", "root-admin": "2"})
    assert decision.error_reason == "RootShardNotFound"
    assert decision.error == (
        "root Shard 'root' not found in ns; "
        "spec.extraArgs: [0] --secure-port: the operator sets this flag; remove it"
    )


def test_nothing_applied_when_in_sync() -> None:
    shard = make(shard_object())
    rendered = render_shard(shard, None, RELEASE)
    observed: dict[str, JSON | None] = {
        o["kind"]: {**o, "status": {"x": 1}, "metadata": {**o["metadata"], "uid": "u"}}
        for o in rendered.objects
    }
    assert plan(shard, None, observed, RELEASE).apply == []


def test_drift_is_detected() -> None:
    shard = make(shard_object())
    rendered = render_shard(shard, None, RELEASE)
    observed: dict[str, JSON | None] = {o["kind"]: o for o in rendered.objects}
    drifted = {**rendered.deployment, "spec": {**rendered.deployment["spec"], "replicas": 5}}
    observed["Deployment"] = drifted
    assert [o["kind"] for o in plan(shard, None, observed, RELEASE).apply] == ["Deployment"]


def test_stale_pdb_is_deleted_when_scaling_to_one() -> None:
    shard = make(shard_object(replicas=1))
    decision = plan(shard, None, {"PodDisruptionBudget": {"kind": "PodDisruptionBudget"}}, RELEASE)
    assert decision.delete_pdb


@pytest.mark.parametrize(
    ("actual", "desired", "expected"),
    [
        ({"a": 1, "b": 2}, {"a": 1}, True),
        ({"a": 1}, {"a": 2}, False),
        ({"a": [1, 2]}, {"a": [1]}, False),
        ({"a": [{"x": 1, "y": 2}]}, {"a": [{"x": 1}]}, True),
        (None, {"a": 1}, False),
        ({"a": {"b": None}}, {"a": {"b": 1}}, False),
        ("1", 1, False),
    ],
)
def test_contains(actual: Any, desired: Any, expected: bool) -> None:
    assert contains(actual, desired) is expected


def test_field_removed_from_spec_is_reapplied() -> None:
    before = render_shard(make(shard_object(nodeSelector={"pool": "a"})), None, RELEASE)
    observed: dict[str, JSON | None] = {o["kind"]: o for o in before.objects}
    decision = plan(make(shard_object()), None, observed, RELEASE)
    assert [o["kind"] for o in decision.apply] == ["Deployment"]


def test_waiting_shard_keeps_its_version_but_follows_the_rest_of_its_spec() -> None:
    root = root_with("0.32.3")
    running = render_shard(make(non_root_object(version="0.32.3")), root, RELEASE)
    observed: dict[str, JSON | None] = {o["kind"]: o for o in running.objects}
    wanted = make(
        non_root_object(version="0.34.0", replicas=2, etcd={"endpoints": ["https://e:2379"]})
    )
    decision = plan(wanted, root, observed, RELEASE)
    assert decision.waiting is not None
    kinds = {o["kind"]: o for o in decision.apply}
    assert sorted(kinds) == ["Deployment", "PodDisruptionBudget"]
    template = kinds["Deployment"]["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "0.32.3"
    assert template["spec"]["containers"][0]["image"] == "ghcr.io/kcp-dev/kcp:v0.32.3"
    assert (
        "--root-shard-kubeconfig-file=/etc/kcp/root-shard/kubeconfig"
        in (template["spec"]["containers"][0]["args"])
    )
    assert kinds["Deployment"]["spec"]["replicas"] == 2


def test_waiting_shard_in_sync_at_its_running_version_is_left_alone() -> None:
    root = root_with("0.32.3")
    running = render_shard(make(non_root_object(version="0.32.3")), root, RELEASE)
    observed: dict[str, JSON | None] = {o["kind"]: o for o in running.objects}
    decision = plan(make(non_root_object(version="0.34.0")), root, observed, RELEASE)
    assert decision.waiting is not None
    assert decision.apply == []


def test_held_at_running_version_keeps_a_custom_image() -> None:
    shard = make(
        non_root_object(version="0.34.0", image={"repository": "r:5000/kcp", "tag": "new"})
    )
    deployment = render_shard(
        make(non_root_object(version="0.32.3", image={"repository": "r:5000/kcp", "tag": "old"})),
        root_with("0.32.3"),
        RELEASE,
    ).deployment
    held = held_at_running_version(shard, deployment)
    assert held is not None
    assert held.spec.version == "0.32.3"
    assert held.spec.image_ref == "r:5000/kcp:old"
    assert held_at_running_version(shard, None) is None


def test_waiting_shard_keeps_the_secret_digest_of_its_running_version() -> None:
    root = root_with("0.32.3")
    revisions = {"cache": "1", "root-admin": "7"}
    old = make(non_root_object(version="0.32.3"))
    running = render_shard(old, root, RELEASE, revisions)
    observed: dict[str, JSON | None] = {o["kind"]: o for o in running.objects}
    wanted = make(non_root_object(version="0.34.0"))
    read = {name: revisions[name] for name in wanted.spec.secret_names}
    decision = plan(wanted, root, observed, RELEASE, read)
    assert decision.waiting is not None
    assert decision.apply == []


@pytest.mark.parametrize(
    ("actual", "desired", "expected"),
    [
        ({"limits": {"memory": "1536Mi"}}, {"limits": {"memory": "1.5Gi"}}, True),
        ({"requests": {"cpu": "2"}}, {"requests": {"cpu": 2}}, True),
        ({"requests": {"cpu": "500m"}}, {"requests": {"cpu": "0.5"}}, True),
        ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "500m"}}, False),
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, {"limits": {"cpu": "1"}}, False),
    ],
)
def test_contains_compares_quantities_by_value(actual: JSON, desired: JSON, expected: bool) -> None:
    assert contains(actual, desired) is expected


@pytest.mark.parametrize(
    ("text", "value"),
    [("2Gi", Decimal(2 * 1024**3)), ("500m", Decimal("0.5")), (3, Decimal(3)), ("1e3", 1000)],
)
def test_quantity(text: Any, value: Decimal) -> None:
    assert quantity(text) == value


@pytest.mark.parametrize("text", ["two", "", "1Xi", True, None, 1.5])
def test_not_a_quantity(text: Any) -> None:
    assert quantity(text) is None


def test_cause_of_a_write() -> None:
    rendered = render_shard(make(shard_object()), None, RELEASE).deployment
    changed = render_shard(make(shard_object(extraArgs=["--v=3"])), None, RELEASE).deployment
    assert cause_of(None, rendered) is Cause.CREATED
    assert cause_of(rendered, rendered) is Cause.DRIFT
    assert cause_of(rendered, changed) is Cause.SPEC_CHANGED


def test_a_change_of_the_update_strategy_alone_is_told_apart() -> None:
    ha: dict[str, Any] = {"etcd": {"endpoints": ["https://e:2379"]}}
    rolling = render_shard(make(shard_object(**ha)), None, RELEASE).deployment
    moving = {**shard_object(version="0.34.0", **ha), "status": {"version": "0.33.0"}}
    recreate = render_shard(make(moving), None, RELEASE).deployment
    assert (recreate["spec"]["strategy"], rolling["spec"]["strategy"]["type"]) == (
        {"type": "Recreate"},
        "RollingUpdate",
    )
    assert cause_of(recreate, rolling) is Cause.STRATEGY
    changed = render_shard(make(shard_object(extraArgs=["--v=3"], **ha)), None, RELEASE)
    assert cause_of(recreate, changed.deployment) is Cause.SPEC_CHANGED


def managed(manager: str, fields: JSON, subresource: str | None = None) -> JSON:
    entry: JSON = {"manager": manager, "operation": "Update", "fieldsV1": fields}
    if subresource:
        entry["subresource"] = subresource
    return entry


KCP = 'k:{"name":"kcp"}'
OURS: JSON = {
    "f:spec": {
        "f:replicas": {},
        "f:template": {"f:spec": {"f:containers": {KCP: {".": {}, "f:name": {}, "f:image": {}}}}},
    }
}


@pytest.mark.parametrize(
    ("theirs", "foreign"),
    [
        ({"f:spec": {"f:replicas": {}}}, []),
        ({"f:metadata": {"f:annotations": {"f:x": {}}}}, []),
        (
            {"f:spec": {"f:template": {"f:metadata": {"f:annotations": {"f:restartedAt": {}}}}}},
            [],
        ),
        (
            {"f:spec": {"f:template": {"f:spec": {"f:containers": {KCP: {"f:env": {}}}}}}},
            [f"f:spec.f:template.f:spec.f:containers.{KCP}.f:env"],
        ),
        (
            {
                "f:spec": {
                    "f:template": {"f:spec": {"f:containers": {'k:{"name":"sidecar"}': {".": {}}}}}
                }
            },
            ['f:spec.f:template.f:spec.f:containers.k:{"name":"sidecar"}..'],
        ),
    ],
)
def test_foreign_fields(theirs: JSON, foreign: list[str]) -> None:
    live = {
        "metadata": {
            "managedFields": [
                managed("kcp-shard-operator", OURS),
                managed("kubectl-edit", theirs),
                managed("kube-controller-manager", {"f:status": {"f:x": {}}}, "status"),
            ]
        }
    }
    assert foreign_fields(live, "kcp-shard-operator") == foreign
    kept = {"metadata": {"managedFields": spec_field_managers(live, "kcp-shard-operator")}}
    assert foreign_fields(kept, "kcp-shard-operator") == foreign


def test_fields_added_by_hand_are_drift_even_when_the_rest_matches() -> None:
    shard = make(shard_object())
    rendered = render_shard(shard, None, RELEASE)
    observed: dict[str, JSON | None] = {o["kind"]: copy.deepcopy(o) for o in rendered.objects}
    edited = observed["Deployment"]
    assert edited is not None
    edited["metadata"]["managedFields"] = [
        managed(
            "kubectl-patch",
            {"f:spec": {"f:template": {"f:spec": {"f:containers": {KCP: {"f:env": {}}}}}}},
        )
    ]
    assert [o["kind"] for o in plan(shard, None, observed, RELEASE).apply] == ["Deployment"]


def test_replacement_keeps_allocated_fields_and_foreign_metadata() -> None:
    service = render_shard(make(shard_object()), None, RELEASE).service
    live = copy.deepcopy(service)
    live["metadata"].update(
        resourceVersion="7",
        finalizers=["f"],
        annotations={**live["metadata"]["annotations"], "other": "x"},
    )
    live["spec"].update(clusterIP="10.0.0.7", clusterIPs=["10.0.0.7"], sessionAffinity="None")
    live["spec"]["ports"] = [{"name": "https", "port": 7777}]
    body = replacement(service, live)
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["metadata"]["finalizers"] == ["f"]
    assert body["metadata"]["annotations"]["other"] == "x"
    assert body["metadata"]["ownerReferences"] == service["metadata"]["ownerReferences"]
    assert body["spec"]["clusterIP"] == "10.0.0.7"
    assert body["spec"]["ports"] == service["spec"]["ports"]
    assert "sessionAffinity" not in body["spec"]


def test_missing_mounted_secrets_are_named() -> None:
    shard = make(shard_object(tls={"clientCASecretRef": {"name": "ca"}}))
    assert plan(shard, None, {}, RELEASE, {"ca": ""}).missing_secrets == ["ca"]
    assert plan(shard, None, {}, RELEASE, {"ca": "5"}).missing_secrets == []


@pytest.mark.parametrize(
    ("running", "wanted", "refused"),
    [
        ("0.28.0", "0.27.1", True),
        ("0.28.3", "0.27.9", True),
        ("1.0.0", "0.99.0", True),
        ("0.28.1", "0.28.0", False),
        ("0.28.0", "0.28.0-rc.1", False),
        ("0.27.1", "0.28.0", False),
        ("0.28.0", "0.28.0", False),
        (None, "0.27.1", False),
        ("not-a-version", "0.27.1", False),
    ],
)
def test_downgrade_to_an_older_minor_is_refused(
    running: str | None, wanted: str, refused: bool
) -> None:
    shard = make(shard_object(version=wanted))
    observed: dict[str, JSON | None] = {"Deployment": deployment_at(running) if running else None}
    decision = plan(shard, None, observed, RELEASE)
    assert (decision.error is not None) is refused
    if refused:
        assert decision.error_reason == "DowngradeRefused"
        assert f"the shard stays at kcp {running}" in (decision.error or "")
        assert decision.apply == []


def test_refused_downgrade_keeps_the_running_version_but_follows_the_rest_of_its_spec() -> None:
    running = render_shard(make(shard_object(version="0.28.0")), None, RELEASE)
    observed: dict[str, JSON | None] = {o["kind"]: o for o in running.objects}
    wanted = shard_object(version="0.27.1", replicas=2, etcd={"endpoints": ["https://e:2379"]})
    decision = plan(make(wanted), None, observed, RELEASE)
    assert decision.error_reason == "DowngradeRefused"
    assert decision.waiting is None
    kinds = {o["kind"]: o for o in decision.apply}
    assert sorted(kinds) == ["Deployment", "PodDisruptionBudget"]
    template = kinds["Deployment"]["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "0.28.0"
    assert template["spec"]["containers"][0]["image"] == "ghcr.io/kcp-dev/kcp:v0.28.0"
    assert kinds["Deployment"]["spec"]["replicas"] == 2


def test_non_root_downgrade_is_refused_rather_than_waiting() -> None:
    root = root_with("0.28.0", spec_version="0.27.1")
    running = render_shard(make(non_root_object(version="0.28.0")), root, RELEASE)
    observed: dict[str, JSON | None] = {o["kind"]: o for o in running.objects}
    decision = plan(make(non_root_object(version="0.27.1")), root, observed, RELEASE)
    assert decision.error_reason == "DowngradeRefused"
    assert decision.waiting is None
    assert decision.apply == []


def test_minor_upgrade_recreates_then_rolls_again_with_the_next_write() -> None:
    def at(spec_version: str, rolled_out: str) -> Shard:
        obj = shard_object(version=spec_version, replicas=2, etcd={"endpoints": ["https://e"]})
        obj["status"] = {"version": rolled_out}
        return make(obj)

    old = render_shard(at("0.27.1", "0.27.1"), None, RELEASE)
    observed: dict[str, JSON | None] = {o["kind"]: o for o in old.objects}
    upgrade = {o["kind"]: o for o in plan(at("0.28.0", "0.27.1"), None, observed, RELEASE).apply}
    assert upgrade["Deployment"]["spec"]["strategy"] == {"type": "Recreate"}
    template = upgrade["Deployment"]["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "0.28.0"
    observed.update(upgrade)
    during = plan(at("0.28.0", "0.27.1"), None, observed, RELEASE)
    assert during.apply == []
    assert plan(at("0.28.0", "0.28.0"), None, observed, RELEASE).apply == []
    patch = at("0.28.1", "0.28.0")
    then = {o["kind"]: o for o in plan(patch, None, observed, RELEASE).apply}
    assert then["Deployment"]["spec"]["strategy"]["type"] == "RollingUpdate"
    assert then["Deployment"]["spec"]["template"] != template


def test_a_hand_edit_after_a_minor_upgrade_is_put_back_with_rolling_updates() -> None:
    obj = shard_object(version="0.28.0", replicas=2, etcd={"endpoints": ["https://e"]})
    moving = make({**obj, "status": {"version": "0.27.1"}})
    live = render_shard(moving, None, RELEASE).deployment
    live["metadata"]["managedFields"] = [
        managed(FIELD_MANAGER, {"f:spec": {"f:replicas": {}}}),
        managed("kubectl-edit", {"f:spec": {"f:template": {"f:spec": {"f:hostNetwork": {}}}}}),
    ]
    rolled_out = make({**obj, "status": {"version": "0.28.0"}})
    decision = plan(rolled_out, None, {"Deployment": live}, RELEASE)
    written = {o["kind"]: o for o in decision.apply}
    assert written["Deployment"]["spec"]["strategy"]["type"] == "RollingUpdate"


def test_waiting_non_root_shard_keeps_rolling_updates() -> None:
    root = root_with("0.27.1", spec_version="0.28.0")
    obj = non_root_object(version="0.28.0")
    obj["status"] = {"version": "0.27.1"}
    running = render_shard(make(non_root_object(version="0.27.1")), root, RELEASE)
    observed: dict[str, JSON | None] = {o["kind"]: o for o in running.objects}
    decision = plan(make(obj), root, observed, RELEASE)
    assert decision.waiting is not None
    assert decision.apply == []
