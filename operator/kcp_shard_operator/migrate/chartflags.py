"""Every flag the deprecated ``shard`` chart's Deployment template sets, one row each:
carried over to a Shard field or ``extraArgs``, or reported as not rendered with what to do
instead (pure)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kcp_shard_operator.core.kcp.versions import (
    CACHE_KUBECONFIG_FLAG,
    ROOT_SHARD_KUBECONFIG_FLAG,
)
from kcp_shard_operator.migrate.chartvalues import (
    CHART_DEFAULTS,
    OIDC_FLAGS,
    ChartValues,
    external_etcd,
    non_root,
    sharding,
    uses_cache,
    with_defaults,
)


@dataclass(frozen=True)
class TemplateFlag:
    """A flag the chart's Deployment template sets when ``when`` holds for the values.

    ``carried`` names where the Shard renders it (a spec field or ``extraArgs``);
    ``None`` means the Shard does not render it and ``advice`` says what to do.
    """

    flags: tuple[str, ...]
    when: Callable[[ChartValues], bool]
    carried: str | None
    advice: str = ""
    values: tuple[str, ...] = ()
    """Values that only drive these flags: reported with them, not one by one."""


def always(_: ChartValues) -> bool:
    return True


TEMPLATE_FLAGS: tuple[TemplateFlag, ...] = (
    TemplateFlag(("--shard-name",), non_root, "metadata.name"),
    TemplateFlag((ROOT_SHARD_KUBECONFIG_FLAG,), non_root, "spec.rootShardKubeconfigSecretRef"),
    TemplateFlag(
        ("--shard-client-cert-file", "--shard-client-key-file"),
        sharding,
        "spec.tls.shardClientCertSecretRef",
    ),
    TemplateFlag(
        ("--etcd-servers",),
        lambda v: bool(v.peek("kcp.etcd.serverAddress")) or v.on("etcd.enabled"),
        "spec.etcd.endpoints",
    ),
    TemplateFlag(
        ("--etcd-keyfile", "--etcd-certfile", "--etcd-cafile"),
        external_etcd,
        "spec.etcd.tlsSecretRef",
    ),
    TemplateFlag(("--client-ca-file",), always, "spec.tls.clientCASecretRef"),
    TemplateFlag(
        ("--tls-private-key-file", "--tls-cert-file"), always, "spec.tls.servingCertSecretRef"
    ),
    TemplateFlag(
        ("--service-account-key-file", "--service-account-private-key-file"),
        always,
        "spec.tls.serviceAccountKeySecretRef",
    ),
    TemplateFlag(("--root-ca-file",), always, "spec.tls.rootCASecretRef"),
    TemplateFlag(("--enable-home-workspaces",), always, "spec.extraArgs"),
    TemplateFlag(
        ("--logical-cluster-admin-kubeconfig",),
        lambda v: v.on("kcp.logicalClusterAdminFlag"),
        "spec.logicalClusterAdminKubeconfigSecretRef",
    ),
    TemplateFlag(
        ("--external-logical-cluster-admin-kubeconfig",),
        always,
        "spec.externalLogicalClusterAdminKubeconfigSecretRef",
    ),
    TemplateFlag(
        (
            "--requestheader-client-ca-file",
            "--requestheader-username-headers",
            "--requestheader-group-headers",
        ),
        always,
        "spec.tls.requestHeaderClientCASecretRef",
    ),
    TemplateFlag(
        ("--root-directory",),
        always,
        None,
        "the chart keeps kcp's root directory /etc/kcp/config on a PersistentVolumeClaim; "
        "the Shard uses an emptyDir at /var/lib/kcp (with embedded etcd its data lives there)",
    ),
    TemplateFlag(
        ("--shard-virtual-workspace-ca-file",),
        always,
        None,
        "the Shard has no field for the virtual-workspace CA file (the chart's <certs>-kcp-ca "
        "Secret, tls.crt); kcp then trusts its own serving CA",
    ),
    TemplateFlag(("--external-hostname",), sharding, "(ignored by kcp)"),
    TemplateFlag(("--shard-external-url",), sharding, "spec.externalURL"),
    TemplateFlag(
        ("--authentication-config",),
        lambda v: bool(v.peek("authentication.configMapRef.name")),
        None,
        "the Shard cannot mount the authentication ConfigMap",
        ("authentication",),
    ),
    TemplateFlag(
        tuple(flag for _, flag in OIDC_FLAGS),
        lambda v: v.on("oidc.enabled") and not v.peek("authentication.configMapRef.name"),
        "spec.extraArgs",
    ),
    TemplateFlag(
        ("--oidc-ca-file",),
        lambda v: (
            v.on("oidc.enabled")
            and bool(v.peek("oidc.caSecretName"))
            and not v.peek("authentication.configMapRef.name")
        ),
        None,
        "the Shard cannot mount the OIDC CA Secret",
        ("oidc.caSecretName", "oidc.caSecretKeyName"),
    ),
    TemplateFlag(
        ("--token-auth-file",),
        lambda v: v.on("kcp.tokenAuth.enabled"),
        None,
        "the Shard cannot mount the token file Secret",
        ("kcp.tokenAuth",),
    ),
    TemplateFlag(("--v", "--logging-format"), always, "spec.extraArgs"),
    TemplateFlag(
        (
            "--audit-log-maxage",
            "--audit-log-maxbackup",
            "--audit-log-maxsize",
            "--audit-log-path",
            "--audit-policy-file",
            "--audit-log-compress",
            "--audit-log-format",
        ),
        lambda v: v.on("audit.enabled"),
        None,
        "the Shard cannot mount the audit policy ConfigMap or the audit log volume",
        ("audit",),
    ),
    TemplateFlag(
        ("--profiler-address",), lambda v: v.on("kcp.profiling.enabled"), "spec.extraArgs"
    ),
    TemplateFlag((CACHE_KUBECONFIG_FLAG,), uses_cache, "spec.cache.kubeconfigSecretRef"),
    TemplateFlag(
        ("--batteries-included",), lambda v: bool(v.peek("kcp.batteries")), "spec.extraArgs"
    ),
)


def template_flags(values: Mapping[str, Any]) -> list[TemplateFlag]:
    """The rows of ``TEMPLATE_FLAGS`` the chart renders for ``values`` (defaults merged)."""
    v = ChartValues(with_defaults(values, CHART_DEFAULTS))
    return [row for row in TEMPLATE_FLAGS if row.when(v)]


def unrendered(v: ChartValues) -> list[str]:
    """The template's flags the Shard does not render; their values count as reported."""
    found = [row for row in TEMPLATE_FLAGS if row.carried is None and row.when(v)]
    for row in found:
        v.used.update(row.values)
    return [f"{', '.join(row.flags)}: {row.advice}" for row in found]
