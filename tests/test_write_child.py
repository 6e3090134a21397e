"""How one child is written: apply, once more, replace, recreate; with a fake API."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kcp_shard_operator.controller.context import Context, Settings
from kcp_shard_operator.controller.writes import write_child
from kcp_shard_operator.core.model import JSON
from kcp_shard_operator.core.render import render_shard
from kcp_shard_operator.kube.client import RefusedError

from .conftest import RELEASE, make, shard_object


class FakeKube:
    """Records calls; ``refuse`` names the operations that answer 422."""

    def __init__(self, refuse: set[str], echo: JSON | None = None) -> None:
        self.refuse = refuse
        self.echo = echo
        self.calls: list[str] = []

    def _do(self, op: str, obj: JSON) -> JSON:
        self.calls.append(op)
        if op in self.refuse:
            raise RefusedError(422, "Unprocessable Entity")
        return copy.deepcopy(self.echo if self.echo is not None and op == "apply" else obj)

    def apply(self, obj: JSON) -> JSON:
        return self._do("apply", obj)

    def replace(self, obj: JSON, dry_run: bool = False) -> JSON:
        return self._do("dry-run" if dry_run else "replace", obj)

    def delete(self, *args: Any) -> None:
        self.calls.append("delete")


def context(kube: FakeKube) -> Context:
    return Context(settings=Settings(deprecating_release=RELEASE), kube=kube)  # type: ignore[arg-type]


RENDERED = render_shard(make(shard_object()), None, RELEASE)
LIVE_META = {"resourceVersion": "9"}


def live(obj: JSON) -> JSON:
    found = copy.deepcopy(obj)
    found["metadata"].update(LIVE_META)
    return found


@pytest.mark.parametrize(
    ("child", "refuse", "calls", "how"),
    [
        (RENDERED.deployment, set(), ["apply"], "applied"),
        (RENDERED.deployment, {"apply"}, ["apply", "apply", "replace"], "replaced"),
        (RENDERED.service, {"apply", "replace"}, ["apply", "apply", "replace", "delete", "apply"],
         "recreated"),
    ],
)  # fmt: skip
def test_fallbacks(child: JSON, refuse: set[str], calls: list[str], how: str) -> None:
    kube = FakeKube(refuse)
    if how == "recreated":
        # The last apply (after the delete) is allowed.
        original = kube._do

        def once_deleted(op: str, obj: JSON) -> JSON:
            if "delete" in kube.calls:
                kube.refuse = set()
            return original(op, obj)

        kube._do = once_deleted  # type: ignore[method-assign]
    written, done = write_child(context(kube), child, live(child))
    assert (kube.calls, done) == (calls, how)
    assert written["spec"] == child["spec"]


def test_a_deployment_is_never_deleted() -> None:
    kube = FakeKube({"apply", "replace"})
    with pytest.raises(RefusedError):
        write_child(context(kube), RENDERED.deployment, live(RENDERED.deployment))
    assert "delete" not in kube.calls


def test_a_refused_new_child_is_reported_not_replaced() -> None:
    kube = FakeKube({"apply"})
    with pytest.raises(RefusedError):
        write_child(context(kube), RENDERED.deployment, None)
    assert kube.calls == ["apply", "apply"]


def test_apply_that_leaves_differences_is_followed_by_a_replace() -> None:
    stale = copy.deepcopy(RENDERED.deployment)
    stale["spec"]["template"]["spec"]["containers"].append({"name": "sidecar"})
    kube = FakeKube(set(), echo=stale)
    _, how = write_child(context(kube), RENDERED.deployment, live(stale))
    assert (kube.calls, how) == (["apply", "replace"], "replaced")


def test_foreign_fields_are_replaced_at_once_unless_they_change_nothing() -> None:
    edited = live(RENDERED.deployment)
    edited["metadata"]["managedFields"] = [
        {"manager": "kubectl-edit", "fieldsV1": {"f:spec": {"f:paused": {}}}}
    ]
    kube = FakeKube(set())
    _, how = write_child(context(kube), RENDERED.deployment, edited)
    assert (kube.calls, how) == (["dry-run"], "unchanged")
    edited["spec"]["paused"] = True
    kube = FakeKube(set())
    _, how = write_child(context(kube), RENDERED.deployment, edited)
    assert (kube.calls, how) == (["dry-run", "replace"], "replaced")
