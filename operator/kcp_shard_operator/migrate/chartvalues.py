"""The deprecated kcp ``shard`` chart's values as its templates read them: the chart's
defaults, the merged values with the paths the conversion used, and the conditions its
templates test (pure)."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kcp_shard_operator.constants import DEFAULT_IMAGE_REPOSITORY

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


@dataclass
class ChartValues:
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
        return truthy(self.peek(path))

    def is_used(self, path: str) -> bool:
        return any(path == u or path.startswith(u + ".") for u in self.used)


def leaves(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(data, Mapping) and data:
        for key, value in data.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, data


def truncated(name: str, length: int) -> str:
    return name[:length].rstrip("-")


def truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def root_name_of(hostname: str) -> str:
    """The root shard's name from its internal hostname (the chart's ``<fullname>-internal``)."""
    label = hostname.split(".", 1)[0].split(":", 1)[0]
    return label.removesuffix("-internal")


OIDC_FLAGS = (
    ("issuerUrl", "--oidc-issuer-url"),
    ("clientId", "--oidc-client-id"),
    ("groupClaim", "--oidc-groups-claim"),
    ("usernameClaim", "--oidc-username-claim"),
    ("usernamePrefix", "--oidc-username-prefix"),
    ("groupsPrefix", "--oidc-groups-prefix"),
)


def oidc_flags(v: ChartValues) -> list[str]:
    """The chart's OIDC flags, all six as it renders them (empty when unset)."""
    if v.peek("authentication.configMapRef.name") or not truthy(v.get("oidc.enabled")):
        return []
    return [f"{flag}={v.get(f'oidc.{key}', '')}" for key, flag in OIDC_FLAGS]


def external_etcd(v: ChartValues) -> bool:
    return str(v.peek("kcp.etcd.serverAddress", "")) != "embedded"


def sharding(v: ChartValues) -> bool:
    return v.on("sharding.enabled")


def non_root(v: ChartValues) -> bool:
    return sharding(v) and not truthy(v.peek("sharding.isRoot", True))


def uses_cache(v: ChartValues) -> bool:
    return v.on("cache.enabled") or v.on("externalCache.enabled")
