"""Passes beyond the changed Shard: a root's dependents, the users of a rotated Secret."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kcp_shard_operator.controller import fanout
from kcp_shard_operator.controller.fanout import (
    dependents,
    reconcile_referencing,
    reconcile_with_dependents,
    referencing,
)
from kcp_shard_operator.core.api.meta import SECRETS_ANNOTATION, VERSION_ANNOTATION
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.shard.spec import parse_shard
from tests.conftest import non_root_object, shard_object
from tests.fake_kube import (
    LOGGER,
    SECRETS,
    FakeKube,
    context,
    respec,
    rolled_out,
    secret,
    settle,
    watched,
)

OTHER_NS = {**non_root_object("elsewhere"), "metadata": {"name": "elsewhere", "namespace": "ns2"}}
SHARDS = (
    shard_object(),
    non_root_object("shard-1"),
    non_root_object("shard-2", tls={"servingCertSecretRef": {"name": "serving"}}),
    non_root_object("shard-3", rootShardRef={"name": "other-root"}),
    non_root_object("broken", version="not-a-version"),
    OTHER_NS,
)


def test_dependents_are_the_shards_of_the_namespace_naming_the_root() -> None:
    ctx = context(FakeKube(*SHARDS))
    assert sorted(dependents(ctx, "ns", "root")) == ["broken", "shard-1", "shard-2"]
    assert dependents(ctx, "ns", "other-root") == ["shard-3"]
    assert dependents(ctx, "ns2", "other-root") == []


@pytest.mark.parametrize(
    ("secret", "namespace", "shards"),
    [
        ("cache", "ns", ["shard-1", "shard-2", "shard-3"]),
        ("serving", "ns", ["shard-2"]),
        ("root-admin", "ns2", ["elsewhere"]),
        ("unrelated", "ns", []),
    ],
)
def test_referencing_names_the_valid_shards_that_may_mount_the_secret(
    secret: str, namespace: str, shards: list[str]
) -> None:
    ctx = context(FakeKube(*SHARDS))
    assert sorted(referencing(ctx, namespace, secret)) == shards


def deployment_of(kube: FakeKube, name: str) -> JSON | None:
    return kube.objects.get(("Deployment", "ns", f"{name}-kcp"))


@pytest.mark.parametrize(
    ("changed", "passes"),
    [
        ("root", {"root", "shard-1", "shard-2"}),
        ("shard-1", {"shard-1"}),
    ],
)
def test_a_root_s_change_brings_a_pass_over_each_of_its_dependents(
    changed: str, passes: set[str]
) -> None:
    kube = FakeKube(
        rolled_out(shard_object()),
        non_root_object("shard-1"),
        non_root_object("shard-2"),
        non_root_object("shard-3", rootShardRef={"name": "other-root"}),
        *SECRETS,
    )
    ctx = context(kube)
    spec = copy.deepcopy(kube.objects[("Shard", "ns", changed)]["spec"])
    reconcile_with_dependents(ctx, "ns", changed, spec, LOGGER)
    applied = {name.split("-kcp")[0] for op, _, name in kube.writes if op == "apply"}
    assert applied == passes


def test_a_dependent_waiting_for_its_root_rolls_once_the_root_has_rolled_out() -> None:
    old = "0.33.0"
    kube = FakeKube(shard_object(version=old), non_root_object(version=old), *SECRETS)
    ctx = context(kube)
    settle(ctx, kube, "root", "shard-1")
    respec(ctx, kube, "root", version="0.34.0")
    respec(ctx, kube, "shard-1", version="0.34.0")
    reconcile_with_dependents(ctx, "ns", "shard-1", {"rootShardRef": {"name": "root"}}, LOGGER)
    assert kube.objects[("Shard", "ns", "shard-1")]["status"]["phase"] == "WaitingForRootShard"

    root_spec = kube.objects[("Shard", "ns", "root")]["spec"]
    reconcile_with_dependents(ctx, "ns", "root", root_spec, LOGGER)
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    held = deployment_of(kube, "shard-1")
    assert held is not None
    assert held["spec"]["template"]["metadata"]["annotations"][VERSION_ANNOTATION] == old

    reconcile_with_dependents(ctx, "ns", "root", root_spec, LOGGER)
    rolled = deployment_of(kube, "shard-1")
    assert rolled is not None
    assert rolled["spec"]["template"]["metadata"]["annotations"][VERSION_ANNOTATION] == "0.34.0"


def test_a_rotated_secret_rolls_the_pods_of_the_shards_mounting_it() -> None:
    kube = FakeKube(shard_object(), non_root_object(), *SECRETS)
    ctx = context(kube)
    settle(ctx, kube, "root", "shard-1")

    def digests() -> dict[str, str]:
        return {
            name: (deployment_of(kube, name) or {})["spec"]["template"]["metadata"]["annotations"][
                SECRETS_ANNOTATION
            ]
            for name in ("root", "shard-1")
        }

    before = digests()
    watched(ctx, kube.put(secret("cache", kubeconfig="cm90YXRlZA==")))
    reconcile_referencing(ctx, "ns", "cache", LOGGER)
    after = digests()
    assert after["root"] == before["root"]
    assert after["shard-1"] != before["shard-1"]
    writes = len(kube.writes)
    reconcile_referencing(ctx, "ns", "unrelated", LOGGER)
    assert len(kube.writes) == writes


def test_what_each_shard_mounts_is_made_again_only_when_it_its_root_or_proxy_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Secret's event asks every Shard of the namespace whether it mounts the Secret: a
    thousand issued Secrets must not parse a thousand Shards each."""
    kube = FakeKube(*SHARDS)
    ctx = context(kube)
    parsed: list[str] = []

    def counting(body: JSON, release: Any) -> Any:
        parsed.append(body["metadata"]["name"])
        return parse_shard(body, release)

    monkeypatch.setattr(fanout, "parse_shard", counting)
    first = sorted(referencing(ctx, "ns", "cache"))
    assert parsed, "made once"
    parsed.clear()
    for secret_name in ("cache", "serving", "unrelated"):
        referencing(ctx, "ns", secret_name)
    assert parsed == [], "nothing changed: nothing parsed"
    assert sorted(referencing(ctx, "ns", "cache")) == first
    respec(ctx, kube, "shard-2", tls={"servingCertSecretRef": {"name": "other"}})
    assert referencing(ctx, "ns", "other") == ["shard-2"]
    assert set(parsed) <= {"shard-2", "root"}
    parsed.clear()
    respec(ctx, kube, "root", replicas=3)
    referencing(ctx, "ns", "cache")
    assert {"shard-1", "shard-2"} <= set(parsed), "the root changed: its dependents again"
    assert "shard-3" not in parsed, "another installation's Shard stays"
