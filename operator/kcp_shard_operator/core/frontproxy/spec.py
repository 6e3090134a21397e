"""The FrontProxy custom resource: kcp's front-proxy, typed spec model and validation.

The front-proxy is the one endpoint users talk to: it authenticates them (client
certificates of the installation's client CA), and forwards ``/clusters/<path>`` to the
shard that holds the workspace, with the user in ``X-Remote-*`` headers signed by its own
client certificate (the shards trust that certificate's CA for the headers). It learns
where each workspace lives by watching the Shards of the root shard and the logical
clusters of every shard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kcp_shard_operator.core.api.model import JSON, SpecError, field
from kcp_shard_operator.core.api.objects import KcpObject, parse_object
from kcp_shard_operator.core.api.refs import CASecretKeyRef, LocalObjectRef, SecretKeyRef
from kcp_shard_operator.core.auth.spec import FrontProxyAuthSpec, check_groups, check_oidc
from kcp_shard_operator.core.kcp.podfields import (
    affinity_field,
    check_extra_args,
    check_pod_fields,
    extra_args_field,
    node_selector_field,
    resources_field,
    tolerations_field,
)
from kcp_shard_operator.core.kcp.serverspec import (
    TAGGED_BUILD_CEL,
    TAGGED_BUILD_MESSAGE,
    ImageSpec,
    ServerSpec,
    check_child_name,
    checked_version,
    image_field,
    replicas_field,
    tagged_build,
    version_field,
)
from kcp_shard_operator.core.pki.spec import (
    URL_PATTERN,
    IssuesOwnPKI,
    check_pki,
    lifetime_field,
    renew_before_field,
    url_host,
)

CHILD_SUFFIX = "-front-proxy"
DEFAULT_REPLICAS = 2
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")
URL_MESSAGE = "spec.externalURL must be an https URL with a host, e.g. https://kcp.example.com"


@dataclass(frozen=True)
class FrontProxyTLSSpec:
    """Certificates of the front-proxy; each one unset is issued (spec.pki)."""

    serving_cert_secret_ref: LocalObjectRef | None = field(
        "servingCertSecretRef",
        "kubernetes.io/tls Secret with the serving certificate (tls.crt, tls.key).",
        default=None,
    )
    client_ca_secret_ref: CASecretKeyRef | None = field(
        "clientCASecretRef",
        "CA bundle of the users' client certificates (--client-ca-file); unset: the "
        "installation's client CA (<root>-kcp-client-ca).",
        default=None,
    )
    request_header_client_cert_secret_ref: LocalObjectRef | None = field(
        "requestHeaderClientCertSecretRef",
        "kubernetes.io/tls Secret with the client certificate the front-proxy forwards "
        "requests with; the shards must trust its CA (Shard spec.tls."
        "requestHeaderClientCASecretRef).",
        default=None,
    )
    shards_ca_secret_ref: CASecretKeyRef | None = field(
        "shardsCASecretRef",
        "CA bundle that verifies the shards' serving certificates; unset: the "
        "installation's CA (<root>-kcp-client-ca).",
        default=None,
    )


@dataclass(frozen=True)
class FrontProxyPKISpec:
    """What the operator issues for the front-proxy."""

    issue: bool = field(
        "issue",
        "Issue what spec.tls and spec.kubeconfigSecretRef leave unset: the serving "
        "certificate (<name>-front-proxy-serving), the forwarding client certificate "
        "(<name>-front-proxy-requestheader, signed by the installation's requestheader CA, "
        "which the shards trust), the kubeconfig to the shards (<name>-front-proxy-kubeconfig) "
        "and an admin kubeconfig for users (<name>-front-proxy-admin-kubeconfig). false: "
        "nothing is issued, and every reference must be set.",
        default=True,
    )
    certificate_lifetime: str = lifetime_field("FrontProxy")
    renew_before: str = renew_before_field()


@dataclass(frozen=True)
class FrontProxySpec(ServerSpec, IssuesOwnPKI):
    """Desired state of a kcp front-proxy."""

    version: str = version_field(" of the front-proxy", "0.28.0")
    root_shard_ref: LocalObjectRef = field(
        "rootShardRef",
        "The root Shard (same namespace) of the installation the front-proxy serves. Immutable.",
    )
    image: ImageSpec = image_field("Container image (kcp's image, which holds /kcp-front-proxy).")
    replicas: int = replicas_field(
        "Number of front-proxy pods (stateless; more than one gets a PodDisruptionBudget).",
        DEFAULT_REPLICAS,
    )
    external_url: str | None = field(
        "externalURL",
        "Where users reach the front-proxy; the installation's shards advertise it as "
        "--shard-external-url (the URLs of their workspaces). Default: the Service URL.",
        default=None,
        maxLength=2048,
        **{
            "x-kubernetes-validations": [
                {"rule": f"self.matches({URL_PATTERN!r})", "message": URL_MESSAGE}
            ]
        },
    )
    service_type: str = field(
        "serviceType",
        "Type of the front-proxy's Service.",
        default="ClusterIP",
        enum=list(SERVICE_TYPES),
    )
    kubeconfig_secret_ref: SecretKeyRef | None = field(
        "kubeconfigSecretRef",
        "Kubeconfig with system:masters credentials on every shard of the installation, "
        "its server the root shard (--root-kubeconfig, --shards-kubeconfig and, from the "
        "deprecating release on, --shard-peer-kubeconfig); unset: issued.",
        default=None,
    )
    tls: FrontProxyTLSSpec = field(
        "tls", "Certificates and CA bundles.", default_factory=FrontProxyTLSSpec
    )
    pki: FrontProxyPKISpec = field(
        "pki", "What the operator issues.", default_factory=FrontProxyPKISpec
    )
    auth: FrontProxyAuthSpec | None = field(
        "auth",
        "Who else may authenticate: OIDC, ServiceAccount tokens of the workspaces, a token "
        "file; and which groups are passed on to the shards.",
        default=None,
    )
    extra_args: list[str] = extra_args_field("kcp-front-proxy (e.g. --cors-allowed-origins)")
    resources: JSON | None = resources_field()
    node_selector: dict[str, str] = node_selector_field()
    tolerations: list[JSON] = tolerations_field()
    affinity: JSON | None = affinity_field()


@dataclass(frozen=True)
class FrontProxy(KcpObject[FrontProxySpec]):
    """A FrontProxy object: identity plus validated spec and the raw status."""


ISSUE_OFF = "(has(self.pki) && has(self.pki.issue) && !self.pki.issue)"
RULES: tuple[tuple[str, str, Callable[[FrontProxySpec], bool] | None], ...] = (
    (
        f"{ISSUE_OFF} ? (has(self.kubeconfigSecretRef) && has(self.tls) && "
        "has(self.tls.servingCertSecretRef) && has(self.tls.clientCASecretRef) && "
        "has(self.tls.requestHeaderClientCertSecretRef) && has(self.tls.shardsCASecretRef)) "
        ": true",
        "spec.pki.issue false needs spec.kubeconfigSecretRef and spec.tls.servingCertSecretRef, "
        "clientCASecretRef, requestHeaderClientCertSecretRef and shardsCASecretRef: nothing "
        "is issued then",
        lambda spec: (
            spec.pki.issue
            or None
            not in (
                spec.kubeconfig_secret_ref,
                spec.tls.serving_cert_secret_ref,
                spec.tls.client_ca_secret_ref,
                spec.tls.request_header_client_cert_secret_ref,
                spec.tls.shards_ca_secret_ref,
            )
        ),
    ),
    (TAGGED_BUILD_CEL, TAGGED_BUILD_MESSAGE, tagged_build),
    (
        "self.rootShardRef.name == oldSelf.rootShardRef.name",
        "spec.rootShardRef cannot be changed after creation",
        None,
    ),
)


def validate(spec: FrontProxySpec) -> None:
    """Rules beyond the schema's types; raises :class:`SpecError`."""
    checked_version(spec.version)
    for _, message, holds in RULES:
        if holds is not None and not holds(spec):
            raise SpecError("spec", message)
    if spec.external_url is not None and url_host(spec.external_url) is None:
        raise SpecError("spec.externalURL", f"{spec.external_url!r}: {URL_MESSAGE}")
    if spec.auth is not None:
        check_oidc(spec.auth.oidc, "spec.auth")
        check_groups(spec.auth, "spec.auth")
    check_extra_args(spec.extra_args)
    check_pki(spec.as_pki)
    check_pod_fields(spec.node_selector, spec.resources, spec.tolerations)


def check_name(name: str) -> None:
    check_child_name(name, CHILD_SUFFIX)


def parse_front_proxy(obj: Any) -> FrontProxy:
    """A validated :class:`FrontProxy` from a Kubernetes object mapping."""
    return parse_object(obj, FrontProxy, FrontProxySpec, check_name, validate)
