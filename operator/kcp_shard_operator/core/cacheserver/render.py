"""CacheServer -> its NetworkPolicy, Service, data claim and Deployment (pure).

The cache server runs one replica on its embedded etcd (kcp's ``cache-server`` has no flags
for an external etcd), on a claim by default, with ``Recreate``: a surge pod would open the
same etcd. The operator and ``render`` both call :func:`render_cache_server`.

The shards trust what they read from the cache server (from the deprecating release on, the
identities of the core APIExports), and before kcp ~0.29.2 || ~0.30.2 || >=0.31.0 it
authenticates no client. The NetworkPolicy admits to its port only the pods carrying the
CacheServer's client label (:data:`~kcp_shard_operator.core.cacheserver.names.CLIENT_LABEL`):
the operator sets it on the pods of every Shard that names the CacheServer and of their
virtual-workspace servers; any other pod that must read the cache carries it the same way.
The operator itself never calls the cache server: its readiness is the pod's own probe, sent
by the kubelet from the node, which NetworkPolicies do not filter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kcp_shard_operator.constants import (
    CACHE_SERVER_API_VERSION,
    CACHE_SERVER_KIND,
    FIELD_MANAGER,
)
from kcp_shard_operator.core.api.meta import (
    INSTANCE_LABEL,
    NAME_LABEL,
    SECRETS_ANNOTATION,
    VERSION_ANNOTATION,
    stamped,
    version_label,
)
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.api.refs import CASecretKeyRef
from kcp_shard_operator.core.cacheserver.names import (
    ca_secret,
    child_name,
    claim_name,
    client_labels,
    serving_secret,
)
from kcp_shard_operator.core.cacheserver.spec import CacheServer
from kcp_shard_operator.core.kcp.podtemplate import PORT, Pod, kcp_pod_spec, revisions_digest
from kcp_shard_operator.core.kcp.versions import CACHE_CLIENT_CA_FLAG
from kcp_shard_operator.core.rollout.drift import drifted_from
from kcp_shard_operator.core.rollout.versions import downgrade_refusal, held_at_running_version
from kcp_shard_operator.core.storage.claim import refused_change
from kcp_shard_operator.core.storage.spec import STORAGE_DELETE

NAME = "kcp-cache-server"
"""``app.kubernetes.io/name`` of a cache server's objects."""
DATA_DIR = "/data"
TLS_DIR = "/etc/kcp-cache/tls"
CLIENT_CA_DIR = "/etc/kcp-cache/client-ca"


def selector_labels(cache: CacheServer) -> dict[str, str]:
    return {NAME_LABEL: NAME, INSTANCE_LABEL: cache.name}


def labels(cache: CacheServer, *, versioned: bool = False) -> dict[str, str]:
    result = {
        **selector_labels(cache),
        "app.kubernetes.io/component": "cache-server",
        "app.kubernetes.io/part-of": "kcp",
        "app.kubernetes.io/managed-by": FIELD_MANAGER,
    }
    if versioned:
        result["app.kubernetes.io/version"] = version_label(cache.spec.kcp_version)
    return result


def owner_reference(cache: CacheServer) -> JSON:
    return {
        "apiVersion": CACHE_SERVER_API_VERSION,
        "kind": CACHE_SERVER_KIND,
        "name": cache.name,
        "uid": cache.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(
    cache: CacheServer, *, name: str | None = None, versioned: bool = False, owned: bool = True
) -> JSON:
    meta: JSON = {
        "name": name or child_name(cache),
        "namespace": cache.namespace,
        "labels": labels(cache, versioned=versioned),
    }
    if cache.uid and owned:
        meta["ownerReferences"] = [owner_reference(cache)]
    return meta


def service(cache: CacheServer) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(cache),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(cache),
            "ports": [{"name": "https", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def network_policy(cache: CacheServer) -> JSON | None:
    """The NetworkPolicy of ``cache``; None when ``spec.networkPolicy.enabled`` is false."""
    if not cache.spec.network_policy.enabled:
        return None
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(cache),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(cache)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": client_labels(cache.name)}}],
                    "ports": [{"protocol": "TCP", "port": PORT}],
                }
            ],
        },
    }


def claim(cache: CacheServer) -> JSON:
    storage = cache.spec.storage_or_default
    spec: JSON = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name:
        spec["storageClassName"] = storage.storage_class_name
    owned = storage.when_deleted == STORAGE_DELETE
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(cache, name=claim_name(cache), owned=owned),
        "spec": spec,
    }


def client_ca(cache: CacheServer) -> CASecretKeyRef | None:
    """The CA of the client certificates the cache server accepts (``--client-ca-file``):
    ``spec.clientCASecretRef``, else the issued CA (only its ``ca.crt`` is mounted, never its
    key); None where the kcp version's cache server takes no such flag."""
    spec = cache.spec
    if not spec.authenticates_clients:
        return None
    if spec.client_ca_secret_ref is not None:
        return spec.client_ca_secret_ref
    return CASecretKeyRef(ca_secret(cache)) if spec.issues_ca else None


def mounted_secrets(cache: CacheServer) -> list[str]:
    """The Secrets the cache server's pod mounts."""
    ca = client_ca(cache)
    return [serving_secret(cache), *([ca.name] if ca else [])]


def deployment(cache: CacheServer, revisions: Mapping[str, str] | None) -> JSON:
    """The Deployment; its flags ``--root-directory`` only in the ``=`` form: the binary
    picks it out of the arguments by prefix before it parses the rest."""
    spec = cache.spec
    ephemeral = bool(spec.storage_or_default.ephemeral)
    data: JSON = (
        {"name": "data", "emptyDir": {}}
        if ephemeral
        else {"name": "data", "persistentVolumeClaim": {"claimName": claim_name(cache)}}
    )
    pod = Pod(volumes=[data], mounts=[{"name": "data", "mountPath": DATA_DIR}])
    pod.args += [
        f"--root-directory={DATA_DIR}",
        f"--secure-port={PORT}",
        f"--tls-cert-file={TLS_DIR}/tls.crt",
        f"--tls-private-key-file={TLS_DIR}/tls.key",
    ]
    pod.mount_secret("serving", serving_secret(cache), TLS_DIR, None)
    ca = client_ca(cache)
    if ca is not None:
        pod.args.append(f"{CACHE_CLIENT_CA_FLAG}={pod.ca_file('client-ca', ca, CLIENT_CA_DIR)}")
    pod.volumes.append({"name": "tmp", "emptyDir": {}})
    pod.mounts.append({"name": "tmp", "mountPath": "/tmp"})
    pod_spec = kcp_pod_spec("cache-server", ["/cache-server"], pod, spec)
    annotations = {VERSION_ANNOTATION: spec.version}
    if revisions is not None:
        annotations[SECRETS_ANNOTATION] = revisions_digest(pod_spec, revisions)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(cache, versioned=True),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector_labels(cache)},
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": labels(cache, versioned=True), "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }


@dataclass(frozen=True)
class RenderedCache:
    service: JSON
    deployment: JSON
    claim: JSON | None
    network_policy: JSON | None = None

    @property
    def objects(self) -> list[JSON]:
        """In the order they are applied: the NetworkPolicy before the pod it guards, the
        claim before the pod that mounts it."""
        return [
            *([self.network_policy] if self.network_policy else []),
            self.service,
            *([self.claim] if self.claim else []),
            self.deployment,
        ]


def render_cache_server(
    cache: CacheServer, secret_revisions: Mapping[str, str] | None = None
) -> RenderedCache:
    ephemeral = bool(cache.spec.storage_or_default.ephemeral)
    policy = network_policy(cache)
    return RenderedCache(
        service=stamped(service(cache)),
        deployment=stamped(deployment(cache, secret_revisions)),
        claim=None if ephemeral else stamped(claim(cache)),
        network_policy=stamped(policy) if policy else None,
    )


@dataclass(frozen=True)
class CacheWrites:
    """What one pass writes of a CacheServer's children, and what it holds back."""

    writes: list[JSON]
    refused: list[str] = field(default_factory=list)
    """Children not written, with why: a claim change the volume cannot take."""
    downgrade: str | None = None
    """Why the Deployment stays at the kcp version it runs (an older minor was asked for)."""
    delete_network_policy: bool = False
    """The NetworkPolicy the operator made is turned off (``spec.networkPolicy.enabled``)."""


def children_to_write(
    cache: CacheServer,
    observed: Mapping[str, JSON | None],
    secret_revisions: Mapping[str, str] | None,
    secrets_found: bool,
) -> CacheWrites:
    """The children a pass writes (those that drifted), and why others are not written: a
    claim change the volume cannot take; no Deployment while a Secret it mounts is missing
    (the pod could not start: nothing is rolled); no older minor release on the etcd a newer
    one has written (the Deployment stays at its version)."""
    live_deployment = observed.get("Deployment")
    downgrade = downgrade_refusal(
        "cache server", cache.spec.kcp_version, live_deployment, child_name(cache)
    )
    target = held_at_running_version(cache, live_deployment) if downgrade else cache
    rendered = render_cache_server(target or cache, secret_revisions)
    writes: list[JSON] = []
    refused: list[str] = []
    for child in rendered.objects:
        kind, live = child["kind"], observed.get(child["kind"])
        if kind == "PersistentVolumeClaim":
            refusal = refused_change(child, live)
            if refusal:
                refused.append(f"{kind} {child['metadata']['name']}: {refusal}")
                continue
        if kind == "Deployment" and (not secrets_found or target is None):
            continue
        if drifted_from(live, child):
            writes.append(child)
    turned_off = rendered.network_policy is None and observed.get("NetworkPolicy") is not None
    return CacheWrites(writes, refused, downgrade, turned_off)
