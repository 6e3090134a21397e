"""Values of kcp-dev/helm-charts' deprecated ``shard`` chart (0.0.x) -> a ``Shard`` manifest.

The chart's default values are merged under the user's first, as ``helm`` does.
Object names follow the chart's templates (``kcp.fullname``, ``cache.fullname``,
``certificates.kcp``), so the Shard references the Secrets the chart's
cert-manager Certificates already maintain. Every flag the chart's Deployment
template sets is one row of ``TEMPLATE_FLAGS``: carried over to a Shard field or
``extraArgs``, or reported as not rendered, with what to do instead.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
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

CHART_NAME = "shard"
DEFAULT_NAME = "kcp-shard"
CHART_ETCD_PORT = 2379
CHART_REPLICAS = 1
"""The chart's Deployment runs one pod (``replicas: 1``, strategy ``Recreate``)."""

CHART_DEFAULTS: Mapping[str, Any] = {
    "global": {"imagePullSecrets": []},
    "externalHostname": "",
    "etcd": {
        "enabled": True,
        "image": "quay.io/coreos/etcd",
        "tag": "v3.5.4",
        "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"memory": "20Gi"}},
        "volumeSize": "8Gi",
        "profiling": {"enabled": False},
    },
    "kcp": {
        "enabled": True,
        "sharding": {"enabled": False, "isRoot": True, "rootShardInternalHostname": ""},
        "image": DEFAULT_IMAGE_REPOSITORY,
        "tag": "",
        "pullPolicy": "IfNotPresent",
        "v": "3",
        "logicalClusterAdminFlag": True,
        "externalLogicalClusterAdminFlag": True,
        "batteries": ["workspace-types"],
        "resources": {
            "requests": {"memory": "512Mi", "cpu": "100m"},
            "limits": {"memory": "20Gi"},
        },
        "volumeClassName": "",
        "etcd": {"serverAddress": "", "clientCertificate": {"issuer": "", "commonName": "root"}},
        "volumeSize": "1Gi",
        "extraFlags": [],
        "profiling": {"enabled": False, "port": 6060},
        "tokenAuth": {"enabled": False, "fileName": "auth-token.csv"},
        "hostAliases": {"enabled": False},
        "homeWorkspaces": {"enabled": False},
        "securityContext": {"fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
        "extraVolumes": [],
        "extraVolumeMounts": [],
    },
    "kcpFrontProxy": {"service": {"annotations": {}, "type": "ClusterIP"}},
    "authentication": {"configMapRef": {"name": ""}},
    "oidc": {"enabled": False, "caSecretName": "", "caSecretKeyName": "tls.crt"},
    "audit": {"enabled": False},
    "caBundle": {"enabled": False, "configMapName": "", "configMapKey": ""},
    "cache": {"enabled": False},
    "externalCache": {"enabled": False},
    "certificates": {"name": "certs"},
    "sharding": {"enabled": False, "isRoot": True, "rootShardInternalHostname": ""},
}
"""The chart's ``values.yaml`` (what the converter reads, and the defaults around it)."""


def with_defaults(values: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` over ``defaults`` as helm merges them: maps deeply, anything else replaced."""
    merged = copy.deepcopy(dict(defaults))
    for key, value in values.items():
        base = merged.get(key)
        if isinstance(base, Mapping) and isinstance(value, Mapping):
            merged[key] = with_defaults(value, base)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


@dataclass(frozen=True)
class Conversion:
    """The Shard manifest, settings left behind, and errors (no manifest when there are)."""

    manifest: dict[str, Any] | None
    unmapped: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    unrendered: tuple[str, ...] = ()
    """Flags the chart's template sets that the Shard will not render, with what to do."""


@dataclass
class _Values:
    """Values with a record of which leaves were used."""

    data: Mapping[str, Any]
    used: set[str] = field(default_factory=set)

    def get(self, path: str, default: Any = None) -> Any:
        """The value at ``path``, which counts as carried over."""
        self.used.add(path)
        return self.peek(path, default)

    def peek(self, path: str, default: Any = None) -> Any:
        """The value at ``path``, without counting it as carried over."""
        node: Any = self.data
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return default if node is None else node

    def on(self, path: str) -> bool:
        return _flag(self.peek(path))

    def is_used(self, path: str) -> bool:
        return any(path == u or path.startswith(u + ".") for u in self.used)


def _leaves(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(data, Mapping) and data:
        for key, value in data.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, data


def _trunc(name: str, length: int) -> str:
    return name[:length].rstrip("-")


def _flag(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _root_name(hostname: str) -> str:
    """The root shard's name from its internal hostname (the chart's ``<fullname>-internal``)."""
    label = hostname.split(".", 1)[0].split(":", 1)[0]
    return label.removesuffix("-internal")


_OIDC_FLAGS = (
    ("issuerUrl", "--oidc-issuer-url"),
    ("clientId", "--oidc-client-id"),
    ("groupClaim", "--oidc-groups-claim"),
    ("usernameClaim", "--oidc-username-claim"),
    ("usernamePrefix", "--oidc-username-prefix"),
    ("groupsPrefix", "--oidc-groups-prefix"),
)


def _oidc_flags(v: _Values) -> list[str]:
    """The chart's OIDC flags, all six as it renders them (empty when unset)."""
    if v.peek("authentication.configMapRef.name") or not _flag(v.get("oidc.enabled")):
        return []
    return [f"{flag}={v.get(f'oidc.{key}', '')}" for key, flag in _OIDC_FLAGS]


def _external_etcd(v: _Values) -> bool:
    return str(v.peek("kcp.etcd.serverAddress", "")) != "embedded"


def _sharding(v: _Values) -> bool:
    return v.on("sharding.enabled")


def _non_root(v: _Values) -> bool:
    return _sharding(v) and not _flag(v.peek("sharding.isRoot", True))


def _cache(v: _Values) -> bool:
    return v.on("cache.enabled") or v.on("externalCache.enabled")


@dataclass(frozen=True)
class TemplateFlag:
    """A flag the chart's Deployment template sets when ``when`` holds for the values.

    ``carried`` names where the Shard renders it (a spec field or ``extraArgs``);
    ``None`` means the Shard does not render it and ``advice`` says what to do.
    """

    flags: tuple[str, ...]
    when: Callable[[_Values], bool]
    carried: str | None
    advice: str = ""
    values: tuple[str, ...] = ()
    """Values that only drive these flags: reported with them, not one by one."""


def _always(_: _Values) -> bool:
    return True


TEMPLATE_FLAGS: tuple[TemplateFlag, ...] = (
    TemplateFlag(("--shard-name",), _non_root, "metadata.name"),
    TemplateFlag((ROOT_SHARD_KUBECONFIG_FLAG,), _non_root, "spec.rootShardKubeconfigSecretRef"),
    TemplateFlag(
        ("--shard-client-cert-file", "--shard-client-key-file"),
        _sharding,
        "spec.tls.shardClientCertSecretRef",
    ),
    TemplateFlag(
        ("--etcd-servers",),
        lambda v: bool(v.peek("kcp.etcd.serverAddress")) or v.on("etcd.enabled"),
        "spec.etcd.endpoints",
    ),
    TemplateFlag(
        ("--etcd-keyfile", "--etcd-certfile", "--etcd-cafile"),
        _external_etcd,
        "spec.etcd.tlsSecretRef",
    ),
    TemplateFlag(("--client-ca-file",), _always, "spec.tls.clientCASecretRef"),
    TemplateFlag(
        ("--tls-private-key-file", "--tls-cert-file"), _always, "spec.tls.servingCertSecretRef"
    ),
    TemplateFlag(
        ("--service-account-key-file", "--service-account-private-key-file"),
        _always,
        "spec.tls.serviceAccountKeySecretRef",
    ),
    TemplateFlag(("--root-ca-file",), _always, "spec.tls.rootCASecretRef"),
    TemplateFlag(("--enable-home-workspaces",), _always, "spec.extraArgs"),
    TemplateFlag(
        ("--logical-cluster-admin-kubeconfig",),
        lambda v: v.on("kcp.logicalClusterAdminFlag"),
        "spec.logicalClusterAdminKubeconfigSecretRef",
    ),
    TemplateFlag(
        ("--external-logical-cluster-admin-kubeconfig",),
        _always,
        "spec.externalLogicalClusterAdminKubeconfigSecretRef",
    ),
    TemplateFlag(
        (
            "--requestheader-client-ca-file",
            "--requestheader-username-headers",
            "--requestheader-group-headers",
        ),
        _always,
        "spec.tls.requestHeaderClientCASecretRef",
    ),
    TemplateFlag(
        ("--root-directory",),
        _always,
        None,
        "the chart keeps kcp's root directory /etc/kcp/config on a PersistentVolumeClaim; "
        "the Shard uses an emptyDir at /var/lib/kcp (with embedded etcd its data lives there)",
    ),
    TemplateFlag(
        ("--shard-virtual-workspace-ca-file",),
        _always,
        None,
        "the Shard has no field for the virtual-workspace CA file (the chart's <certs>-kcp-ca "
        "Secret, tls.crt); kcp then trusts its own serving CA",
    ),
    TemplateFlag(("--external-hostname",), _sharding, "(ignored by kcp)"),
    TemplateFlag(("--shard-external-url",), _sharding, "spec.externalURL"),
    TemplateFlag(
        ("--authentication-config",),
        lambda v: bool(v.peek("authentication.configMapRef.name")),
        None,
        "the Shard cannot mount the authentication ConfigMap",
        ("authentication",),
    ),
    TemplateFlag(
        tuple(flag for _, flag in _OIDC_FLAGS),
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
    TemplateFlag(("--v", "--logging-format"), _always, "spec.extraArgs"),
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
    TemplateFlag((CACHE_KUBECONFIG_FLAG,), _cache, "spec.cache.kubeconfigSecretRef"),
    TemplateFlag(
        ("--batteries-included",), lambda v: bool(v.peek("kcp.batteries")), "spec.extraArgs"
    ),
)


def template_flags(values: Mapping[str, Any]) -> list[TemplateFlag]:
    """The rows of ``TEMPLATE_FLAGS`` the chart renders for ``values`` (defaults merged)."""
    v = _Values(with_defaults(values, CHART_DEFAULTS))
    return [row for row in TEMPLATE_FLAGS if row.when(v)]


def _unrendered(v: _Values) -> list[str]:
    """The template's flags the Shard does not render; their values count as reported."""
    found = [row for row in TEMPLATE_FLAGS if row.carried is None and row.when(v)]
    for row in found:
        v.used.update(row.values)
    return [f"{', '.join(row.flags)}: {row.advice}" for row in found]


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
    v = _Values(with_defaults(values, CHART_DEFAULTS))
    notes: list[str] = []
    errors: list[str] = []

    override = _trunc(str(v.get("fullnameOverride") or ""), 63)
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

    sharding = _flag(v.get("sharding.enabled"))
    non_root = sharding and not _flag(v.get("sharding.isRoot", True))
    hostname = str(v.get("sharding.rootShardInternalHostname") or "")
    if non_root:
        root = _root_name(hostname) if hostname else "root"
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

    cache = _cache(v)
    v.get("cache.enabled")
    v.get("externalCache.enabled")
    v.get("externalCache.cacheInternalHostname")
    if cache:
        cache_secret = _trunc(_trunc(fullname, 52) + "-cache", 63) + "-kubeconfig"
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
        if not endpoints and _flag(v.get("etcd.enabled", True)):
            endpoints = [f"https://{_trunc(_trunc(fullname, 58) + '-etcd', 63)}:{CHART_ETCD_PORT}"]
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
    kcp_certs = _trunc(_trunc(certs or fullname, 58) + "-kcp", 63)
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
    if _flag(v.get("kcp.logicalClusterAdminFlag")) and external:
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
    extra += _oidc_flags(v)
    extra += [f"--v={v.get('kcp.v')}", "--logging-format=json"]
    if _flag(v.get("kcp.profiling.enabled")):
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

    unrendered = _unrendered(v)
    unmapped = [
        f"{path}: {value!r}"
        for path, value in _leaves(values)
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
    return Conversion(manifest, tuple(unmapped), tuple(notes), tuple(errors), tuple(unrendered))
