"""Names shared across the layers: the Shard API, the field manager, the default image and the
environment variables the commands read. Nothing else is defined in more than one module."""

API_GROUP = "kcpshard.dev"
API_VERSION = "v1alpha1"
SHARD_API_VERSION = f"{API_GROUP}/{API_VERSION}"
SHARD_KIND = "Shard"
SHARD_PLURAL = "shards"
CACHE_SERVER_API_VERSION = SHARD_API_VERSION
CACHE_SERVER_KIND = "CacheServer"
CACHE_SERVER_PLURAL = "cacheservers"
FRONT_PROXY_API_VERSION = SHARD_API_VERSION
FRONT_PROXY_KIND = "FrontProxy"
FRONT_PROXY_PLURAL = "frontproxies"
VIRTUAL_WORKSPACES_API_VERSION = SHARD_API_VERSION
VIRTUAL_WORKSPACES_KIND = "VirtualWorkspaceServer"
VIRTUAL_WORKSPACES_PLURAL = "virtualworkspaceservers"
VIRTUAL_WORKSPACES_SHORT_NAME = "vws"
KUBECONFIG_API_VERSION = SHARD_API_VERSION
KUBECONFIG_KIND = "Kubeconfig"
KUBECONFIG_PLURAL = "kubeconfigs"
FIELD_MANAGER = "kcp-shard-operator"
NAMESPACE_TERMINATING = "because it is being terminated"
"""What the API server says when it refuses to create an object in a namespace being deleted
(to the operator's writes, and to the ReplicaSet controller's pods in a ReplicaFailure)."""

DEFAULT_IMAGE_REPOSITORY = "ghcr.io/kcp-dev/kcp"

DEPRECATING_RELEASE_ENV = "KCP_SHARD_ROOT_SHARD_FLAG_REMOVED_IN"
CLEANUP_ENV = "KCP_SHARD_IDENTITY_CACHE_CLEANUP"
KCP_CHECKS_ENV = "KCP_SHARD_KCP_CHECKS"
LOG_LEVEL_ENV = "KCP_SHARD_LOG_LEVEL"
LOG_FORMAT_ENV = "KCP_SHARD_LOG_FORMAT"
