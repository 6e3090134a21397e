"""Values of kcp-dev/helm-charts' deprecated ``shard`` chart (0.0.x) -> a ``Shard`` manifest.

The chart's default values are merged under the user's first, as ``helm`` does.
Object names follow the chart's templates (``kcp.fullname``, ``cache.fullname``,
``certificates.kcp``), so the Shard references the Secrets the chart's
cert-manager Certificates already maintain. Every flag the chart's Deployment
template sets is one row of ``TEMPLATE_FLAGS``: carried over to a Shard field or
``extraArgs``, or reported as not rendered, with what to do instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kcp_shard_operator.constants import DEFAULT_IMAGE_REPOSITORY, SHARD_API_VERSION, SHARD_KIND
from kcp_shard_operator.core.kcp.flags import retire, without_flag
from kcp_shard_operator.core.kcp.versions import (
    CACHE_KUBECONFIG_FLAG,
    ROOT_SHARD_KUBECONFIG_FLAG,
    InvalidVersionError,
    Role,
    Version,
    gate_for,
    ignores_root_shard_flag,
    retired_flags,
)
from kcp_shard_operator.migrate.chartflags import (
    unrendered,
)
from kcp_shard_operator.migrate.chartvalues import (
    CHART_DEFAULTS,
    CHART_ETCD_PORT,
    CHART_NAME,
    CHART_REPLICAS,
    DEFAULT_NAME,
    ChartValues,
    leaves,
    oidc_flags,
    root_name_of,
    truncated,
    truthy,
    uses_cache,
    with_defaults,
)


@dataclass(frozen=True)
class Conversion:
    """The Shard manifest, settings left behind, and errors (no manifest when there are)."""

    manifest: dict[str, Any] | None
    unmapped: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    unrendered: tuple[str, ...] = ()
    """Flags the chart's template sets that the Shard will not render, with what to do."""


def _path_note(secret: str, paths: str) -> str:
    return (
        f"Secret {secret} (made by the chart) refers to {paths} by path, which the Shard's "
        "pods do not mount: replace it with a kubeconfig that embeds the certificate data "
        "before applying the Shard"
    )


def convert(
    values: Mapping[str, Any],
    *,
    deprecating_release: Version,
    name: str | None = None,
    version: str | None = None,
) -> Conversion:
    """Build a Shard manifest from the deprecated chart's values (a plain mapping).

    ``name`` is the chart's full name (``<release>-shard``) when ``fullnameOverride``
    is unset; ``version`` overrides the kcp version taken from ``kcp.tag``.
    """
    v = ChartValues(with_defaults(values, CHART_DEFAULTS))
    notes: list[str] = []
    errors: list[str] = []

    override = truncated(str(v.get("fullnameOverride") or ""), 63)
    v.get("nameOverride")
    fullname = override or name or DEFAULT_NAME
    if not override and not name:
        notes.append(
            f"the chart named its objects after the Helm release ('<release>-{CHART_NAME}'); "
            f"used {fullname!r}: pass --name with the chart's full name so that the shard name "
            "and Secret names match"
        )
    elif override and name and name != override:
        notes.append(f"fullnameOverride {override!r} wins over --name {name!r}")

    tag = str(v.get("kcp.tag") or "")
    kcp_version = (version or tag).removeprefix("v")
    parsed: Version | None = None
    if not kcp_version:
        errors.append("kcp.tag is empty (the chart used its appVersion): pass --kcp-version X.Y.Z")
    else:
        try:
            parsed = Version.parse(kcp_version)
        except InvalidVersionError as err:
            errors.append(f"cannot tell the kcp version: {err}; pass --kcp-version X.Y.Z")
    image: dict[str, Any] = {"repository": str(v.get("kcp.image") or DEFAULT_IMAGE_REPOSITORY)}
    if tag:
        image["tag"] = tag
    if v.get("kcp.pullPolicy"):
        image["pullPolicy"] = v.get("kcp.pullPolicy")
    spec: dict[str, Any] = {"version": kcp_version, "image": image, "replicas": CHART_REPLICAS}

    sharding = truthy(v.get("sharding.enabled"))
    non_root = sharding and not truthy(v.get("sharding.isRoot", True))
    hostname = str(v.get("sharding.rootShardInternalHostname") or "")
    if non_root:
        root = root_name_of(hostname) if hostname else "root"
        spec["rootShardRef"] = {"name": root}
        notes.append(
            f"rootShardRef.name {root!r} was derived from sharding.rootShardInternalHostname "
            f"{hostname!r}: set it to the root Shard object's name"
        )
        admin_secret = f"{fullname}-shard-admin-kubeconfig"
        if parsed is not None and not ignores_root_shard_flag(parsed, deprecating_release):
            spec["rootShardKubeconfigSecretRef"] = {"name": admin_secret, "key": "kubeconfig"}
            notes.append(
                f"kcp {parsed} still uses {ROOT_SHARD_KUBECONFIG_FLAG}: kept Secret "
                f"{admin_secret} as rootShardKubeconfigSecretRef; "
                + _path_note(admin_secret, "/etc/kcp/tls/ca/tls.crt and /etc/kcp/tls/shard-client")
                + f"; drop it when moving to kcp {deprecating_release}"
            )
        else:
            notes.append(
                f"{ROOT_SHARD_KUBECONFIG_FLAG} and Secret {admin_secret} are not carried over: "
                f"kcp from {deprecating_release} on ignores them"
            )
    if sharding:
        gate = gate_for("--external-hostname")
        notes.append(
            f"{gate.flag} is not carried over: kcp ignores it from {gate.until} on ({gate.why})"
        )
    v.get("kcp.sharding")
    if isinstance(values.get("kcp"), Mapping) and values["kcp"].get("sharding"):
        notes.append("kcp.sharding.* is read by nothing in the chart; ignored")

    cache = uses_cache(v)
    v.get("cache.enabled")
    v.get("externalCache.enabled")
    v.get("externalCache.cacheInternalHostname")
    if cache:
        cache_secret = truncated(truncated(fullname, 52) + "-cache", 63) + "-kubeconfig"
        spec["cache"] = {"kubeconfigSecretRef": {"name": cache_secret, "key": "kubeconfig"}}
        notes.append("cache kubeconfig: " + _path_note(cache_secret, "/etc/kcp/tls/ca/tls.crt"))
    elif non_root:
        errors.append(
            "non-root shard (sharding.isRoot: false) with neither cache.enabled nor "
            f"externalCache.enabled: {CACHE_KUBECONFIG_FLAG} is required for non-root shards "
            "and kcp refuses to start without it"
        )

    etcd_address = str(v.get("kcp.etcd.serverAddress") or "")
    v.get("kcp.etcd.clientCertificate")
    if etcd_address == "embedded":
        notes.append(
            "kcp.etcd.serverAddress 'embedded' (--etcd-servers=embedded): the Shard runs an "
            "embedded etcd in its one pod when spec.etcd.endpoints is empty"
        )
    else:
        endpoints = [e.strip() for e in etcd_address.split(",") if e.strip()]
        if not endpoints and truthy(v.get("etcd.enabled", True)):
            etcd_service = truncated(truncated(fullname, 58) + "-etcd", 63)
            endpoints = [f"https://{etcd_service}:{CHART_ETCD_PORT}"]
        if endpoints:
            spec["etcd"] = {
                "endpoints": endpoints,
                "tlsSecretRef": {"name": f"{fullname}-etcd-client-cert"},
            }

    external = str(v.get("externalHostname") or "")
    port = 8443 if v.get("kcpFrontProxy.service.type") == "LoadBalancer" else 443
    if external:
        spec["externalURL"] = f"https://{external}:{port}"

    certs = str(v.get("certificates.name") or "")
    kcp_certs = truncated(truncated(certs or fullname, 58) + "-kcp", 63)
    tls: dict[str, Any] = {}
    spec["tls"] = tls
    tls.update(
        {
            "servingCertSecretRef": {"name": f"{fullname}-cert"},
            "clientCASecretRef": {"name": f"{kcp_certs}-client-ca"},
            "serviceAccountKeySecretRef": {"name": f"{kcp_certs}-service-account-ca"},
            "requestHeaderClientCASecretRef": {
                "name": f"{kcp_certs}-requestheader-client-ca",
                "key": "tls.crt",
            },
            "rootCASecretRef": {"name": f"{kcp_certs}-ca", "key": "tls.crt"},
        }
    )
    if sharding:
        tls["shardClientCertSecretRef"] = {"name": f"{fullname}-shard-client-cert"}
    lca_paths = (
        "/etc/kcp/tls/ca/tls.crt and /etc/kcp/{}logical-cluster-admin/kubeconfig-client-cert"
    )
    if truthy(v.get("kcp.logicalClusterAdminFlag")) and external:
        secret = f"{fullname}-internal-admin-kubeconfig"
        spec["logicalClusterAdminKubeconfigSecretRef"] = {"name": secret, "key": "kubeconfig"}
        notes.append(_path_note(secret, lca_paths.format("")))
    v.get("kcp.externalLogicalClusterAdminFlag")
    secret = f"{fullname}-external-admin-kubeconfig"
    spec["externalLogicalClusterAdminKubeconfigSecretRef"] = {"name": secret, "key": "kubeconfig"}
    notes.append(_path_note(secret, lca_paths.format("external-")))

    extra: list[str] = [
        f"--enable-home-workspaces={str(v.on('kcp.homeWorkspaces.enabled')).lower()}"
    ]
    v.get("kcp.homeWorkspaces.enabled")
    extra += oidc_flags(v)
    extra += [f"--v={v.get('kcp.v')}", "--logging-format=json"]
    if truthy(v.get("kcp.profiling.enabled")):
        extra.append(f"--profiler-address=0.0.0.0:{v.get('kcp.profiling.port', 6060)}")
    batteries = v.get("kcp.batteries", [])
    if batteries:
        extra.append(f"--batteries-included={','.join(str(b) for b in batteries)}")
    own, by_hand = without_flag(
        [str(flag) for flag in v.get("kcp.extraFlags", [])], ROOT_SHARD_KUBECONFIG_FLAG
    )
    for text in by_hand:
        notes.append(
            f"kcp.extraFlags: {text}: not carried over; the operator passes "
            f"{ROOT_SHARD_KUBECONFIG_FLAG} itself to kcp older than {deprecating_release}"
        )
    role = Role.NON_ROOT if non_root else Role.ROOT
    retired = retired_flags(parsed, role, deprecating_release) if parsed else []
    carried, dropped = retire(own, retired)
    for text in dropped:
        notes.append(f"kcp.extraFlags: {text}: kcp {parsed} ignores it")
    extra += carried
    spec["extraArgs"] = extra
    if v.get("kcp.resources"):
        spec["resources"] = v.get("kcp.resources")
    v.get("kcp.enabled")

    not_rendered = unrendered(v)
    unmapped = [
        f"{path}: {value!r}"
        for path, value in leaves(values)
        if not v.is_used(path) and value not in (None, "", False, [], {})
    ]
    manifest = (
        None
        if errors
        else {
            "apiVersion": SHARD_API_VERSION,
            "kind": SHARD_KIND,
            "metadata": {"name": fullname},
            "spec": spec,
        }
    )
    return Conversion(manifest, tuple(unmapped), tuple(notes), tuple(errors), tuple(not_rendered))
