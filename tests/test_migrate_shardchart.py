"""The deprecated kcp ``shard`` chart's values -> Shard manifest (pure converter)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kcp_shard_operator.shardchart import convert, without_root_shard_flag
from kcp_shard_operator.spec import parse_shard
from kcp_shard_operator.versions import Version

RELEASE = Version(0, 33, 0)
FLAG = "--root-shard-kubeconfig-file"

NON_ROOT: dict[str, Any] = {
    "fullnameOverride": "beta",
    "externalHostname": "kcp.example.com",
    "kcp": {"tag": "v0.34.0"},
    "externalCache": {"enabled": True, "cacheInternalHostname": "cache.kcp"},
    "sharding": {
        "enabled": True,
        "isRoot": False,
        "rootShardInternalHostname": "root-internal.kcp.svc",
    },
}


def values(**changes: Any) -> dict[str, Any]:
    """NON_ROOT with dotted-path changes (None deletes)."""
    data = copy.deepcopy(NON_ROOT)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return data


@pytest.mark.parametrize(
    ("changes", "path", "want"),
    [
        ({}, "metadata.name", "beta"),
        ({"fullnameOverride": None}, "metadata.name", "kcp-shard"),
        ({}, "spec.version", "0.34.0"),
        ({}, "spec.image", {"repository": "ghcr.io/kcp-dev/kcp", "tag": "v0.34.0"}),
        ({"kcp__image": "registry.local/kcp"}, "spec.image.repository", "registry.local/kcp"),
        ({"kcp__pullPolicy": "Always"}, "spec.image.pullPolicy", "Always"),
        ({}, "spec.rootShardRef", {"name": "root"}),
        ({"sharding__rootShardInternalHostname": "alpha.kcp"}, "spec.rootShardRef.name", "alpha"),
        ({"sharding__isRoot": True}, "spec.rootShardRef", None),
        ({"sharding__enabled": False}, "spec.rootShardRef", None),
        (
            {},
            "spec.cache.kubeconfigSecretRef",
            {"name": "beta-cache-kubeconfig", "key": "kubeconfig"},
        ),
        ({}, "spec.etcd.endpoints", ["https://beta-etcd:2379"]),
        ({}, "spec.etcd.tlsSecretRef.name", "beta-etcd-client-cert"),
        (
            {"kcp__etcd": {"serverAddress": "https://e1:2379, https://e2:2379"}},
            "spec.etcd.endpoints",
            ["https://e1:2379", "https://e2:2379"],
        ),
        ({"kcp__etcd": {"serverAddress": "embedded"}}, "spec.etcd", None),
        ({"etcd": {"enabled": False}}, "spec.etcd", None),
        ({}, "spec.externalURL", "https://kcp.example.com:443"),
        (
            {"kcpFrontProxy": {"service": {"type": "LoadBalancer"}}},
            "spec.externalURL",
            "https://kcp.example.com:8443",
        ),
        ({}, "spec.tls.clientCASecretRef.name", "beta-kcp-client-ca"),
        (
            {"certificates": {"name": "certs"}},
            "spec.tls.clientCASecretRef.name",
            "certs-kcp-client-ca",
        ),
        ({}, "spec.tls.servingCertSecretRef.name", "beta-cert"),
        (
            {"kcp__extraFlags": [f"{FLAG}=/x", "--a", FLAG, "/y", "--b"], "kcp__v": "4"},
            "spec.extraArgs",
            ["--v=4", "--a", "--b"],
        ),
        ({"kcp__batteries": ["admin"]}, "spec.extraArgs", ["--batteries-included=admin"]),
        (
            {"kcp__profiling": {"enabled": True, "port": 7070}},
            "spec.extraArgs",
            ["--profiler-address=0.0.0.0:7070"],
        ),
        (
            {"oidc": {"enabled": True, "issuerUrl": "https://idp", "usernamePrefix": "oidc:"}},
            "spec.extraArgs",
            ["--oidc-issuer-url=https://idp", "--oidc-username-prefix=oidc:"],
        ),
        (
            {
                "oidc": {"enabled": True, "issuerUrl": "https://idp"},
                "authentication": {"configMapRef": {"name": "authn"}},
            },
            "spec.extraArgs",
            None,
        ),
        ({"kcp__resources": {"limits": {"memory": "1Gi"}}}, "spec.resources.limits.memory", "1Gi"),
        ({"kcp__tag": "v0.34.0"}, "spec.rootShardKubeconfigSecretRef", None),
        (
            {"kcp__tag": "v0.32.3"},
            "spec.rootShardKubeconfigSecretRef",
            {"name": "beta-shard-admin-kubeconfig", "key": "kubeconfig"},
        ),
    ],
)
def test_convert_field(changes: dict[str, Any], path: str, want: Any) -> None:
    conversion = convert(values(**changes), deprecating_release=RELEASE)
    assert not conversion.errors
    node: Any = conversion.manifest
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    assert node == want


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"externalCache": {"enabled": False}}, "--cache-kubeconfig is required for non-root"),
        ({"externalCache": None}, "neither cache.enabled nor externalCache.enabled"),
        ({"kcp__tag": ""}, "kcp.tag is empty"),
        ({"kcp__tag": "latest"}, "'latest' is not a semantic version"),
    ],
)
def test_convert_errors(changes: dict[str, Any], error: str) -> None:
    conversion = convert(values(**changes), deprecating_release=RELEASE)
    assert conversion.manifest is None
    assert any(error in e for e in conversion.errors), conversion.errors


def test_root_without_cache_is_fine() -> None:
    data = values(externalCache=None, sharding__isRoot=True)
    assert convert(data, deprecating_release=RELEASE).errors == ()


def test_name_and_version_overrides() -> None:
    data = values(fullnameOverride=None, kcp__tag="")
    conversion = convert(data, deprecating_release=RELEASE, name="prod-shard", version="0.34.0")
    assert conversion.manifest is not None
    assert conversion.manifest["metadata"]["name"] == "prod-shard"
    assert conversion.manifest["spec"]["version"] == "0.34.0"
    assert conversion.manifest["spec"]["cache"]["kubeconfigSecretRef"]["name"] == (
        "prod-shard-cache-kubeconfig"
    )


def test_unmapped_settings_are_listed() -> None:
    data = values(
        oidc={"enabled": True, "issuerUrl": "https://idp", "caSecretName": "oidc-ca"},
        audit={"enabled": False},
        kcp__extraVolumes=[{"name": "x"}],
        kcp__sharding={"isRoot": False},
    )
    conversion = convert(data, deprecating_release=RELEASE)
    assert conversion.unmapped == (
        "kcp.extraVolumes: [{'name': 'x'}]",
        "oidc.caSecretName: 'oidc-ca'",
    )
    assert any("kcp.sharding.* is read by nothing" in n for n in conversion.notes)


@pytest.mark.parametrize("tag", ["v0.32.3", "v0.34.0", "v0.34.1"])
def test_manifest_is_a_valid_shard(tag: str) -> None:
    conversion = convert(values(kcp__tag=tag), deprecating_release=RELEASE)
    assert conversion.manifest is not None
    shard = parse_shard(conversion.manifest, RELEASE)
    assert shard.name == "beta"
    assert not shard.spec.is_root


@pytest.mark.parametrize(
    ("args", "want"),
    [
        ([], []),
        ([f"{FLAG}=/x"], []),
        ([FLAG, "/x", "--a"], ["--a"]),
        (["--a", FLAG], ["--a"]),
        ([f"{FLAG}-other=1"], [f"{FLAG}-other=1"]),
    ],
)
def test_without_root_shard_flag(args: list[str], want: list[str]) -> None:
    assert without_root_shard_flag(args) == want


def test_authentication_config_map_is_listed_not_carried() -> None:
    data = values(
        oidc={"enabled": True, "issuerUrl": "https://idp"},
        authentication={"configMapRef": {"name": "authn"}},
    )
    conversion = convert(data, deprecating_release=RELEASE)
    assert conversion.unmapped == (
        "oidc.enabled: True",
        "oidc.issuerUrl: 'https://idp'",
        "authentication.configMapRef.name: 'authn'",
    )
