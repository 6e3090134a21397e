"""The ``spec.auth`` blocks of Shard and FrontProxy: typed models and their checks.

Every setting becomes a kube-apiserver authentication flag kcp takes unchanged from kcp 0.27
to 0.30 (``kcp start`` and ``kcp-front-proxy`` register Kubernetes' own
``BuiltInAuthenticationOptions``); see :mod:`kcp_shard_operator.core.auth.flags`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kcp_shard_operator.core.api.model import SpecError, field
from kcp_shard_operator.core.api.refs import CASecretKeyRef, SecretKeyRef
from kcp_shard_operator.core.pki.spec import URL_PATTERN, url_host

TOKEN_FILE_KEY = "tokens.csv"
SERVICE_ACCOUNT_KEY = "tls.key"
KCP_DROPPED_GROUPS = ("system:masters", "system:kcp:logical-cluster-admin")
"""What kcp-front-proxy drops by default (pkg/proxy/options/authentication.go, v0.27.1 to
v0.30.0). ``--authentication-drop-groups`` replaces that default, so the operator always
renders these first: a token file or an identity provider naming ``system:masters`` never
reaches a shard as its admin."""
ISSUER_MESSAGE = "must be an https URL with a host, e.g. https://idp.example.com"


@dataclass(frozen=True)
class TokenFileSecretKeyRef:
    """A static token file (CSV: token,user,uid,"group1,group2") in a key of a Secret."""

    name: str = field("name", "Name of the Secret.", minLength=1)
    key: str = field("key", "Key in the Secret.", default=TOKEN_FILE_KEY, minLength=1)


@dataclass(frozen=True)
class OIDCSpec:
    """An OpenID Connect issuer whose ID tokens authenticate users (--oidc-*)."""

    issuer_url: str = field(
        "issuerURL",
        "The issuer (https): its /.well-known/openid-configuration and keys are fetched by "
        "kcp; a token's iss claim must equal it.",
        maxLength=2048,
        pattern=URL_PATTERN,
    )
    client_id: str = field(
        "clientID", "The audience a token must name (its aud claim).", minLength=1
    )
    username_claim: str = field(
        "usernameClaim", "The claim that names the user.", default="sub", minLength=1
    )
    username_prefix: str | None = field(
        "usernamePrefix",
        "Put before every user name, e.g. 'oidc:'. Unset: kcp's default, '<issuerURL>#' "
        "unless the claim is 'email'; '-' for none.",
        default=None,
    )
    groups_claim: str | None = field(
        "groupsClaim", "The claim (a string or a list) that names the groups.", default=None
    )
    groups_prefix: str | None = field(
        "groupsPrefix", "Put before every group name, e.g. 'oidc:'.", default=None
    )
    signing_algs: list[str] = field(
        "signingAlgs",
        "Accepted JOSE signing algorithms (kcp's default: RS256).",
        default_factory=list,
    )
    required_claims: dict[str, str] = field(
        "requiredClaims",
        "Claims a token must carry with exactly these values.",
        default_factory=dict,
    )
    ca_secret_ref: CASecretKeyRef | None = field(
        "caSecretRef",
        "CA bundle that verifies the issuer's serving certificate (--oidc-ca-file); unset: "
        "the CA roots of the kcp image (an image built FROM scratch has none).",
        default=None,
    )


@dataclass(frozen=True)
class ServiceAccountAuthSpec:
    """ServiceAccount tokens of the workspaces, accepted by the front-proxy."""

    enabled: bool = field(
        "enabled",
        "Accept the tokens kcp's shards sign for ServiceAccounts (TokenRequest): the "
        "front-proxy verifies them with the installation's service-account key, and the "
        "shard authorizes a ServiceAccount only in its own workspace.",
        default=True,
    )
    key_secret_ref: SecretKeyRef | None = field(
        "keySecretRef",
        "The key the shards sign ServiceAccount tokens with (--service-account-key-file; a "
        "private key yields its public half); unset: the installation's "
        "<root>-kcp-service-account-key, key tls.key.",
        default=None,
    )


@dataclass(frozen=True)
class AuthorizationWebhookSpec:
    """An authorization webhook kcp asks after its own authorizers."""

    config_secret_ref: SecretKeyRef = field(
        "configSecretRef",
        "Kubeconfig of the webhook (--authorization-webhook-config-file).",
    )
    version: str = field(
        "version",
        "The SubjectAccessReview version the webhook takes.",
        default="v1",
        enum=["v1", "v1beta1"],
    )


@dataclass(frozen=True)
class ShardAuthSpec:
    """Authentication and authorization of clients that reach the shard directly."""

    oidc: OIDCSpec | None = field("oidc", "An OIDC issuer.", default=None)
    token_file_secret_ref: TokenFileSecretKeyRef | None = field(
        "tokenFileSecretRef", "A static token file (--token-auth-file).", default=None
    )
    authorization_webhook: AuthorizationWebhookSpec | None = field(
        "authorizationWebhook", "An authorization webhook.", default=None
    )


@dataclass(frozen=True)
class FrontProxyAuthSpec:
    """Authentication at the front-proxy, beside the client certificates of spec.tls."""

    oidc: OIDCSpec | None = field("oidc", "An OIDC issuer.", default=None)
    service_account: ServiceAccountAuthSpec | None = field(
        "serviceAccount", "ServiceAccount tokens of the workspaces.", default=None
    )
    token_file_secret_ref: TokenFileSecretKeyRef | None = field(
        "tokenFileSecretRef", "A static token file (--token-auth-file).", default=None
    )
    drop_groups: list[str] = field(
        "dropGroups",
        "Groups never passed on to the shards ('prefix*' matches a prefix), added to kcp's "
        "own: system:masters and system:kcp:logical-cluster-admin are always dropped.",
        default_factory=list,
    )
    pass_on_groups: list[str] = field(
        "passOnGroups",
        "Only these groups are passed on to the shards ('prefix*' matches a prefix); empty: "
        "all that are not dropped.",
        default_factory=list,
    )


def service_account_key(
    auth: FrontProxyAuthSpec | None, installation_key: str
) -> SecretKeyRef | None:
    """The Secret key the front-proxy verifies ServiceAccount tokens with, when it does;
    ``installation_key`` names the installation's service-account key Secret."""
    accounts = auth.service_account if auth is not None else None
    if accounts is None or not accounts.enabled:
        return None
    return accounts.key_secret_ref or SecretKeyRef(installation_key, SERVICE_ACCOUNT_KEY)


def shard_auth_secrets(auth: ShardAuthSpec | None) -> list[str]:
    """The Secrets a shard's ``spec.auth`` mounts."""
    if auth is None:
        return []
    refs = (
        auth.oidc.ca_secret_ref if auth.oidc else None,
        auth.token_file_secret_ref,
        auth.authorization_webhook.config_secret_ref if auth.authorization_webhook else None,
    )
    return [ref.name for ref in refs if ref is not None]


def front_proxy_auth_secrets(auth: FrontProxyAuthSpec | None, installation_key: str) -> list[str]:
    """The Secrets a front-proxy's ``spec.auth`` mounts."""
    if auth is None:
        return []
    refs = (
        auth.oidc.ca_secret_ref if auth.oidc else None,
        auth.token_file_secret_ref,
        service_account_key(auth, installation_key),
    )
    return [ref.name for ref in refs if ref is not None]


def check_oidc(oidc: OIDCSpec | None, path: str) -> None:
    """What the schema's pattern says, for ``render``: an https issuer with a host."""
    if oidc is None:
        return
    if url_host(oidc.issuer_url) is None:
        raise SpecError(f"{path}.oidc.issuerURL", f"{oidc.issuer_url!r}: {ISSUER_MESSAGE}")
    for claim in oidc.required_claims:
        if not claim or "=" in claim or "," in claim:
            raise SpecError(f"{path}.oidc.requiredClaims", f"{claim!r}: not a claim name")


def check_groups(auth: FrontProxyAuthSpec, path: str) -> None:
    """Group names kcp's comma-separated flags can carry."""
    for name, groups in (("dropGroups", auth.drop_groups), ("passOnGroups", auth.pass_on_groups)):
        for index, group in enumerate(groups):
            if not group or "," in group:
                raise SpecError(f"{path}.{name}[{index}]", f"{group!r}: not a group name")
