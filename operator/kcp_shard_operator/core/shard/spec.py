"""The Shard custom resource: typed spec model, defaults and validation.

The CRD schema is generated from these classes (:mod:`kcp_shard_operator.core.installation.crds`);
the CEL rules here are the cluster-side twins of :func:`validate`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kcp_shard_operator.core.api.model import JSON, SpecError, field
from kcp_shard_operator.core.api.objects import KcpObject, parse_object
from kcp_shard_operator.core.api.refs import CASecretKeyRef, LocalObjectRef, SecretKeyRef
from kcp_shard_operator.core.auth.spec import ShardAuthSpec, check_oidc, shard_auth_secrets
from kcp_shard_operator.core.backup.spec import BackupSpec, check_backup
from kcp_shard_operator.core.kcp.audit import AuditSpec, check_audit
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
    NAME_PATTERN,
    TAGGED_BUILD_CEL,
    TAGGED_BUILD_MESSAGE,
    ImageSpec,
    ServerSpec,
    checked_version,
    image_field,
    max_name_length,
    replicas_field,
    tagged_build,
    url_message,
    url_rule,
    version_field,
)
from kcp_shard_operator.core.kcp.versions import (
    Version,
    ignores_root_shard_flag,
)
from kcp_shard_operator.core.pki.issuance import cache_kubeconfig_secret
from kcp_shard_operator.core.pki.spec import PKISpec, check_pki, url_host
from kcp_shard_operator.core.storage.spec import (
    StorageSpec,
    check_storage,
)

DEFAULT_REPLICAS = 1
CHILD_SUFFIX = "-kcp"
MAX_NAME_LENGTH = max_name_length(CHILD_SUFFIX)


@dataclass(frozen=True)
class EtcdSpec:
    """External etcd; without endpoints kcp runs an embedded etcd per pod."""

    endpoints: list[str] = field(
        "endpoints", "etcd client URLs (--etcd-servers).", default_factory=list
    )
    prefix: str | None = field("prefix", "Key prefix (--etcd-prefix).", default=None)
    tls_secret_ref: LocalObjectRef | None = field(
        "tlsSecretRef",
        "Secret with ca.crt, tls.crt and tls.key for etcd client TLS.",
        default=None,
    )


@dataclass(frozen=True)
class CacheSpec:
    """How the shard reaches the cache server."""

    kubeconfig_secret_ref: SecretKeyRef | None = field(
        "kubeconfigSecretRef",
        "Kubeconfig of the cache server, passed as --cache-kubeconfig. Unset on a non-root "
        "shard: the root shard's embedded cache (issued, spec.pki) or spec.cache.serverRef.",
        default=None,
    )
    server_ref: LocalObjectRef | None = field(
        "serverRef",
        "CacheServer (same namespace) the shard uses instead of the root shard's embedded "
        "cache; on the root shard too. The shard mounts its issued kubeconfig "
        "(<name>-cache-kubeconfig), starts only once it is Ready and rolls to a new kcp "
        "version only after it has rolled out.",
        default=None,
    )

    @property
    def kubeconfig_ref(self) -> SecretKeyRef | None:
        """The kubeconfig the shard mounts: the named one, or its CacheServer's."""
        if self.server_ref is not None:
            return SecretKeyRef(cache_kubeconfig_secret(self.server_ref.name))
        return self.kubeconfig_secret_ref


@dataclass(frozen=True)
class TLSSpec:
    """Certificates and keys of the shard."""

    serving_cert_secret_ref: LocalObjectRef | None = field(
        "servingCertSecretRef",
        "kubernetes.io/tls Secret with the serving certificate (tls.crt, tls.key).",
        default=None,
    )
    client_ca_secret_ref: LocalObjectRef | None = field(
        "clientCASecretRef", "Secret with the client CA bundle (ca.crt).", default=None
    )
    service_account_key_secret_ref: LocalObjectRef | None = field(
        "serviceAccountKeySecretRef",
        "Secret with the service-account signing key (tls.key).",
        default=None,
    )
    request_header_client_ca_secret_ref: CASecretKeyRef | None = field(
        "requestHeaderClientCASecretRef",
        "CA bundle that signs the front-proxy's client certificate: requests it forwards are "
        "trusted for the X-Remote-User, X-Remote-Group and X-Remote-Extra- headers "
        "(--requestheader-client-ca-file and the header flags).",
        default=None,
    )
    shard_client_cert_secret_ref: LocalObjectRef | None = field(
        "shardClientCertSecretRef",
        "kubernetes.io/tls Secret with the client certificate this shard presents to other "
        "shards and system components (--shard-client-cert-file, --shard-client-key-file).",
        default=None,
    )
    root_ca_secret_ref: CASecretKeyRef | None = field(
        "rootCASecretRef",
        "CA bundle put into service-account token Secrets (--root-ca-file).",
        default=None,
    )
    virtual_workspace_ca_secret_ref: CASecretKeyRef | None = field(
        "virtualWorkspaceCASecretRef",
        "CA bundle that verifies the serving certificate of the virtual-workspace server of "
        "spec.virtualWorkspaceURL (--shard-virtual-workspace-ca-file); issued with a "
        "VirtualWorkspaceServer: the installation's CA bundle.",
        default=None,
    )


@dataclass(frozen=True)
class Rule:
    """A cross-field rule: CEL for the API server, ``holds`` for offline checks.

    ``holds`` is None for transition rules, which only the API server can check.
    """

    cel: str
    message: str
    holds: Callable[[ShardSpec], bool] | None

    def as_schema(self) -> JSON:
        return {"rule": self.cel, "message": self.message}


@dataclass(frozen=True)
class ShardSpec(ServerSpec):
    """Desired state of a kcp shard."""

    version: str = version_field("", "0.32.3")
    image: ImageSpec = image_field()
    replicas: int = replicas_field(
        "Number of kcp pods; more than one needs external etcd.", DEFAULT_REPLICAS
    )
    root_shard_ref: LocalObjectRef | None = field(
        "rootShardRef",
        "The root Shard of this shard; absent for a root shard. Immutable.",
        default=None,
    )
    etcd: EtcdSpec = field("etcd", "etcd storage.", default_factory=EtcdSpec)
    storage: StorageSpec | None = field(
        "storage",
        "Volume of kcp's root directory, which holds the embedded etcd (default: a "
        "PersistentVolumeClaim of 10Gi); only for shards without spec.etcd.endpoints.",
        default=None,
    )
    base_url: str | None = field(
        "baseURL",
        "--shard-base-url; defaults to the Service URL.",
        default=None,
        **url_rule("spec.baseURL"),
    )
    external_url: str | None = field(
        "externalURL",
        "--shard-external-url; defaults to the base URL where the operator issues the "
        "logical-cluster-admin kubeconfig.",
        default=None,
        **url_rule("spec.externalURL"),
    )
    virtual_workspace_url: str | None = field(
        "virtualWorkspaceURL",
        "URL of a standalone virtual-workspace server that runs this shard's virtual "
        "workspaces (--shard-virtual-workspace-url, with --run-virtual-workspaces=false); "
        "APIExportEndpointSlices list it. Unset: the shard runs them in-process, or, with a "
        "VirtualWorkspaceServer naming the shard, its Service URL.",
        default=None,
        **url_rule("spec.virtualWorkspaceURL"),
    )
    cache: CacheSpec = field("cache", "Cache server access.", default_factory=CacheSpec)
    root_shard_kubeconfig_secret_ref: SecretKeyRef | None = field(
        "rootShardKubeconfigSecretRef",
        "Admin kubeconfig of the root shard, for kcp versions that still need "
        "--root-shard-kubeconfig-file; ignored from the deprecating release on.",
        default=None,
    )
    admin_kubeconfig_secret_ref: SecretKeyRef | None = field(
        "adminKubeconfigSecretRef",
        "Kubeconfig the operator uses to reach this shard (system:masters on the shard).",
        default=None,
    )
    logical_cluster_admin_kubeconfig_secret_ref: SecretKeyRef | None = field(
        "logicalClusterAdminKubeconfigSecretRef",
        "Kubeconfig with system:kcp:logical-cluster-admin credentials for reaching other "
        "shards (--logical-cluster-admin-kubeconfig); needs spec.externalURL.",
        default=None,
    )
    external_logical_cluster_admin_kubeconfig_secret_ref: SecretKeyRef | None = field(
        "externalLogicalClusterAdminKubeconfigSecretRef",
        "Kubeconfig with system:kcp:external-logical-cluster-admin credentials for reaching "
        "the external address, e.g. the front-proxy "
        "(--external-logical-cluster-admin-kubeconfig).",
        default=None,
    )
    tls: TLSSpec = field("tls", "Certificates and keys.", default_factory=TLSSpec)
    pki: PKISpec = field(
        "pki", "What the operator issues (default: all that is unset).", default_factory=PKISpec
    )
    auth: ShardAuthSpec | None = field(
        "auth",
        "Who else may reach the shard directly: OIDC, a token file, an authorization webhook.",
        default=None,
    )
    audit: AuditSpec | None = field(
        "audit",
        "Audit: what kcp records (a policy) and where the log goes (stdout or a rotated "
        "file). Unset: no audit log.",
        default=None,
    )
    backup: BackupSpec | None = field(
        "backup",
        "Backups of the shard's etcd (embedded, or the external one of spec.etcd, whole: "
        "every key prefix in it): verified snapshots into a PersistentVolumeClaim, on a "
        "schedule and on demand (annotation kcpshard.dev/backup).",
        default=None,
    )
    extra_args: list[str] = extra_args_field("kcp start")
    resources: JSON | None = resources_field()
    node_selector: dict[str, str] = node_selector_field()
    tolerations: list[JSON] = tolerations_field()
    affinity: JSON | None = affinity_field()

    @property
    def is_root(self) -> bool:
        return self.root_shard_ref is None

    @property
    def embedded_etcd(self) -> bool:
        return not self.etcd.endpoints

    @property
    def storage_or_default(self) -> StorageSpec:
        return self.storage or StorageSpec()

    @property
    def secret_names(self) -> list[str]:
        """Every Secret the shard's pods may mount, whatever its version (sorted).

        Not only those of ``version``: a shard held at an older version while it waits
        for its root mounts the older version's Secrets.
        """
        refs = (
            self.etcd.tls_secret_ref,
            self.cache.kubeconfig_ref,
            self.root_shard_kubeconfig_secret_ref,
            self.logical_cluster_admin_kubeconfig_secret_ref,
            self.external_logical_cluster_admin_kubeconfig_secret_ref,
            self.tls.serving_cert_secret_ref,
            self.tls.client_ca_secret_ref,
            self.tls.service_account_key_secret_ref,
            self.tls.request_header_client_ca_secret_ref,
            self.tls.shard_client_cert_secret_ref,
            self.tls.root_ca_secret_ref,
            self.tls.virtual_workspace_ca_secret_ref,
        )
        names = {ref.name for ref in refs if ref is not None}
        return sorted(names | set(shard_auth_secrets(self.auth)))


@dataclass(frozen=True)
class Shard(KcpObject[ShardSpec]):
    """A Shard object: identity plus validated spec and the raw status."""


SPEC_RULES = (
    Rule(
        cel="!has(self.rootShardRef) || (has(self.cache) && (has(self.cache.kubeconfigSecretRef)"
        " || has(self.cache.serverRef))) || !has(self.pki) || !has(self.pki.issue)"
        " || self.pki.issue",
        message="non-root shards (spec.rootShardRef set) with spec.pki.issue false need "
        "spec.cache.kubeconfigSecretRef or spec.cache.serverRef: kcp refuses to start "
        "without --cache-kubeconfig",
        holds=lambda spec: (
            spec.is_root
            or spec.cache.kubeconfig_secret_ref is not None
            or spec.cache.server_ref is not None
            or spec.pki.issue
        ),
    ),
    Rule(
        cel="!has(self.cache) || !has(self.cache.serverRef)"
        " || !has(self.cache.kubeconfigSecretRef)",
        message="spec.cache.serverRef and spec.cache.kubeconfigSecretRef are both set: the "
        "shard reaches one cache server, through the CacheServer's issued kubeconfig or "
        "through the named one",
        holds=lambda spec: (
            spec.cache.server_ref is None or spec.cache.kubeconfig_secret_ref is None
        ),
    ),
    Rule(
        cel="!has(self.rootShardRef) || !has(self.pki) || !has(self.pki.caSecretRef)",
        message="spec.pki.caSecretRef is set on the root shard: it signs for the whole "
        "installation",
        holds=lambda spec: spec.is_root or spec.pki.ca_secret_ref is None,
    ),
    Rule(
        cel="self.replicas <= 1 || (has(self.etcd) && has(self.etcd.endpoints) "
        "&& size(self.etcd.endpoints) > 0)",
        message="spec.replicas > 1 needs spec.etcd.endpoints: embedded etcd is private to each pod",
        holds=lambda spec: spec.replicas <= 1 or bool(spec.etcd.endpoints),
    ),
    Rule(
        cel="!has(self.storage) || !has(self.etcd) || !has(self.etcd.endpoints) "
        "|| size(self.etcd.endpoints) == 0",
        message="spec.storage applies to embedded etcd only: with spec.etcd.endpoints kcp "
        "keeps its data in that etcd",
        holds=lambda spec: spec.embedded_etcd or spec.storage is None,
    ),
    Rule(cel=TAGGED_BUILD_CEL, message=TAGGED_BUILD_MESSAGE, holds=tagged_build),
    Rule(
        cel="!has(self.logicalClusterAdminKubeconfigSecretRef) || has(self.externalURL)",
        message="spec.logicalClusterAdminKubeconfigSecretRef needs spec.externalURL: kcp "
        "requires --shard-external-url with --logical-cluster-admin-kubeconfig",
        holds=lambda spec: (
            spec.logical_cluster_admin_kubeconfig_secret_ref is None or bool(spec.external_url)
        ),
    ),
    Rule(
        cel="!has(self.virtualWorkspaceURL) || (has(self.pki) && has(self.pki.issue) && "
        "!self.pki.issue ? (has(self.tls) && has(self.tls.shardClientCertSecretRef) && "
        "has(self.tls.virtualWorkspaceCASecretRef)) : true)",
        message="spec.virtualWorkspaceURL with spec.pki.issue false needs "
        "spec.tls.shardClientCertSecretRef and spec.tls.virtualWorkspaceCASecretRef: kcp "
        "proxies its own /services/ requests to that server with them",
        holds=lambda spec: (
            spec.virtual_workspace_url is None
            or spec.pki.issue
            or (
                spec.tls.shard_client_cert_secret_ref is not None
                and spec.tls.virtual_workspace_ca_secret_ref is not None
            )
        ),
    ),
    Rule(
        cel="has(oldSelf.rootShardRef) == has(self.rootShardRef) && "
        "(!has(self.rootShardRef) || self.rootShardRef.name == oldSelf.rootShardRef.name)",
        message="spec.rootShardRef cannot be changed after creation",
        holds=None,
    ),
)


def validate(spec: ShardSpec, deprecating_release: Version) -> None:
    """Rules beyond the schema's types; raises :class:`SpecError`."""
    version = checked_version(spec.version)
    for rule in SPEC_RULES:
        if rule.holds is not None and not rule.holds(spec):
            raise SpecError("spec", rule.message)
    _check_free_form(spec)
    for path, url in (
        ("spec.baseURL", spec.base_url),
        ("spec.externalURL", spec.external_url),
        ("spec.virtualWorkspaceURL", spec.virtual_workspace_url),
    ):
        if url is not None and url_host(url) is None:
            raise SpecError(path, f"{url!r}: {url_message(path)}")
    check_pki(spec.pki)
    if spec.auth is not None:
        check_oidc(spec.auth.oidc, "spec.auth")
    if (
        not spec.is_root
        and not spec.pki.issue
        and not ignores_root_shard_flag(version, deprecating_release)
        and spec.root_shard_kubeconfig_secret_ref is None
    ):
        raise missing_root_kubeconfig(version, deprecating_release)


def _check_free_form(spec: ShardSpec) -> None:
    """What the API server would refuse in the pod template: lengths, quantities, tolerations."""
    check_extra_args(spec.extra_args)
    check_pod_fields(spec.node_selector, spec.resources, spec.tolerations)
    check_storage(spec.storage)
    check_audit(spec.audit)
    check_backup(spec.backup)


def check_name(name: str) -> None:
    """A Shard name its children (``<name>-kcp``, a Service among them) can carry."""
    if len(name) > MAX_NAME_LENGTH:
        raise SpecError(
            "metadata.name",
            f"must be at most {MAX_NAME_LENGTH} characters long (its Service is <name>-kcp)",
        )
    if not re.match(NAME_PATTERN, name):
        raise SpecError(
            "metadata.name",
            f"{name!r} must be a DNS-1035 label (lower-case letters, digits and '-', "
            "starting with a letter): its Service is <name>-kcp",
        )


def missing_root_kubeconfig(version: Version, deprecating_release: Version) -> SpecError:
    """The error for a non-root shard on a kcp that needs the root kubeconfig but has none."""
    return SpecError(
        "spec.rootShardKubeconfigSecretRef",
        f"is required for non-root shards on kcp {version} "
        f"(older than {deprecating_release}, which still needs --root-shard-kubeconfig-file)",
    )


def parse_shard(obj: Any, deprecating_release: Version) -> Shard:
    """A validated :class:`Shard` from a Kubernetes object mapping."""
    return parse_object(
        obj, Shard, ShardSpec, check_name, lambda spec: validate(spec, deprecating_release)
    )
