"""VirtualWorkspaceServer -> its Service, Deployment and PodDisruptionBudget (pure).

The server keeps no state: two replicas by default, rolled one surge pod at a time, so a
rollout never drops below the PodDisruptionBudget. Its flags (what each kcp version takes is
in cmd/virtual-workspaces/options of the kcp module, v0.27.1 to v0.30.0 alike but for
``--shard-external-url``, hidden and ignored from 0.31):

- ``--kubeconfig``: its shard, as ``system:masters`` (it watches every workspace of the
  shard); ``--authentication-kubeconfig`` the same: bearer tokens are reviewed by the shard,
  and ``--authentication-skip-lookup`` keeps it from asking the shard for kube's
  ``extension-apiserver-authentication`` ConfigMap;
- ``--client-ca-file``: the shard's client CA (the shard proxies its own ``/services/``
  requests with a client certificate of it, impersonating the user);
- ``--requestheader-*``: the requestheader CA its shard trusts, for what the front-proxy
  forwards;
- ``--cache-kubeconfig``: its shard's cache server (a row of the flag table: from the
  deprecating release on the server reads the core APIExport identities there);
- ``--shard-external-url``: the shard's external URL (a row of the flag table).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kcp_shard_operator.constants import (
    FIELD_MANAGER,
    VIRTUAL_WORKSPACES_API_VERSION,
    VIRTUAL_WORKSPACES_KIND,
)
from kcp_shard_operator.core.api.meta import (
    INSTANCE_LABEL,
    NAME_LABEL,
    SECRETS_ANNOTATION,
    VERSION_ANNOTATION,
    stamped,
    version_label,
)
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.api.refs import LocalObjectRef, SecretKeyRef
from kcp_shard_operator.core.cacheserver.names import client_labels
from kcp_shard_operator.core.kcp.flags import refuse_overrides, retire
from kcp_shard_operator.core.kcp.podtemplate import PORT, Pod, kcp_pod_spec, revisions_digest
from kcp_shard_operator.core.kcp.versions import (
    CACHE_KUBECONFIG_FLAG,
    SHARD_EXTERNAL_URL_FLAG,
    Role,
    Version,
    flag_applies,
    flag_required,
    retired_flags,
)
from kcp_shard_operator.core.shard.names import base_url
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.virtualworkspaces.names import (
    child_name,
    kubeconfig_secret,
    serving_secret,
    shard_name,
)
from kcp_shard_operator.core.virtualworkspaces.spec import VirtualWorkspaceServer

NAME = "kcp-virtual-workspaces"
"""``app.kubernetes.io/name`` of a virtual-workspace server's objects."""
CONTAINER = "virtual-workspaces"
CONFIG_DIR = "/etc/kcp-virtual-workspaces"
ROLE = Role.VIRTUAL_WORKSPACES
REQUEST_HEADER_FLAGS = (
    "--requestheader-username-headers=X-Remote-User",
    "--requestheader-group-headers=X-Remote-Group",
    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
)
SPEC_FIELDS = {
    "--shard-external-url": "Shard spec.externalURL",
    CACHE_KUBECONFIG_FLAG: "Shard spec.cache",
    "--client-ca-file": "Shard spec.tls.clientCASecretRef",
    "--requestheader-client-ca-file": "Shard spec.tls.requestHeaderClientCASecretRef",
}
"""Where the flags that come from the served Shard are set; the others (``--kubeconfig``,
``--authentication-*``, ``--tls-*``, ``--secure-port``) are the operator's own."""


def selector_labels(server: VirtualWorkspaceServer) -> dict[str, str]:
    return {NAME_LABEL: NAME, INSTANCE_LABEL: server.name}


def labels(server: VirtualWorkspaceServer, *, versioned: bool = False) -> dict[str, str]:
    result = {
        **selector_labels(server),
        "app.kubernetes.io/component": "virtual-workspaces",
        "app.kubernetes.io/part-of": "kcp",
        "app.kubernetes.io/managed-by": FIELD_MANAGER,
    }
    if versioned:
        result["app.kubernetes.io/version"] = version_label(server.spec.kcp_version)
    return result


def metadata(server: VirtualWorkspaceServer, *, versioned: bool = False) -> JSON:
    meta: JSON = {
        "name": child_name(server),
        "namespace": server.namespace,
        "labels": labels(server, versioned=versioned),
    }
    if server.uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": VIRTUAL_WORKSPACES_API_VERSION,
                "kind": VIRTUAL_WORKSPACES_KIND,
                "name": server.name,
                "uid": server.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return meta


def service(server: VirtualWorkspaceServer) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(server),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(server),
            "ports": [{"name": "https", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def shard_kubeconfig_server(shard: Shard) -> str:
    """The server of the kubeconfig to ``shard``: its root workspace, where the delegated
    TokenReviews go (``--kubeconfig`` drops the path itself)."""
    return f"{base_url(shard)}/clusters/root"


def server_flags(server: VirtualWorkspaceServer, shard: Shard, deprecating_release: Version) -> Pod:
    """The ``virtual-workspaces`` arguments, with the volumes and mounts they read; ``shard``
    is the served Shard with its issued references filled in."""
    if shard.name != shard_name(server) or shard.namespace != server.namespace:
        raise SpecError("spec.shardRef", f"Shard {shard_name(server)!r} not found")
    spec, tls = server.spec, shard.spec.tls
    version = spec.kcp_version
    if tls.client_ca_secret_ref is None:
        raise SpecError(
            "spec.shardRef",
            f"Shard {shard.name} has no client CA (spec.tls.clientCASecretRef, or issued): "
            "the server could not authenticate the shard's proxied requests",
        )
    pod = Pod()
    serving = pod.secret_dir(
        "serving", LocalObjectRef(serving_secret(server)), f"{CONFIG_DIR}/serving"
    )
    kubeconfig = pod.kubeconfig(
        "kubeconfig", SecretKeyRef(kubeconfig_secret(server)), f"{CONFIG_DIR}/kubeconfig"
    )
    client_ca = pod.secret_dir("client-ca", tls.client_ca_secret_ref, f"{CONFIG_DIR}/client-ca")
    pod.volumes.append({"name": "tmp", "emptyDir": {}})
    pod.mounts.append({"name": "tmp", "mountPath": "/tmp"})
    pod.args += [
        f"--secure-port={PORT}",
        f"--tls-cert-file={serving}/tls.crt",
        f"--tls-private-key-file={serving}/tls.key",
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        "--authentication-skip-lookup",
        f"--client-ca-file={client_ca}/ca.crt",
    ]
    if tls.request_header_client_ca_secret_ref is not None:
        path = pod.ca_file(
            "requestheader-client-ca",
            tls.request_header_client_ca_secret_ref,
            f"{CONFIG_DIR}/requestheader-client-ca",
        )
        pod.args += [f"--requestheader-client-ca-file={path}", *REQUEST_HEADER_FLAGS]
    if flag_applies(SHARD_EXTERNAL_URL_FLAG, version, ROLE, deprecating_release):
        pod.args.append(f"{SHARD_EXTERNAL_URL_FLAG}={shard.spec.external_url or base_url(shard)}")
    cache_ref = shard.spec.cache.kubeconfig_ref
    if cache_ref is not None and flag_applies(
        CACHE_KUBECONFIG_FLAG, version, ROLE, deprecating_release
    ):
        path = pod.kubeconfig("cache-kubeconfig", cache_ref, f"{CONFIG_DIR}/cache")
        pod.args.append(f"{CACHE_KUBECONFIG_FLAG}={path}")
    elif flag_required(CACHE_KUBECONFIG_FLAG, version, ROLE, deprecating_release):
        raise SpecError(
            "spec.shardRef",
            f"Shard {shard.name} names no cache server (spec.cache): kcp {version} reads the "
            f"core APIExport identities from the cache server (from {deprecating_release} on)",
        )
    extra, _ = retire(spec.extra_args, retired_flags(version, ROLE, deprecating_release))
    refuse_overrides(pod.args, extra, SPEC_FIELDS)
    pod.args += extra
    return pod


def deployment(
    server: VirtualWorkspaceServer,
    pod: Pod,
    revisions: Mapping[str, str] | None,
    cache_server: str | None = None,
) -> JSON:
    """The Deployment; its pods carry the client label of ``cache_server`` (the CacheServer
    its shard names), which that CacheServer's NetworkPolicy admits."""
    spec = server.spec
    pod_spec = kcp_pod_spec(CONTAINER, ["/virtual-workspaces"], pod, spec)
    annotations = {VERSION_ANNOTATION: spec.version}
    if revisions is not None:
        annotations[SECRETS_ANNOTATION] = revisions_digest(pod_spec, revisions)
    pod_labels = labels(server, versioned=True)
    if cache_server is not None:
        pod_labels |= client_labels(cache_server)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(server, versioned=True),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(server)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": {
                "metadata": {"labels": pod_labels, "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }


def pdb(server: VirtualWorkspaceServer) -> JSON | None:
    if server.spec.replicas <= 1:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(server),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(server)}},
    }


@dataclass(frozen=True)
class RenderedVirtualWorkspaces:
    service: JSON
    deployment: JSON
    pdb: JSON | None

    @property
    def objects(self) -> list[JSON]:
        return [self.service, self.deployment, *([self.pdb] if self.pdb else [])]


def render_virtual_workspaces(
    server: VirtualWorkspaceServer,
    shard: Shard,
    deprecating_release: Version,
    secret_revisions: Mapping[str, str] | None = None,
) -> RenderedVirtualWorkspaces:
    """The children of ``server``; ``shard`` is the Shard it serves, with the references the
    operator issues for it filled in (:func:`kcp_shard_operator.core.shard.pki.with_issued`).

    With ``secret_revisions`` (Secret name -> resourceVersion) the pod template carries a
    digest of the mounted Secrets' revisions, so pods roll when a certificate rotates.
    """
    budget = pdb(server)
    flags = server_flags(server, shard, deprecating_release)
    cache = shard.spec.cache.server_ref
    return RenderedVirtualWorkspaces(
        service=stamped(service(server)),
        deployment=stamped(
            deployment(server, flags, secret_revisions, cache.name if cache else None)
        ),
        pdb=stamped(budget) if budget else None,
    )
