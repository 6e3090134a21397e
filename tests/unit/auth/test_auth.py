"""spec.auth of FrontProxy and Shard: the flags and mounts each setting renders, on every kcp
version the operator runs, and the input it refuses."""

from __future__ import annotations

from typing import Any

import pytest

from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.frontproxy.render import render_front_proxy
from kcp_shard_operator.core.frontproxy.spec import parse_front_proxy
from kcp_shard_operator.core.installation.plan import proxy_step
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.spec import Shard
from tests.conftest import RELEASE, make, shard_object

SUPPORTED = ("0.27.1", "0.28.0", "0.28.1", "0.30.0", "0.34.0")
OIDC: JSON = {
    "issuerURL": "https://kubernetes.default.svc.cluster.local",
    "clientID": "kcp",
    "usernamePrefix": "oidc:",
    "groupsClaim": "groups",
    "groupsPrefix": "oidc:",
    "caSecretRef": {"name": "issuer-ca"},
}
OIDC_ARGS = [
    "--oidc-issuer-url=https://kubernetes.default.svc.cluster.local",
    "--oidc-client-id=kcp",
    "--oidc-username-claim=sub",
    "--oidc-username-prefix=oidc:",
    "--oidc-groups-claim=groups",
    "--oidc-groups-prefix=oidc:",
    "--oidc-ca-file=/etc/kcp-front-proxy/auth/oidc-ca/ca.crt",
]


def proxy_object(version: str = "0.27.1", **spec: Any) -> JSON:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "FrontProxy",
        "metadata": {"name": "kcp", "namespace": "ns", "uid": "uid-kcp"},
        "spec": {"version": version, "rootShardRef": {"name": "root"}, **spec},
    }


def proxy_pod(version: str = "0.27.1", **spec: Any) -> JSON:
    root = make(shard_object(version=version))
    proxy = parse_front_proxy(proxy_object(version, **spec))
    rendered = render_front_proxy(proxy, root, RELEASE)
    pod: JSON = rendered.deployment["spec"]["template"]["spec"]
    return pod


def auth_args(pod: JSON) -> list[str]:
    """The arguments after the front-proxy's own (the last one is --shards-kubeconfig or, from
    the deprecating release, --shard-peer-kubeconfig)."""
    args: list[str] = pod["containers"][0]["args"]
    last = max(i for i, arg in enumerate(args) if "kubeconfig=" in arg)
    return args[last + 1 :]


def volume(pod: JSON, name: str) -> JSON:
    found: JSON = next(v for v in pod["volumes"] if v["name"] == name)
    return found


@pytest.mark.parametrize("version", SUPPORTED)
def test_oidc_renders_the_same_flags_on_every_kcp_version(version: str) -> None:
    pod = proxy_pod(version, auth={"oidc": OIDC})
    assert auth_args(pod) == OIDC_ARGS
    assert volume(pod, "oidc-ca")["secret"] == {
        "secretName": "issuer-ca",
        "defaultMode": 0o440,
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }


def test_oidc_leaves_kcps_defaults_to_kcp_where_unset() -> None:
    minimal = {"issuerURL": "https://idp.example", "clientID": "c", "groupsPrefix": "g:"}
    pod = proxy_pod(auth={"oidc": minimal})
    # Without a groups claim a groups prefix has nothing to apply to; without a CA the
    # system roots verify the issuer.
    assert auth_args(pod) == [
        "--oidc-issuer-url=https://idp.example",
        "--oidc-client-id=c",
        "--oidc-username-claim=sub",
    ]
    assert all(v["name"] != "oidc-ca" for v in pod["volumes"])


def test_oidc_signing_algorithms_and_required_claims() -> None:
    oidc = {**OIDC, "signingAlgs": ["RS256", "ES256"], "requiredClaims": {"hd": "x", "a": "b"}}
    args = auth_args(proxy_pod(auth={"oidc": oidc}))
    assert "--oidc-signing-algs=RS256,ES256" in args
    assert [a for a in args if a.startswith("--oidc-required-claim")] == [
        "--oidc-required-claim=a=b",
        "--oidc-required-claim=hd=x",
    ]


@pytest.mark.parametrize("version", SUPPORTED)
def test_service_account_tokens_use_the_installations_key(version: str) -> None:
    pod = proxy_pod(version, auth={"serviceAccount": {}})
    assert auth_args(pod) == [
        "--service-account-key-file=/etc/kcp-front-proxy/auth/service-account/service-account.key"
    ]
    assert volume(pod, "service-account-key")["secret"]["secretName"] == (
        "root-kcp-service-account-key"
    )
    assert volume(pod, "service-account-key")["secret"]["items"] == [
        {"key": "tls.key", "path": "service-account.key"}
    ]


def test_service_account_key_of_the_users_secret_and_disabled() -> None:
    ref = {"name": "sa", "key": "sa.pub"}
    pod = proxy_pod(auth={"serviceAccount": {"keySecretRef": ref}})
    assert volume(pod, "service-account-key")["secret"]["items"] == [
        {"key": "sa.pub", "path": "service-account.key"}
    ]
    off = proxy_pod(auth={"serviceAccount": {"enabled": False}})
    assert auth_args(off) == []
    assert all(v["name"] != "service-account-key" for v in off["volumes"])


def test_dropped_groups_keep_kcps_own_first() -> None:
    auth = {"dropGroups": ["team-x", "system:masters", "ext:*"], "passOnGroups": ["team-*"]}
    assert auth_args(proxy_pod(auth=auth)) == [
        "--authentication-drop-groups=system:masters,system:kcp:logical-cluster-admin,team-x,ext:*",
        "--authentication-pass-on-groups=team-*",
    ]


def test_token_file_on_front_proxy() -> None:
    pod = proxy_pod(auth={"tokenFileSecretRef": {"name": "tokens"}})
    assert auth_args(pod) == ["--token-auth-file=/etc/kcp-front-proxy/auth/token-file/tokens.csv"]
    assert volume(pod, "token-file")["secret"]["items"] == [
        {"key": "tokens.csv", "path": "tokens.csv"}
    ]


def test_no_auth_renders_nothing_new() -> None:
    assert auth_args(proxy_pod()) == []


def shard_args(version: str, auth: JSON) -> tuple[list[str], JSON]:
    shard: Shard = make(shard_object(version=version, auth=auth))
    pod: JSON = render_shard(shard, None, RELEASE).deployment["spec"]["template"]["spec"]
    return list(pod["containers"][0]["args"]), pod


@pytest.mark.parametrize("version", SUPPORTED)
def test_shard_auth_flags(version: str) -> None:
    auth = {
        "oidc": {"issuerURL": "https://idp.example", "clientID": "kcp", "usernameClaim": "email"},
        "tokenFileSecretRef": {"name": "tokens", "key": "t.csv"},
        "authorizationWebhook": {"configSecretRef": {"name": "authz"}, "version": "v1beta1"},
    }
    args, pod = shard_args(version, auth)
    assert args[-6:] == [
        "--oidc-issuer-url=https://idp.example",
        "--oidc-client-id=kcp",
        "--oidc-username-claim=email",
        "--token-auth-file=/etc/kcp/auth/token-file/tokens.csv",
        "--authorization-webhook-config-file=/etc/kcp/auth/authorization-webhook/kubeconfig",
        "--authorization-webhook-version=v1beta1",
    ]
    assert volume(pod, "token-file")["secret"]["items"] == [{"key": "t.csv", "path": "tokens.csv"}]
    assert volume(pod, "authorization-webhook")["secret"]["secretName"] == "authz"


@pytest.mark.parametrize(
    ("auth", "path"),
    [
        (
            {"oidc": {"issuerURL": "http://idp.example", "clientID": "c"}},
            "spec.auth.oidc.issuerURL",
        ),
        ({"oidc": {"issuerURL": "https://idp.example"}}, "spec.auth.oidc.clientID"),
        ({"oidc": {**OIDC, "requiredClaims": {"a=b": "c"}}}, "spec.auth.oidc.requiredClaims"),
        ({"dropGroups": ["a,b"]}, "spec.auth.dropGroups[0]"),
        ({"passOnGroups": [""]}, "spec.auth.passOnGroups[0]"),
        ({"serviceAccount": {"enable": True}}, "spec.auth.serviceAccount.enable"),
    ],
)
def test_bad_auth_names_the_field(auth: JSON, path: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_front_proxy(proxy_object(auth=auth))
    assert refused.value.path == path


@pytest.mark.parametrize(
    ("flag", "field"),
    [
        ("--oidc-issuer-url=https://other", "spec.auth.oidc"),
        ("--service-account-key-file=/x", "spec.auth.serviceAccount"),
        ("--authentication-drop-groups=x", "spec.auth.dropGroups"),
    ],
)
def test_extra_args_repeating_an_auth_flag_name_its_field(flag: str, field: str) -> None:
    auth = {"oidc": OIDC, "serviceAccount": {}, "dropGroups": ["x"]}
    with pytest.raises(SpecError) as refused:
        proxy_pod(auth=auth, extraArgs=[flag])
    assert refused.value.message == (
        f"[0] {flag.split('=')[0]}: the operator renders it from {field}; set it there instead"
    )


def test_shard_oidc_issuer_is_checked() -> None:
    bad = {"oidc": {"issuerURL": "https://", "clientID": "c"}}
    with pytest.raises(SpecError) as refused:
        make(shard_object(auth=bad))
    assert refused.value.path.startswith("spec.auth.oidc.issuerURL")


def test_plan_shows_the_auth_flags_a_running_front_proxy_gets() -> None:
    """``plan`` on a cluster compares the live Deployment with what the spec renders: auth
    added to a running FrontProxy shows as the flags it adds, in a roll of its own."""
    root = make(shard_object(version="0.27.1"))
    running = parse_front_proxy(proxy_object())
    live = render_front_proxy(running, root, RELEASE).deployment
    wanted = parse_front_proxy(proxy_object(auth={"oidc": OIDC, "serviceAccount": {}}))
    refs = {"ns/root": (None, None)}
    step = proxy_step(wanted, live, None, RELEASE, [], refs)
    assert (step.outcome, step.now, step.after) == ("Rolls", "0.27.1", "0.27.1")
    assert step.flags_added == sorted(
        {arg.split("=")[0] for arg in OIDC_ARGS} | {"--service-account-key-file"}
    )
    assert step.flags_dropped == []
