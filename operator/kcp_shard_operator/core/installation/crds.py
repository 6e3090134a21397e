"""The CustomResourceDefinitions of the operator's kinds, generated from the spec models."""

from __future__ import annotations

from kcp_shard_operator.constants import (
    API_GROUP,
    API_VERSION,
    CACHE_SERVER_KIND,
    CACHE_SERVER_PLURAL,
    FRONT_PROXY_KIND,
    FRONT_PROXY_PLURAL,
    KUBECONFIG_KIND,
    KUBECONFIG_PLURAL,
    SHARD_KIND,
    SHARD_PLURAL,
    VIRTUAL_WORKSPACES_KIND,
    VIRTUAL_WORKSPACES_PLURAL,
    VIRTUAL_WORKSPACES_SHORT_NAME,
)
from kcp_shard_operator.core.api.model import JSON, object_schema
from kcp_shard_operator.core.backup.record import status_schema as backup_status_schema
from kcp_shard_operator.core.backup.restore import status_schema as restore_status_schema
from kcp_shard_operator.core.cacheserver import spec as cachespec
from kcp_shard_operator.core.frontproxy import spec as frontproxyspec
from kcp_shard_operator.core.kcp.serverspec import NAME_PATTERN, max_name_length
from kcp_shard_operator.core.kubeconfig import spec as kubeconfigspec
from kcp_shard_operator.core.shard.spec import CHILD_SUFFIX, SPEC_RULES, ShardSpec
from kcp_shard_operator.core.virtualworkspaces import spec as vwspec


def _condition_schema() -> JSON:
    text = {"type": "string"}
    return {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": text,
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": text,
            "message": text,
            "observedGeneration": {"type": "integer", "format": "int64"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        },
    }


def _column(name: str, path: str, type_: str = "string") -> JSON:
    return {"name": name, "type": type_, "jsonPath": path}


def _ready_column() -> JSON:
    return _column("Ready", '.status.conditions[?(@.type=="Ready")].status')


def _conditions_schema() -> JSON:
    return {
        "type": "array",
        "items": _condition_schema(),
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    }


def _crd(
    kind: str,
    plural: str,
    description: str,
    spec: JSON,
    status: JSON,
    columns: list[JSON],
    name_rule: JSON,
    short_names: tuple[str, ...] = (),
) -> JSON:
    names: JSON = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
        "categories": ["kcp"],
    }
    if short_names:
        names["shortNames"] = list(short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{API_GROUP}",
            "labels": {"app.kubernetes.io/name": "kcp-shard-operator"},
        },
        "spec": {
            "group": API_GROUP,
            "names": names,
            "scope": "Namespaced",
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        *columns,
                        _column("Age", ".metadata.creationTimestamp", "date"),
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "required": ["spec"],
                            "x-kubernetes-validations": [name_rule],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def _name_rule(kind: str, suffix: str) -> JSON:
    max_length = max_name_length(suffix)
    return {
        "rule": f"size(self.metadata.name) <= {max_length} && "
        f"self.metadata.name.matches('{NAME_PATTERN}')",
        "message": f"metadata.name must be a DNS-1035 label of at most {max_length} "
        f"characters: the {kind}'s Service is <name>{suffix}",
    }


def status_schema() -> JSON:
    return {
        "type": "object",
        "description": "Observed state of the shard, written by the operator.",
        "properties": {
            "observedGeneration": {"type": "integer", "format": "int64"},
            "version": {
                "type": "string",
                "description": "kcp version that is fully rolled out on every replica.",
            },
            "phase": {"type": "string"},
            "readyReplicas": {"type": "integer"},
            "dataUID": {
                "type": "string",
                "description": "UID of the LogicalCluster of the shard's system:shard logical "
                "cluster when the operator first verified it. kcp creates that object on an "
                "empty etcd only: another UID means the shard's data is gone (DataLost).",
            },
            "certificates": {
                "type": "array",
                "description": "The certificates and kubeconfigs the operator issued for the "
                "shard (spec.pki), and when each expires.",
                "items": {
                    "type": "object",
                    "properties": {
                        "secret": {"type": "string"},
                        "notAfter": {"type": "string", "format": "date-time"},
                    },
                },
            },
            "conditions": _conditions_schema(),
            **backup_status_schema(),
            **restore_status_schema(),
        },
    }


def shard_crd() -> JSON:
    spec = object_schema(ShardSpec)
    spec["x-kubernetes-validations"] = [rule.as_schema() for rule in SPEC_RULES]
    columns = [
        _column("Root", ".spec.rootShardRef.name"),
        _column("Desired", ".spec.version"),
        _column("Running", ".status.version"),
        _ready_column(),
        _column("Verified", '.status.conditions[?(@.type=="DataVerified")].status'),
        _column("Phase", ".status.phase"),
    ]
    return _crd(
        SHARD_KIND,
        SHARD_PLURAL,
        "A kcp shard run by kcp-shard-operator.",
        spec,
        status_schema(),
        columns,
        _name_rule(SHARD_KIND, CHILD_SUFFIX),
    )


def cache_server_status_schema() -> JSON:
    return {
        "type": "object",
        "description": "Observed state of the cache server, written by the operator.",
        "properties": {
            "observedGeneration": {"type": "integer", "format": "int64"},
            "version": {
                "type": "string",
                "description": "kcp version of the cache server that is rolled out and Ready.",
            },
            "phase": {"type": "string"},
            "url": {
                "type": "string",
                "description": "Where the shards reach the cache server (its Service).",
            },
            "kubeconfigSecret": {
                "type": "string",
                "description": "The issued kubeconfig the shards naming it mount.",
            },
            "certificates": status_schema()["properties"]["certificates"],
            "conditions": _conditions_schema(),
        },
    }


def cache_server_crd() -> JSON:
    spec = object_schema(cachespec.CacheServerSpec)
    spec["x-kubernetes-validations"] = [
        {"rule": rule, "message": message} for rule, message, _ in cachespec.RULES
    ]
    columns = [
        _column("Desired", ".spec.version"),
        _column("Running", ".status.version"),
        _ready_column(),
        _column("Phase", ".status.phase"),
    ]
    return _crd(
        CACHE_SERVER_KIND,
        CACHE_SERVER_PLURAL,
        "A kcp cache server run by kcp-shard-operator.",
        spec,
        cache_server_status_schema(),
        columns,
        _name_rule(CACHE_SERVER_KIND, cachespec.CHILD_SUFFIX),
    )


def front_proxy_status_schema() -> JSON:
    text = {"type": "string"}
    return {
        "type": "object",
        "description": "Observed state of the front-proxy, written by the operator.",
        "properties": {
            "observedGeneration": {"type": "integer", "format": "int64"},
            "version": {
                "type": "string",
                "description": "kcp version rolled out on every front-proxy replica.",
            },
            "phase": text,
            "readyReplicas": {"type": "integer"},
            "url": {
                "type": "string",
                "description": "Where users reach the front-proxy (spec.externalURL, else its "
                "Service); the installation's shards advertise it.",
            },
            "serviceURL": {
                "type": "string",
                "description": "Where the shards and the operator reach it (its Service).",
            },
            "adminKubeconfigSecret": {
                "type": "string",
                "description": "The issued admin kubeconfig for users (system:kcp:admin).",
            },
            "certificates": status_schema()["properties"]["certificates"],
            "conditions": _conditions_schema(),
        },
    }


def front_proxy_crd() -> JSON:
    spec = object_schema(frontproxyspec.FrontProxySpec)
    spec["x-kubernetes-validations"] = [
        {"rule": rule, "message": message} for rule, message, _ in frontproxyspec.RULES
    ]
    columns = [
        _column("Root", ".spec.rootShardRef.name"),
        _column("Desired", ".spec.version"),
        _column("Running", ".status.version"),
        _ready_column(),
        _column("Routing", '.status.conditions[?(@.type=="Routing")].status'),
        _column("Phase", ".status.phase"),
        _column("URL", ".status.url"),
    ]
    return _crd(
        FRONT_PROXY_KIND,
        FRONT_PROXY_PLURAL,
        "A kcp front-proxy run by kcp-shard-operator.",
        spec,
        front_proxy_status_schema(),
        columns,
        _name_rule(FRONT_PROXY_KIND, frontproxyspec.CHILD_SUFFIX),
    )


def virtual_workspaces_status_schema() -> JSON:
    return {
        "type": "object",
        "description": "Observed state of the virtual-workspace server, written by the operator.",
        "properties": {
            "observedGeneration": {"type": "integer", "format": "int64"},
            "version": {
                "type": "string",
                "description": "kcp version rolled out on every replica.",
            },
            "phase": {"type": "string"},
            "readyReplicas": {"type": "integer"},
            "url": {
                "type": "string",
                "description": "Its Service URL: what its shard advertises as "
                "--shard-virtual-workspace-url (the APIExportEndpointSlices list it).",
            },
            "certificates": status_schema()["properties"]["certificates"],
            "conditions": _conditions_schema(),
        },
    }


def virtual_workspaces_crd() -> JSON:
    spec = object_schema(vwspec.VirtualWorkspaceServerSpec)
    spec["x-kubernetes-validations"] = [
        {"rule": rule, "message": message} for rule, message, _ in vwspec.RULES
    ]
    columns = [
        _column("Shard", ".spec.shardRef.name"),
        _column("Desired", ".spec.version"),
        _column("Running", ".status.version"),
        _ready_column(),
        _column("Phase", ".status.phase"),
        _column("URL", ".status.url"),
    ]
    return _crd(
        VIRTUAL_WORKSPACES_KIND,
        VIRTUAL_WORKSPACES_PLURAL,
        "A kcp standalone virtual-workspace server run by kcp-shard-operator for one Shard.",
        spec,
        virtual_workspaces_status_schema(),
        columns,
        _name_rule(VIRTUAL_WORKSPACES_KIND, vwspec.CHILD_SUFFIX),
        (VIRTUAL_WORKSPACES_SHORT_NAME,),
    )


def kubeconfig_status_schema() -> JSON:
    text = {"type": "string"}
    return {
        "type": "object",
        "description": "Observed state of the user's kubeconfig, written by the operator.",
        "properties": {
            "observedGeneration": {"type": "integer", "format": "int64"},
            "phase": text,
            "secret": {
                "type": "string",
                "description": "The Secret holding the kubeconfig (key kubeconfig).",
            },
            "notAfter": {
                "type": "string",
                "format": "date-time",
                "description": "When the client certificate in the Secret expires.",
            },
            "server": {
                "type": "string",
                "description": "The kubeconfig's server: the workspace's URL at the target.",
            },
            "bindings": {
                "type": "array",
                "description": "The ClusterRoleBindings the operator made for the user.",
                "items": {
                    "type": "object",
                    "properties": {"workspace": text, "name": text, "clusterRole": text},
                },
            },
            "conditions": _conditions_schema(),
        },
    }


def kubeconfig_crd() -> JSON:
    spec = object_schema(kubeconfigspec.KubeconfigSpec)
    spec["x-kubernetes-validations"] = [
        {
            "rule": "duration(self.renewBefore) < duration(self.validity)",
            "message": "spec.renewBefore must be shorter than spec.validity",
        }
    ]
    columns = [
        _column("User", ".spec.username"),
        _column("Workspace", ".spec.workspace"),
        _column("Secret", ".status.secret"),
        _column("Expires", ".status.notAfter"),
        _ready_column(),
        _column("Phase", ".status.phase"),
    ]
    name_rule = {
        "rule": f"size(self.metadata.name) <= {kubeconfigspec.MAX_NAME_LENGTH} && "
        f"self.metadata.name.matches('{kubeconfigspec.NAME_PATTERN}')",
        "message": f"metadata.name must be a DNS-1123 label of at most "
        f"{kubeconfigspec.MAX_NAME_LENGTH} characters",
    }
    return _crd(
        KUBECONFIG_KIND,
        KUBECONFIG_PLURAL,
        "A user's kubeconfig for a kcp workspace, issued and renewed by kcp-shard-operator.",
        spec,
        kubeconfig_status_schema(),
        columns,
        name_rule,
    )


def crds() -> list[JSON]:
    return [
        shard_crd(),
        cache_server_crd(),
        front_proxy_crd(),
        virtual_workspaces_crd(),
        kubeconfig_crd(),
    ]
