"""The Shard CustomResourceDefinition, generated from the spec model."""

from __future__ import annotations

from kcp_shard_operator.constants import API_GROUP, API_VERSION, SHARD_KIND, SHARD_PLURAL
from kcp_shard_operator.core.model import JSON, object_schema
from kcp_shard_operator.core.spec import MAX_NAME_LENGTH, NAME_PATTERN, SPEC_RULES, ShardSpec

CRD_FILE = f"{API_GROUP}_{SHARD_PLURAL}.yaml"


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
            "conditions": {
                "type": "array",
                "items": _condition_schema(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
        },
    }


def shard_crd() -> JSON:
    spec_schema = object_schema(ShardSpec)
    spec_schema["x-kubernetes-validations"] = [rule.as_schema() for rule in SPEC_RULES]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{SHARD_PLURAL}.{API_GROUP}",
            "labels": {"app.kubernetes.io/name": "kcp-shard-operator"},
        },
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": SHARD_KIND,
                "listKind": f"{SHARD_KIND}List",
                "plural": SHARD_PLURAL,
                "singular": "shard",
                "categories": ["kcp"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Root", "type": "string", "jsonPath": ".spec.rootShardRef.name"},
                        {"name": "Desired", "type": "string", "jsonPath": ".spec.version"},
                        {"name": "Running", "type": "string", "jsonPath": ".status.version"},
                        {
                            "name": "Ready",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                        },
                        {
                            "name": "Verified",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="DataVerified")].status',
                        },
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A kcp shard run by kcp-shard-operator.",
                            "required": ["spec"],
                            "x-kubernetes-validations": [
                                {
                                    "rule": f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && "
                                    f"self.metadata.name.matches('{NAME_PATTERN}')",
                                    "message": f"metadata.name must be a DNS-1035 label of at "
                                    f"most {MAX_NAME_LENGTH} characters: the Shard's Service "
                                    "is <name>-kcp",
                                }
                            ],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }
