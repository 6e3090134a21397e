"""``spec.auth`` -> kcp's authentication and authorization flags, with the Secrets they read.

Read in kcp's sources (v0.27.1, v0.28.0, v0.28.1, v0.30.0): ``kcp start`` and ``kcp-front-proxy``
register Kubernetes' ``BuiltInAuthenticationOptions`` (Kubernetes 1.31 to 1.34), whose
``--oidc-*``, ``--token-auth-file`` and ``--service-account-*`` flags kept their names and
meaning across those releases, so no row of the flag table gates them. The front-proxy
validates ServiceAccount tokens with ``--service-account-key-file`` against the issuer
``https://kcp.default.svc`` (the shards' default too), looks the ServiceAccount up on the root
shard of ``--root-kubeconfig`` and passes the user on with the token's logical cluster in the
``authentication.kubernetes.io/cluster-name`` extra; a shard lets a ServiceAccount into its own
workspace without an access binding, and in any other reduces it to ``system:authenticated``
(pkg/authorization/workspace_content_authorizer.go, and ``EffectiveUsers`` in the RBAC
validation of kcp's Kubernetes fork).
"""

from __future__ import annotations

from kcp_shard_operator.core.auth.spec import (
    KCP_DROPPED_GROUPS,
    FrontProxyAuthSpec,
    OIDCSpec,
    ShardAuthSpec,
    TokenFileSecretKeyRef,
    service_account_key,
)
from kcp_shard_operator.core.kcp.podtemplate import Pod

OIDC_FLAGS = (
    "--oidc-issuer-url",
    "--oidc-client-id",
    "--oidc-username-claim",
    "--oidc-username-prefix",
    "--oidc-groups-claim",
    "--oidc-groups-prefix",
    "--oidc-signing-algs",
    "--oidc-required-claim",
    "--oidc-ca-file",
)
_COMMON_FIELDS = {
    **dict.fromkeys(OIDC_FLAGS, "spec.auth.oidc"),
    "--token-auth-file": "spec.auth.tokenFileSecretRef",
}
SHARD_SPEC_FIELDS = {
    **_COMMON_FIELDS,
    **dict.fromkeys(
        ("--authorization-webhook-config-file", "--authorization-webhook-version"),
        "spec.auth.authorizationWebhook",
    ),
}
FRONT_PROXY_SPEC_FIELDS = {
    **_COMMON_FIELDS,
    "--service-account-key-file": "spec.auth.serviceAccount",
    "--authentication-drop-groups": "spec.auth.dropGroups",
    "--authentication-pass-on-groups": "spec.auth.passOnGroups",
}
"""The spec field each flag comes from, on a shard and on the front-proxy (for ``extraArgs``
that repeat one)."""


def oidc_args(pod: Pod, oidc: OIDCSpec, directory: str) -> None:
    """The ``--oidc-*`` flags; the issuer's CA is mounted from its Secret."""
    pod.args += [
        f"--oidc-issuer-url={oidc.issuer_url}",
        f"--oidc-client-id={oidc.client_id}",
        f"--oidc-username-claim={oidc.username_claim}",
    ]
    if oidc.username_prefix is not None:
        pod.args.append(f"--oidc-username-prefix={oidc.username_prefix}")
    if oidc.groups_claim:
        pod.args.append(f"--oidc-groups-claim={oidc.groups_claim}")
        if oidc.groups_prefix is not None:
            pod.args.append(f"--oidc-groups-prefix={oidc.groups_prefix}")
    if oidc.signing_algs:
        pod.args.append(f"--oidc-signing-algs={','.join(oidc.signing_algs)}")
    pod.args += [
        f"--oidc-required-claim={claim}={value}"
        for claim, value in sorted(oidc.required_claims.items())
    ]
    if oidc.ca_secret_ref is not None:
        path = pod.ca_file("oidc-ca", oidc.ca_secret_ref, f"{directory}/oidc-ca")
        pod.args.append(f"--oidc-ca-file={path}")


def token_file_args(pod: Pod, ref: TokenFileSecretKeyRef, directory: str) -> None:
    items = [{"key": ref.key, "path": "tokens.csv"}]
    pod.mount_secret("token-file", ref.name, f"{directory}/token-file", items)
    pod.args.append(f"--token-auth-file={directory}/token-file/tokens.csv")


def shard_auth_args(pod: Pod, auth: ShardAuthSpec | None, directory: str) -> None:
    """A shard's flags of ``spec.auth`` (nothing when unset)."""
    if auth is None:
        return
    if auth.oidc is not None:
        oidc_args(pod, auth.oidc, directory)
    if auth.token_file_secret_ref is not None:
        token_file_args(pod, auth.token_file_secret_ref, directory)
    webhook = auth.authorization_webhook
    if webhook is not None:
        path = pod.kubeconfig(
            "authorization-webhook", webhook.config_secret_ref, f"{directory}/authorization-webhook"
        )
        pod.args += [
            f"--authorization-webhook-config-file={path}",
            f"--authorization-webhook-version={webhook.version}",
        ]


def front_proxy_auth_args(
    pod: Pod, auth: FrontProxyAuthSpec | None, installation_key: str, directory: str
) -> None:
    """The front-proxy's flags of ``spec.auth``; ``installation_key`` is the Secret of the
    installation's service-account key (what the shards sign tokens with)."""
    if auth is None:
        return
    if auth.oidc is not None:
        oidc_args(pod, auth.oidc, directory)
    key = service_account_key(auth, installation_key)
    if key is not None:
        items = [{"key": key.key, "path": "service-account.key"}]
        pod.mount_secret("service-account-key", key.name, f"{directory}/service-account", items)
        pod.args.append(
            f"--service-account-key-file={directory}/service-account/service-account.key"
        )
    if auth.token_file_secret_ref is not None:
        token_file_args(pod, auth.token_file_secret_ref, directory)
    if auth.drop_groups:
        dropped = dict.fromkeys((*KCP_DROPPED_GROUPS, *auth.drop_groups))
        pod.args.append(f"--authentication-drop-groups={','.join(dropped)}")
    if auth.pass_on_groups:
        pod.args.append(f"--authentication-pass-on-groups={','.join(auth.pass_on_groups)}")
