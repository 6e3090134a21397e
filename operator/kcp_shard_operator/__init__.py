"""Run and upgrade sharded kcp on Kubernetes."""

FIELD_MANAGER = "kcp-shard-operator"
API_GROUP = "kcpshard.dev"
API_VERSION = "v1alpha1"
