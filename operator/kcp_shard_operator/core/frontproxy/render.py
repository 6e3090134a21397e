"""FrontProxy -> its Service, path-mapping ConfigMap, Deployment and PodDisruptionBudget (pure).

The front-proxy keeps no state: two replicas by default, rolled one surge pod at a time, so
a rollout never drops below the PodDisruptionBudget. Its mapping sends ``/clusters/`` (which
it routes to the shard holding each workspace) to the root shard, and ``/services/`` to the
root shard or, when a VirtualWorkspaceServer runs the root shard's virtual workspaces, to
that server. kcp's front-proxy (up to 0.31 at least: pkg/proxy/mapping.go, "TODO: handle
virtual workspace apiservers per shard") has one backend per path: the virtual workspaces
of another shard are reached at the URL its APIExportEndpointSlices list (its own
virtual-workspace server), not through the front-proxy. The operator and ``render`` both
call :func:`render_front_proxy`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from kcp_shard_operator.constants import (
    API_GROUP,
    FIELD_MANAGER,
    FRONT_PROXY_API_VERSION,
    FRONT_PROXY_KIND,
)
from kcp_shard_operator.core.api.meta import (
    INSTANCE_LABEL,
    NAME_LABEL,
    ROOT_SHARD_LABEL,
    SECRETS_ANNOTATION,
    VERSION_ANNOTATION,
    stamped,
    version_label,
)
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.api.refs import CASecretKeyRef, LocalObjectRef, SecretKeyRef
from kcp_shard_operator.core.auth.flags import FRONT_PROXY_SPEC_FIELDS as AUTH_SPEC_FIELDS
from kcp_shard_operator.core.auth.flags import front_proxy_auth_args
from kcp_shard_operator.core.auth.spec import front_proxy_auth_secrets
from kcp_shard_operator.core.frontproxy.names import (
    child_name,
    kubeconfig_secret,
    mapping_name,
    requestheader_secret,
    root_name,
    serving_secret,
)
from kcp_shard_operator.core.frontproxy.spec import FrontProxy
from kcp_shard_operator.core.kcp.flags import refuse_overrides
from kcp_shard_operator.core.kcp.podtemplate import PORT, Pod, kcp_pod_spec, revisions_digest
from kcp_shard_operator.core.kcp.versions import (
    ROOT_KUBECONFIG_FLAG,
    SHARD_PEER_KUBECONFIG_FLAG,
    Role,
    Version,
    flag_applies,
)
from kcp_shard_operator.core.pki.issuance import Names
from kcp_shard_operator.core.shard.names import base_url
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.virtualworkspaces.names import service_url as virtual_workspaces_url
from kcp_shard_operator.core.virtualworkspaces.spec import VirtualWorkspaceServer

NAME = "kcp-front-proxy"
"""``app.kubernetes.io/name`` of a front-proxy's objects."""
CONFIG_DIR = "/etc/kcp-front-proxy"
MAPPING_FILE = "mapping.yaml"
MAPPING_ANNOTATION = f"{API_GROUP}/mapping"
"""On the pod template: a digest of the mapping, which kcp-front-proxy reads once at start."""
SERVICES_PATH = "/services/"
FORWARDED_PATHS = ("/clusters/", SERVICES_PATH)
SPEC_FIELDS = {
    **dict.fromkeys(("--tls-cert-file", "--tls-private-key-file"), "spec.tls.servingCertSecretRef"),
    "--client-ca-file": "spec.tls.clientCASecretRef",
    **dict.fromkeys(
        (ROOT_KUBECONFIG_FLAG, "--shards-kubeconfig", SHARD_PEER_KUBECONFIG_FLAG),
        "spec.kubeconfigSecretRef",
    ),
    **AUTH_SPEC_FIELDS,
}
"""The spec field each rendered flag comes from; ``--secure-port``, ``--root-directory`` and
``--mapping-file`` are the operator's own."""


def selector_labels(proxy: FrontProxy) -> dict[str, str]:
    return {NAME_LABEL: NAME, INSTANCE_LABEL: proxy.name}


def labels(proxy: FrontProxy, *, versioned: bool = False) -> dict[str, str]:
    result = {
        **selector_labels(proxy),
        "app.kubernetes.io/component": "front-proxy",
        "app.kubernetes.io/part-of": "kcp",
        "app.kubernetes.io/managed-by": FIELD_MANAGER,
        ROOT_SHARD_LABEL: root_name(proxy),
    }
    if versioned:
        result["app.kubernetes.io/version"] = version_label(proxy.spec.kcp_version)
    return result


def metadata(proxy: FrontProxy, *, name: str | None = None, versioned: bool = False) -> JSON:
    meta: JSON = {
        "name": name or child_name(proxy),
        "namespace": proxy.namespace,
        "labels": labels(proxy, versioned=versioned),
    }
    if proxy.uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": FRONT_PROXY_API_VERSION,
                "kind": FRONT_PROXY_KIND,
                "name": proxy.name,
                "uid": proxy.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return meta


def service(proxy: FrontProxy) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(proxy),
        "spec": {
            "type": proxy.spec.service_type,
            "selector": selector_labels(proxy),
            "ports": [{"name": "https", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def mapping(root: Shard, virtual_workspaces: VirtualWorkspaceServer | None = None) -> str:
    """The mapping file: the forwarded paths to the root shard (``/services/`` to the
    root's ``virtual_workspaces`` server when it has one), verified with the shards' CA
    (which signs the servers' certificates too) and forwarded with the requestheader client
    certificate."""
    services = virtual_workspaces_url(virtual_workspaces) if virtual_workspaces else None
    entries = [
        {
            "path": path,
            "backend": services if services and path == SERVICES_PATH else base_url(root),
            "backend_server_ca": f"{CONFIG_DIR}/shards-ca/ca.crt",
            "proxy_client_cert": f"{CONFIG_DIR}/requestheader/tls.crt",
            "proxy_client_key": f"{CONFIG_DIR}/requestheader/tls.key",
        }
        for path in FORWARDED_PATHS
    ]
    return str(yaml.safe_dump(entries, sort_keys=False))


def config_map(proxy: FrontProxy, text: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(proxy, name=mapping_name(proxy)),
        "data": {MAPPING_FILE: text},
    }


@dataclass(frozen=True)
class Mounted:
    """The Secrets the front-proxy's pods mount, each one named or issued."""

    serving: LocalObjectRef
    client_ca: CASecretKeyRef
    requestheader: LocalObjectRef
    shards_ca: CASecretKeyRef
    kubeconfig: SecretKeyRef
    auth: tuple[str, ...] = ()
    """The Secrets of ``spec.auth``."""

    @property
    def secrets(self) -> list[str]:
        """The names of the Secrets, sorted."""
        refs = (self.serving, self.client_ca, self.requestheader, self.shards_ca, self.kubeconfig)
        return sorted({ref.name for ref in refs} | set(self.auth))


def mounted(proxy: FrontProxy) -> Mounted:
    """What ``proxy`` mounts: what its spec names, else the Secret issued for it, or the
    installation's client CA bundle (which holds the CA that signs the shards' certificates
    and the users' client certificates)."""
    spec, tls = proxy.spec, proxy.spec.tls
    issued = spec.pki.issue
    client_ca = CASecretKeyRef(Names(root_name(proxy)).client_ca) if issued else None
    found = (
        tls.serving_cert_secret_ref or (LocalObjectRef(serving_secret(proxy)) if issued else None),
        tls.client_ca_secret_ref or client_ca,
        tls.request_header_client_cert_secret_ref
        or (LocalObjectRef(requestheader_secret(proxy)) if issued else None),
        tls.shards_ca_secret_ref or client_ca,
        spec.kubeconfig_secret_ref or (SecretKeyRef(kubeconfig_secret(proxy)) if issued else None),
    )
    serving, client, requestheader, shards, kubeconfig = found
    if serving is None or client is None or requestheader is None or shards is None:
        raise SpecError("spec.tls", "spec.pki.issue is false and a certificate is not named")
    if kubeconfig is None:
        raise SpecError("spec.kubeconfigSecretRef", "spec.pki.issue is false and it is unset")
    auth = front_proxy_auth_secrets(spec.auth, Names(root_name(proxy)).service_account_key)
    return Mounted(serving, client, requestheader, shards, kubeconfig, tuple(auth))


def proxy_flags(proxy: FrontProxy, deprecating_release: Version) -> Pod:
    """The ``kcp-front-proxy`` arguments, with the volumes and mounts they read."""
    refs = mounted(proxy)
    pod = Pod()
    serving = pod.secret_dir("serving", refs.serving, f"{CONFIG_DIR}/serving")
    client_ca = pod.ca_file("client-ca", refs.client_ca, f"{CONFIG_DIR}/client-ca")
    pod.secret_dir("requestheader", refs.requestheader, f"{CONFIG_DIR}/requestheader")
    pod.ca_file("shards-ca", refs.shards_ca, f"{CONFIG_DIR}/shards-ca")
    kubeconfig = pod.kubeconfig("kubeconfig", refs.kubeconfig, f"{CONFIG_DIR}/kubeconfig")
    pod.volumes.append({"name": "mapping", "configMap": {"name": mapping_name(proxy)}})
    pod.mounts.append({"name": "mapping", "mountPath": f"{CONFIG_DIR}/mapping", "readOnly": True})
    pod.volumes.append({"name": "tmp", "emptyDir": {}})
    pod.mounts.append({"name": "tmp", "mountPath": "/tmp"})
    pod.args += [
        f"--secure-port={PORT}",
        "--root-directory=/tmp/kcp-front-proxy",
        f"--mapping-file={CONFIG_DIR}/mapping/{MAPPING_FILE}",
        f"--tls-cert-file={serving}/tls.crt",
        f"--tls-private-key-file={serving}/tls.key",
        f"--client-ca-file={client_ca}",
        f"{ROOT_KUBECONFIG_FLAG}={kubeconfig}",
        f"--shards-kubeconfig={kubeconfig}",
    ]
    spec = proxy.spec
    if flag_applies(
        SHARD_PEER_KUBECONFIG_FLAG, spec.kcp_version, Role.FRONT_PROXY, deprecating_release
    ):
        pod.args.append(f"{SHARD_PEER_KUBECONFIG_FLAG}={kubeconfig}")
    installation_key = Names(root_name(proxy)).service_account_key
    front_proxy_auth_args(pod, spec.auth, installation_key, f"{CONFIG_DIR}/auth")
    refuse_overrides(pod.args, spec.extra_args, SPEC_FIELDS)
    pod.args += spec.extra_args
    return pod


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def deployment(
    proxy: FrontProxy, pod: Pod, mapping_text: str, revisions: Mapping[str, str] | None
) -> JSON:
    spec = proxy.spec
    pod_spec = kcp_pod_spec("kcp-front-proxy", ["/kcp-front-proxy"], pod, spec)
    annotations = {VERSION_ANNOTATION: spec.version, MAPPING_ANNOTATION: _digest(mapping_text)}
    if revisions is not None:
        annotations[SECRETS_ANNOTATION] = revisions_digest(pod_spec, revisions)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(proxy, versioned=True),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(proxy)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": {
                "metadata": {"labels": labels(proxy, versioned=True), "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }


def pdb(proxy: FrontProxy) -> JSON | None:
    if proxy.spec.replicas <= 1:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(proxy),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(proxy)}},
    }


@dataclass(frozen=True)
class RenderedFrontProxy:
    service: JSON
    config_map: JSON
    deployment: JSON
    pdb: JSON | None

    @property
    def objects(self) -> list[JSON]:
        """In the order they are applied: the mapping before the pods that read it."""
        return [self.service, self.config_map, self.deployment, *([self.pdb] if self.pdb else [])]


def render_front_proxy(
    proxy: FrontProxy,
    root: Shard,
    deprecating_release: Version,
    secret_revisions: Mapping[str, str] | None = None,
    virtual_workspaces: VirtualWorkspaceServer | None = None,
) -> RenderedFrontProxy:
    """The children of ``proxy``, whose ``spec.rootShardRef`` names ``root``;
    ``virtual_workspaces`` is the server running the root's virtual workspaces (None: the
    root runs them).

    With ``secret_revisions`` (Secret name -> resourceVersion) the pod template carries a
    digest of the mounted Secrets' revisions, so pods roll when a certificate rotates.
    """
    if root.name != root_name(proxy) or root.namespace != proxy.namespace:
        raise SpecError("spec.rootShardRef", f"root Shard {root_name(proxy)!r} not found")
    if not root.spec.is_root:
        raise SpecError("spec.rootShardRef", f"Shard {root.name!r} is not a root shard")
    text = mapping(root, virtual_workspaces)
    budget = pdb(proxy)
    return RenderedFrontProxy(
        service=stamped(service(proxy)),
        config_map=stamped(config_map(proxy, text)),
        deployment=stamped(
            deployment(proxy, proxy_flags(proxy, deprecating_release), text, secret_revisions)
        ),
        pdb=stamped(budget) if budget else None,
    )
