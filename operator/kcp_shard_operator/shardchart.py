"""Values of kcp-dev/helm-charts' deprecated ``shard`` chart (0.0.x) -> a ``Shard`` manifest.

Object names follow the chart's templates (``kcp.fullname``, ``cache.fullname``,
``certificates.kcp``), so the Shard references the Secrets the chart's
cert-manager Certificates already maintain. The chart's
``--root-shard-kubeconfig-file`` has no counterpart: the operator passes it
itself, and only to kcp versions that still use it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kcp_shard_operator.versions import (
    CACHE_KUBECONFIG_FLAG,
    ROOT_SHARD_KUBECONFIG_FLAG,
    InvalidVersionError,
    Version,
    ignores_root_shard_flag,
)

SHARD_API_VERSION = "kcpshard.dev/v1alpha1"
CHART_NAME = "shard"
DEFAULT_NAME = "kcp-shard"
DEFAULT_IMAGE = "ghcr.io/kcp-dev/kcp"
CHART_ETCD_PORT = 2379


@dataclass(frozen=True)
class Conversion:
    """The Shard manifest, settings left behind, and errors (no manifest when there are)."""

    manifest: dict[str, Any] | None
    unmapped: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


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


def without_root_shard_flag(args: list[str]) -> list[str]:
    """``args`` without the flag, in both its ``--flag=PATH`` and ``--flag PATH`` forms."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == ROOT_SHARD_KUBECONFIG_FLAG:
            skip = True
        elif not arg.startswith(ROOT_SHARD_KUBECONFIG_FLAG + "="):
            out.append(arg)
    return out


_OIDC_FLAGS = (
    ("issuerUrl", "--oidc-issuer-url"),
    ("clientId", "--oidc-client-id"),
    ("groupClaim", "--oidc-groups-claim"),
    ("usernameClaim", "--oidc-username-claim"),
    ("usernamePrefix", "--oidc-username-prefix"),
    ("groupsPrefix", "--oidc-groups-prefix"),
)


def _oidc_flags(v: _Values) -> list[str]:
    """The chart's OIDC flags; its CA file needs a mount the Shard has no place for."""
    if v.peek("authentication.configMapRef.name") or not _flag(v.get("oidc.enabled")):
        return []
    return [
        f"{flag}={v.get(f'oidc.{key}')}"
        for key, flag in _OIDC_FLAGS
        if v.get(f"oidc.{key}") is not None
    ]


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
    v = _Values(values)
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
    kcp_version = version or tag.removeprefix("v")
    if not kcp_version:
        errors.append("kcp.tag is empty (the chart used its appVersion): pass --kcp-version X.Y.Z")
    else:
        try:
            Version.parse(kcp_version)
        except InvalidVersionError as err:
            errors.append(f"cannot tell the kcp version: {err}; pass --kcp-version X.Y.Z")

    parsed: Version | None = None
    if kcp_version:
        try:
            parsed = Version.parse(kcp_version)
        except InvalidVersionError as err:
            errors.append(f"cannot tell the kcp version: {err}; pass --kcp-version X.Y.Z")
    image: dict[str, Any] = {"repository": str(v.get("kcp.image") or DEFAULT_IMAGE)}
    if tag:
        image["tag"] = tag
    if v.get("kcp.pullPolicy"):
        image["pullPolicy"] = v.get("kcp.pullPolicy")
    spec: dict[str, Any] = {"version": kcp_version, "image": image}

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
                f"{admin_secret} as rootShardKubeconfigSecretRef (the chart's kubeconfig refers "
                f"to certificate files by path); drop it when moving to kcp {deprecating_release}"
            )
        else:
            notes.append(
                f"{ROOT_SHARD_KUBECONFIG_FLAG} and Secret {admin_secret} are not carried over: "
                f"kcp from {deprecating_release} on ignores them"
            )
    if v.get("kcp.sharding"):
        notes.append("kcp.sharding.* is read by nothing in the chart; ignored")

    cache = _flag(v.get("cache.enabled")) or _flag(v.get("externalCache.enabled"))
    v.get("externalCache.cacheInternalHostname")
    if cache:
        cache_secret = _trunc(_trunc(fullname, 52) + "-cache", 63) + "-kubeconfig"
        spec["cache"] = {"kubeconfigSecretRef": {"name": cache_secret, "key": "kubeconfig"}}
        notes.append(
            f"cache kubeconfig: Secret {cache_secret} (made by the chart) refers to "
            "/etc/kcp/tls/ca/tls.crt by path; check it works in the operator's pods"
        )
    elif non_root:
        errors.append(
            "non-root shard (sharding.isRoot: false) with neither cache.enabled nor "
            f"externalCache.enabled: {CACHE_KUBECONFIG_FLAG} is required for non-root shards "
            "and kcp refuses to start without it"
        )

    etcd_address = str(v.get("kcp.etcd.serverAddress") or "")
    v.get("kcp.etcd.clientCertificate")
    if etcd_address == "embedded":
        notes.append("kcp.etcd.serverAddress 'embedded': the Shard runs an embedded etcd per pod")
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
    spec["tls"] = {
        "servingCertSecretRef": {"name": f"{fullname}-cert"},
        "clientCASecretRef": {"name": f"{kcp_certs}-client-ca"},
        "serviceAccountKeySecretRef": {"name": f"{kcp_certs}-service-account-ca"},
    }

    extra: list[str] = []
    batteries = v.get("kcp.batteries", [])
    if batteries:
        extra.append(f"--batteries-included={','.join(str(b) for b in batteries)}")
    if v.get("kcp.v"):
        extra.append(f"--v={v.get('kcp.v')}")
    if _flag(v.get("kcp.profiling.enabled")):
        extra.append(f"--profiler-address=0.0.0.0:{v.get('kcp.profiling.port', 6060)}")
    extra += _oidc_flags(v)
    extra += without_root_shard_flag([str(flag) for flag in v.get("kcp.extraFlags", [])])
    if extra:
        spec["extraArgs"] = extra
    if v.get("kcp.resources"):
        spec["resources"] = v.get("kcp.resources")
    v.get("kcp.enabled")

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
            "kind": "Shard",
            "metadata": {"name": fullname},
            "spec": spec,
        }
    )
    return Conversion(manifest, tuple(unmapped), tuple(notes), tuple(errors))
