"""The CacheServer custom resource: kcp's cache server, typed spec model and validation.

Every shard of an installation replicates the objects others need (the core APIExports among
them) into the cache server and reads them from there; from the deprecating release on, a
non-root shard reads the APIExport identities there instead of from the root shard.

kcp's ``cache-server`` binary has no external-etcd flags, so the spec has no etcd section. It
authenticates client certificates only from kcp ~0.29.2 || ~0.30.2 || >=0.31.0 (before, it
trusts every client that reaches it over TLS); on every version a NetworkPolicy admits only the
pods of the Shards that name the CacheServer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kcp_shard_operator.core.api.model import JSON, SpecError, field
from kcp_shard_operator.core.api.objects import KcpObject, parse_object
from kcp_shard_operator.core.api.refs import CASecretKeyRef, LocalObjectRef
from kcp_shard_operator.core.kcp.podfields import (
    affinity_field,
    check_pod_fields,
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
    tagged_build,
    version_field,
)
from kcp_shard_operator.core.kcp.versions import (
    CACHE_CLIENT_CA_FLAG,
    DEFAULT_DEPRECATING_RELEASE,
    Role,
    flag_applies,
)
from kcp_shard_operator.core.pki.spec import (
    IssuesOwnPKI,
    check_pki,
    lifetime_field,
    renew_before_field,
)
from kcp_shard_operator.core.storage.spec import StorageSpec, check_storage

CHILD_SUFFIX = "-cache"


@dataclass(frozen=True)
class CachePKISpec:
    """What the operator issues for the cache server: its CA, serving certificate and the
    kubeconfig the shards reach it with."""

    issue: bool = field(
        "issue",
        "Issue the CA (<name>-cache-ca), the serving certificate (<name>-cache-serving) and "
        "the shards' kubeconfig (<name>-cache-kubeconfig). false: spec.servingCertSecretRef "
        "is required and the shards name their cache kubeconfig themselves.",
        default=True,
    )
    certificate_lifetime: str = lifetime_field("CacheServer")
    renew_before: str = renew_before_field()


@dataclass(frozen=True)
class NetworkPolicySpec:
    """The NetworkPolicy in front of the cache server."""

    enabled: bool = field(
        "enabled",
        "Render a NetworkPolicy (<name>-cache) that admits to the cache server's port only the "
        "pods of the Shards naming this CacheServer (spec.cache.serverRef), and pods carrying "
        "the label kcpshard.dev/cache-server=<name>. false: none (a policy the operator made "
        "is deleted); the cache server is then reachable from every pod, and before kcp "
        "~0.29.2 || ~0.30.2 || >=0.31.0 it authenticates no client.",
        default=True,
    )


@dataclass(frozen=True)
class CacheServerSpec(ServerSpec, IssuesOwnPKI):
    """Desired state of a kcp cache server."""

    version: str = version_field(" of the cache server", "0.28.0")
    image: ImageSpec = image_field("Container image (kcp's image, which holds /cache-server).")
    storage: StorageSpec | None = field(
        "storage",
        "Volume of the cache server's root directory, which holds its embedded etcd (default: "
        "a PersistentVolumeClaim of 10Gi). The cache holds copies the shards write again, but "
        "while it is empty a shard that needs it cannot start.",
        default=None,
    )
    serving_cert_secret_ref: LocalObjectRef | None = field(
        "servingCertSecretRef",
        "kubernetes.io/tls Secret with the serving certificate (tls.crt, tls.key); unset: "
        "issued (spec.pki).",
        default=None,
    )
    client_ca_secret_ref: CASecretKeyRef | None = field(
        "clientCASecretRef",
        "CA of the client certificates the cache server accepts (--client-ca-file, on kcp "
        "~0.29.2 || ~0.30.2 || >=0.31.0; the clients must be in group system:masters). Unset: "
        "the CA the operator issues (spec.pki), which signs the shards' kubeconfig. Required "
        "on those versions when the operator issues no CA (spec.servingCertSecretRef set or "
        "spec.pki.issue false).",
        default=None,
    )
    network_policy: NetworkPolicySpec = field(
        "networkPolicy",
        "Who may reach the cache server.",
        default_factory=NetworkPolicySpec,
    )
    pki: CachePKISpec = field("pki", "What the operator issues.", default_factory=CachePKISpec)
    resources: JSON | None = resources_field()
    node_selector: dict[str, str] = node_selector_field()
    tolerations: list[JSON] = tolerations_field()
    affinity: JSON | None = affinity_field()

    @property
    def storage_or_default(self) -> StorageSpec:
        return self.storage or StorageSpec()

    @property
    def issues_ca(self) -> bool:
        """Whether the operator issues the CA (and with it the serving certificate and the
        shards' kubeconfig): a user's serving certificate was signed by another one."""
        return self.pki.issue and self.serving_cert_secret_ref is None

    @property
    def authenticates_clients(self) -> bool:
        """Whether this kcp's cache server takes ``--client-ca-file`` (the flag table)."""
        # The row's bounds are versions, not the deprecating-release setting.
        return flag_applies(
            CACHE_CLIENT_CA_FLAG, self.kcp_version, Role.CACHE_SERVER, DEFAULT_DEPRECATING_RELEASE
        )


@dataclass(frozen=True)
class CacheServer(KcpObject[CacheServerSpec]):
    """A CacheServer object: identity plus validated spec and the raw status."""


RULES: tuple[tuple[str, str, Callable[[CacheServerSpec], bool]], ...] = (
    (
        "(has(self.pki) && has(self.pki.issue) && !self.pki.issue) ? "
        "has(self.servingCertSecretRef) : true",
        "spec.pki.issue false needs spec.servingCertSecretRef: the cache server serves TLS only",
        lambda spec: spec.pki.issue or spec.serving_cert_secret_ref is not None,
    ),
    (TAGGED_BUILD_CEL, TAGGED_BUILD_MESSAGE, tagged_build),
)


def validate(spec: CacheServerSpec) -> None:
    """Rules beyond the schema's types; raises :class:`SpecError`."""
    checked_version(spec.version)
    for _, message, holds in RULES:
        if not holds(spec):
            raise SpecError("spec", message)
    if spec.authenticates_clients and not spec.issues_ca and spec.client_ca_secret_ref is None:
        raise SpecError(
            "spec.clientCASecretRef",
            f"kcp {spec.version}'s cache server authenticates its clients (--client-ca-file): "
            "name the CA of their certificates; the operator issues none when "
            "spec.servingCertSecretRef is set or spec.pki.issue is false",
        )
    check_pki(spec.as_pki)
    check_pod_fields(spec.node_selector, spec.resources, spec.tolerations)
    check_storage(spec.storage)


def check_name(name: str) -> None:
    check_child_name(name, CHILD_SUFFIX)


def parse_cache_server(obj: Any) -> CacheServer:
    """A validated :class:`CacheServer` from a Kubernetes object mapping."""
    return parse_object(obj, CacheServer, CacheServerSpec, check_name, validate)
