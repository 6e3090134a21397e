from __future__ import annotations

import typing
from typing import Any

import pytest

from kcp_shard_operator.core.api.model import SpecError
from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.core.shard.spec import parse_shard
from tests.conftest import RELEASE, make, non_root_object, shard_object


def test_defaults() -> None:
    spec = make(shard_object()).spec
    assert spec.image.repository == "ghcr.io/kcp-dev/kcp"
    assert spec.image_ref == "ghcr.io/kcp-dev/kcp:v0.34.0"
    assert spec.is_root
    assert spec.extra_args == []


def test_minimal_shard_is_valid_with_one_replica() -> None:
    obj = shard_object()
    del obj["spec"]["replicas"]
    assert make(obj).spec.replicas == 1


def test_image_tag_override() -> None:
    spec = make(shard_object(image={"repository": "r.example/kcp", "tag": "dev"})).spec
    assert spec.image_ref == "r.example/kcp:dev"


def test_namespace_defaults_to_default() -> None:
    obj = shard_object()
    del obj["metadata"]["namespace"]
    assert make(obj).namespace == "default"


@pytest.mark.parametrize(
    ("obj", "path", "fragment"),
    [
        (shard_object(version="v0.34.0"), "spec.version", "does not match"),
        (shard_object(version="0.33"), "spec.version", "does not match"),
        (shard_object(version=33), "spec.version", "must be a string"),
        (shard_object(version="0.26.9"), "spec.version", "older than the oldest supported"),
        (shard_object(replicas=0), "spec.replicas", "at least 1"),
        (shard_object(replicas="2"), "spec.replicas", "must be an integer"),
        (shard_object(replicas=True), "spec.replicas", "must be an integer"),
        (shard_object(replicas=3), "spec", "needs spec.etcd.endpoints"),
        (shard_object(replicas=11), "spec.replicas", "at most 10"),
        (shard_object(extraArgs="--v=2"), "spec.extraArgs", "must be a list"),
        (shard_object(extraArgs=["--v=2"] * 65), "spec.extraArgs", "at most 64 item"),
        (shard_object(extraArgs=["--x=" + "a" * 1021]), "spec.extraArgs[0]", "at most 1024"),
        (shard_object(version="0.33.0-" + "a" * 60), "spec.version", "at most 63"),
        (shard_object("s" * 60), "metadata.name", "at most 59"),
        (shard_object("shard.one"), "metadata.name", "DNS-1035"),
        (shard_object("1shard"), "metadata.name", "DNS-1035"),
        (shard_object(resources={"limit": {}}), "spec.resources.limit", "unknown field"),
        (
            shard_object(resources={"limits": {"cpu": "two"}}),
            "spec.resources.limits.cpu",
            "not a quantity",
        ),
        (shard_object(resources={"requests": []}), "spec.resources.requests", "must be an object"),
        (shard_object(nodeSelector={"pool": "a b"}), "spec.nodeSelector.pool", "label value"),
        (
            shard_object(tolerations=[{"key": "k", "operator": "Maybe"}]),
            "spec.tolerations[0].operator",
            "one of",
        ),
        (
            shard_object(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
            "spec.tolerations[0].value",
            "operator Exists has no value",
        ),
        (shard_object(tolerations=[{"value": "v"}]), "spec.tolerations[0]", "needs operator"),
        (
            shard_object(tolerations=[{"key": "k", "tolerationSeconds": "5"}]),
            "spec.tolerations[0].tolerationSeconds",
            "must be an integer",
        ),
        (
            shard_object(tolerations=[{"key": "k", "colour": 1}]),
            "spec.tolerations[0].colour",
            "unknown",
        ),
        (shard_object(extraArgs=[1]), "spec.extraArgs[0]", "must be a string"),
        (shard_object(bogus=1), "spec.bogus", "unknown field"),
        (shard_object(image={"pullPolicy": "Sometimes"}), "spec.image.pullPolicy", "one of"),
        (shard_object(rootShardRef={"name": ""}), "spec.rootShardRef.name", "must not be empty"),
        (shard_object(rootShardRef={}), "spec.rootShardRef.name", "is required"),
        (
            non_root_object(cache={}, pki={"issue": False}),
            "spec",
            "need spec.cache.kubeconfigSecretRef",
        ),
        (
            non_root_object(
                version="0.32.3", rootShardKubeconfigSecretRef=None, pki={"issue": False}
            ),
            "spec.rootShardKubeconfigSecretRef",
            "still needs --root-shard-kubeconfig-file",
        ),
    ],
)
def test_validation_errors(obj: dict[str, Any], path: str, fragment: str) -> None:
    with pytest.raises(SpecError) as caught:
        make(obj)
    assert caught.value.path == path
    assert fragment in caught.value.message


def test_valid_free_form_fields_pass() -> None:
    spec = make(
        shard_object(
            version="0.34.0-rc.1+build.7",
            image={"tag": "v0.34.0-rc.1-b7"},
            resources={"limits": {"cpu": 2, "memory": "1.5Gi"}, "requests": {"cpu": "500m"}},
            tolerations=[
                {"operator": "Exists"},
                {"key": "k", "value": "v", "effect": "NoSchedule"},
            ],
            nodeSelector={"pool": "kcp_1.a"},
        )
    ).spec
    assert spec.resources == {"limits": {"cpu": 2, "memory": "1.5Gi"}, "requests": {"cpu": "500m"}}


def test_missing_spec_and_name() -> None:
    with pytest.raises(SpecError, match="spec: must be an object"):
        parse_shard({"metadata": {"name": "x"}}, RELEASE)
    with pytest.raises(SpecError, match=r"metadata\.name: is required"):
        parse_shard({"metadata": {}, "spec": {"version": "0.34.0"}}, RELEASE)


def test_new_non_root_needs_no_root_kubeconfig() -> None:
    shard = make(non_root_object(version="0.34.0", rootShardKubeconfigSecretRef=None))
    assert not shard.spec.is_root


def test_configurable_release_changes_requirement() -> None:
    obj = non_root_object(version="0.34.0", rootShardKubeconfigSecretRef=None, pki={"issue": False})
    with pytest.raises(SpecError, match="still needs"):
        parse_shard(obj, Version.parse("0.35.0"))


def test_logical_cluster_admin_kubeconfig_needs_external_url() -> None:
    obj = shard_object(logicalClusterAdminKubeconfigSecretRef={"name": "lca"})
    with pytest.raises(SpecError, match=r"needs spec\.externalURL"):
        parse_shard(obj, RELEASE)
    obj["spec"]["externalURL"] = "https://kcp.example.com"
    assert parse_shard(obj, RELEASE).spec.logical_cluster_admin_kubeconfig_secret_ref


def test_build_metadata_needs_an_image_tag() -> None:
    with pytest.raises(SpecError, match=r"needs spec\.image\.tag"):
        parse_shard(shard_object(version="0.34.0+build.1"), RELEASE)
    obj = shard_object(version="0.34.0+build.1", image={"tag": "v0.34.0-build.1"})
    assert parse_shard(obj, RELEASE).spec.image_ref.endswith(":v0.34.0-build.1")


def test_a_models_type_hints_are_resolved_once_not_at_every_parse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Resolving string annotations compiles each one: a thousand Shards parsed per resync
    must not pay it a thousand times."""
    resolved: list[type] = []
    real = typing.get_type_hints

    def counting(cls: type) -> dict[str, Any]:
        resolved.append(cls)
        return real(cls)

    monkeypatch.setattr(typing, "get_type_hints", counting)
    parse_shard(shard_object(), RELEASE)
    first = len(resolved)
    parse_shard(shard_object(), RELEASE)
    assert len(resolved) == first
    assert len(set(resolved)) == first
