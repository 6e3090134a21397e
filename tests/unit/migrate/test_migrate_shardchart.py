"""The deprecated kcp ``shard`` chart's values -> Shard manifest (pure converter)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kcp_shard_operator.core.kcp.flags import flag_name
from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.spec import parse_shard
from kcp_shard_operator.migrate.chartflags import template_flags
from kcp_shard_operator.migrate.shardchart import convert

RELEASE = Version(0, 34, 0)
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


HEAD = ["--enable-home-workspaces=false"]
BATTERIES = "--batteries-included=workspace-types"
DEFAULT_ARGS = [*HEAD, "--v=3", "--logging-format=json", BATTERIES]


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
        (
            {},
            "spec.image",
            {"repository": "ghcr.io/kcp-dev/kcp", "tag": "v0.34.0", "pullPolicy": "IfNotPresent"},
        ),
        ({}, "spec.replicas", 1),
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
        ({}, "spec.tls.clientCASecretRef.name", "certs-kcp-client-ca"),
        ({"certificates": {"name": ""}}, "spec.tls.clientCASecretRef.name", "beta-kcp-client-ca"),
        (
            {},
            "spec.tls.requestHeaderClientCASecretRef",
            {"name": "certs-kcp-requestheader-client-ca", "key": "tls.crt"},
        ),
        ({}, "spec.tls.rootCASecretRef", {"name": "certs-kcp-ca", "key": "tls.crt"}),
        ({}, "spec.tls.shardClientCertSecretRef.name", "beta-shard-client-cert"),
        ({"sharding": {"enabled": False}}, "spec.tls.shardClientCertSecretRef", None),
        ({}, "spec.logicalClusterAdminKubeconfigSecretRef.name", "beta-internal-admin-kubeconfig"),
        (
            {"kcp__logicalClusterAdminFlag": False},
            "spec.logicalClusterAdminKubeconfigSecretRef",
            None,
        ),
        (
            {},
            "spec.externalLogicalClusterAdminKubeconfigSecretRef.name",
            "beta-external-admin-kubeconfig",
        ),
        (
            {"certificates": {"name": "certs"}},
            "spec.tls.clientCASecretRef.name",
            "certs-kcp-client-ca",
        ),
        ({}, "spec.tls.servingCertSecretRef.name", "beta-cert"),
        (
            {"kcp__extraFlags": [f"{FLAG}=/x", "--a", FLAG, "/y", "--b"], "kcp__v": "4"},
            "spec.extraArgs",
            [*HEAD, "--v=4", "--logging-format=json", BATTERIES, "--a", "--b"],
        ),
        (
            {"kcp__extraFlags": ["--cache-server-kubeconfig-file=/c", "--external-hostname=h"]},
            "spec.extraArgs",
            [*DEFAULT_ARGS, "--cache-kubeconfig=/c"],
        ),
        ({}, "spec.extraArgs", DEFAULT_ARGS),
        (
            {"kcp__batteries": ["admin"]},
            "spec.extraArgs",
            [*HEAD, "--v=3", "--logging-format=json", "--batteries-included=admin"],
        ),
        (
            {"kcp__profiling": {"enabled": True, "port": 7070}},
            "spec.extraArgs",
            [*HEAD, "--v=3", "--logging-format=json", "--profiler-address=0.0.0.0:7070", BATTERIES],
        ),
        (
            {"oidc": {"enabled": True, "issuerUrl": "https://idp", "usernamePrefix": "oidc:"}},
            "spec.extraArgs",
            [
                *HEAD,
                "--oidc-issuer-url=https://idp",
                "--oidc-client-id=",
                "--oidc-groups-claim=",
                "--oidc-username-claim=",
                "--oidc-username-prefix=oidc:",
                "--oidc-groups-prefix=",
                *DEFAULT_ARGS[1:],
            ],
        ),
        (
            {
                "oidc": {"enabled": True, "issuerUrl": "https://idp"},
                "authentication": {"configMapRef": {"name": "authn"}},
            },
            "spec.extraArgs",
            DEFAULT_ARGS,
        ),
        ({"kcp__resources": {"limits": {"memory": "1Gi"}}}, "spec.resources.limits.memory", "1Gi"),
        ({}, "spec.resources.requests.memory", "512Mi"),
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
    assert len(conversion.errors) == 1, conversion.errors
    assert error in conversion.errors[0]


def test_root_without_cache_is_fine() -> None:
    data = values(externalCache=None, sharding__isRoot=True)
    assert convert(data, deprecating_release=RELEASE).errors == ()


def test_name_and_version_overrides() -> None:
    data = values(fullnameOverride=None, kcp__tag="")
    conversion = convert(data, deprecating_release=RELEASE, name="prod-shard", version="v0.34.0")
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
    assert conversion.unmapped == ("kcp.extraVolumes: [{'name': 'x'}]",)
    assert any(u.startswith("--oidc-ca-file: ") for u in conversion.unrendered)
    assert any("kcp.sharding.* is read by nothing" in n for n in conversion.notes)


@pytest.mark.parametrize("tag", ["v0.32.3", "v0.34.0", "v0.34.1"])
def test_manifest_is_a_valid_shard(tag: str) -> None:
    conversion = convert(values(kcp__tag=tag), deprecating_release=RELEASE)
    assert conversion.manifest is not None
    shard = parse_shard(conversion.manifest, RELEASE)
    assert shard.name == "beta"
    assert not shard.spec.is_root


def test_authentication_config_map_is_listed_not_carried() -> None:
    data = values(
        oidc={"enabled": True, "issuerUrl": "https://idp"},
        authentication={"configMapRef": {"name": "authn"}},
    )
    conversion = convert(data, deprecating_release=RELEASE)
    assert conversion.unmapped == ("oidc.enabled: True", "oidc.issuerUrl: 'https://idp'")
    assert any(u.startswith("--authentication-config: ") for u in conversion.unrendered)


CHART_EXAMPLES = {
    "partial root": {"externalHostname": "kcp.example.com", "kcp": {"tag": "v0.32.3"}},
    "non-root before the release": values(kcp__tag="v0.32.3", kcp__extraFlags=[f"{FLAG}=/x"]),
    "non-root": values(),
    "embedded etcd": {
        "externalHostname": "kcp.example.com",
        "kcp": {"tag": "v0.34.0", "etcd": {"serverAddress": "embedded"}},
        "etcd": {"enabled": False},
    },
    "everything on": values(
        audit={"enabled": True},
        oidc={"enabled": True, "issuerUrl": "https://idp", "caSecretName": "oidc-ca"},
        kcp__tokenAuth={"enabled": True},
        kcp__profiling={"enabled": True},
    ),
    "authentication config": values(authentication={"configMapRef": {"name": "authn"}}),
}


@pytest.mark.parametrize("data", CHART_EXAMPLES.values(), ids=CHART_EXAMPLES.keys())
def test_every_template_flag_is_rendered_or_reported(data: dict[str, Any]) -> None:
    conversion = convert(data, deprecating_release=RELEASE)
    assert conversion.manifest is not None, conversion.errors
    shard = parse_shard(conversion.manifest, RELEASE)
    root = None
    if not shard.spec.is_root:
        root_obj = {
            "metadata": {"name": "root", "namespace": "default"},
            "spec": {"version": "0.34.0", "replicas": 1},
        }
        root = parse_shard(root_obj, RELEASE)
    args = render_shard(shard, root, RELEASE).deployment["spec"]["template"]["spec"]["containers"][
        0
    ]["args"]
    rendered = {flag_name(a) for a in args}
    reported = " ".join((*conversion.unrendered, *conversion.notes))
    for row in template_flags(data):
        for flag in row.flags:
            assert flag in rendered or flag in reported, (flag, row.carried)
    assert len(args) == len(set(args)), "a flag is rendered twice"


def test_partial_values_use_the_chart_default_secret_names() -> None:
    conversion = convert(CHART_EXAMPLES["partial root"], deprecating_release=RELEASE)
    assert conversion.manifest is not None
    tls = conversion.manifest["spec"]["tls"]
    assert tls["clientCASecretRef"] == {"name": "certs-kcp-client-ca"}
    assert tls["serviceAccountKeySecretRef"] == {"name": "certs-kcp-service-account-ca"}
    assert conversion.manifest["spec"]["etcd"]["endpoints"] == ["https://kcp-shard-etcd:2379"]
    assert conversion.unmapped == ()


def test_embedded_etcd_converts_to_a_shard_the_crd_accepts() -> None:
    conversion = convert(CHART_EXAMPLES["embedded etcd"], deprecating_release=RELEASE)
    assert conversion.manifest is not None
    spec = parse_shard(conversion.manifest, RELEASE).spec
    assert spec.replicas == 1
    assert spec.etcd.endpoints == []


def test_root_flag_before_the_release_is_rendered_once() -> None:
    conversion = convert(CHART_EXAMPLES["non-root before the release"], deprecating_release=RELEASE)
    assert conversion.manifest is not None
    assert FLAG not in " ".join(conversion.manifest["spec"]["extraArgs"])
    assert any("the operator passes" in n for n in conversion.notes)
