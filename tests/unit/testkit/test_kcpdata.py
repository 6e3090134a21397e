"""The data checker's verdicts against a fake shard: intact, missing, replaced, changed,
unreachable (the real kcp runs are tests/e2e/test_kcp_data.py and the kind tests)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testkit import kcpdata
from testkit.kcpapi import JSON, ShardAPI, UnreachableError, base_url
from testkit.kcpdata import KcpData, Record

CM = "/clusters/abc/api/v1/namespaces/data-check/configmaps/data-check"
EXPORT = "/clusters/abc/apis/apis.kcp.io/v1alpha1/apiexports/x"


@dataclass(frozen=True)
class FakeShard(ShardAPI):
    objects: dict[str, JSON] = field(default_factory=dict)
    down: bool = False
    patches: list[tuple[str, JSON, str]] = field(default_factory=list)

    def request(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, JSON]:
        if self.down:
            raise UnreachableError(f"{method} {path}: connection refused")
        if method == "PATCH" and body is not None:
            self.patches.append((path, body, content_type))
        if path in self.objects:
            return 200, self.objects[path]
        return 404, {"kind": "Status"}


def configmap(uid: str, token: str) -> JSON:
    return {"metadata": {"uid": uid}, "data": {"token": token}}


def export(uid: str, identity: str) -> JSON:
    return {"metadata": {"uid": uid}, "status": {"identityHash": identity}}


def records() -> list[Record]:
    return [
        Record("ConfigMap", "shard-1", "ws/cm", CM, "uid-cm", {"data": {"token": "t1"}}),
        Record("APIExport", "shard-1", "ws/x", EXPORT, "uid-ex", {"identityHash": "h1"}),
    ]


def shard(objects: dict[str, JSON], down: bool = False) -> dict[str, ShardAPI]:
    return {"shard-1": FakeShard("shard-1", Path("unused"), objects=objects, down=down)}


def test_intact_objects_are_reported_found(tmp_path: Path) -> None:
    data = KcpData(records(), report=tmp_path / "report.txt")
    objects = {CM: configmap("uid-cm", "t1"), EXPORT: export("uid-ex", "h1")}
    assert data.verify(shard(objects), "after nothing") == []
    assert "2 created, 2 found unchanged (all intact)" in data.tables[-1]
    assert (tmp_path / "report.txt").read_text().startswith("data check after nothing")


@pytest.mark.parametrize(
    ("objects", "state"),
    [
        ({EXPORT: export("uid-ex", "h1")}, "missing"),
        ({CM: configmap("uid-other", "t1"), EXPORT: export("uid-ex", "h1")}, "replaced"),
        ({CM: configmap("uid-cm", "t2"), EXPORT: export("uid-ex", "h1")}, "changed"),
    ],
)
def test_a_lost_or_altered_object_is_reported(objects: dict[str, JSON], state: str) -> None:
    data = KcpData(records())
    problems = data.verify(shard(objects), "after a step")
    assert [(p.record.kind, p.state) for p in problems] == [("ConfigMap", state)]
    assert "1 found unchanged" in data.tables[-1]
    with pytest.raises(AssertionError, match=f"(?s)data lost after a step.*{state}"):
        data.assert_intact(shard(objects), "after a step")


def test_an_unreachable_shard_is_a_problem_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kcpdata, "UNREACHABLE_WAIT", 0)
    problems = KcpData(records()).verify(shard({}, down=True), "while down")
    assert {p.state for p in problems} == {"unreachable"}


def test_the_base_url_drops_a_clusters_path() -> None:
    assert base_url("https://127.0.0.1:6443/clusters/root") == "https://127.0.0.1:6443"
    assert base_url("https://kcp.example:6443/") == "https://kcp.example:6443"


LC = "/clusters/abc/apis/core.kcp.io/v1alpha1/logicalclusters/cluster"


def logical_cluster(phase: str, reason: str, message: str) -> JSON:
    condition = {"type": "APIBindingsInitialized", "status": "False", "reason": reason}
    return {"status": {"phase": phase, "conditions": [{**condition, "message": message}]}}


def test_a_workspace_the_apibinding_initializer_gave_up_on_is_tried_again() -> None:
    types = kcpdata.WORKSPACE_TYPES_PATH
    with_bindings = {"metadata": {"name": "universal"}, "spec": {"defaultAPIBindings": [{}]}}
    without = {"metadata": {"name": "plain"}, "spec": {}}
    root = FakeShard("root", Path("unused"), objects={types: {"items": [with_bindings, without]}})
    target = FakeShard("shard-1", Path("unused"))
    gave_up = "encountered errors: error getting logicalcluster abc|cluster: not found"
    kcpdata.unstick(root, target, LC, logical_cluster("Initializing", "APIBindingErrors", gave_up))
    assert [(path, ct) for path, _, ct in root.patches] == [
        (f"{types}/universal", "application/merge-patch+json")
    ], "the WorkspaceTypes with default APIBindings queue the initializer again"
    assert kcpdata.RETRY_ANNOTATION in root.patches[0][1]["metadata"]["annotations"]
    kcpdata.unstick(root, target, LC, logical_cluster("Initializing", "APIBindingErrors", gave_up))
    assert len(root.patches) == 1, f"at most every {kcpdata.RETRY_SECONDS:g}s"
    other = LC.replace("abc", "def")
    for phase, reason, message in (
        ("Ready", "APIBindingErrors", gave_up),
        ("Initializing", "APIBindingErrors", "APIExport root:missing not found"),
        ("Initializing", "SomethingElse", gave_up),
    ):
        kcpdata.unstick(root, target, other, logical_cluster(phase, reason, message))
    assert len(root.patches) == 1, "only a LogicalCluster the initializer gave up on"
