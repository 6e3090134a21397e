"""Shard -> Deployment, Service and PodDisruptionBudget (pure).

The operator and ``kcp-shard-operator render`` both call :func:`render_shard`,
so what a user previews is what the operator applies.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from kcp_shard_operator.constants import API_GROUP, FIELD_MANAGER, SHARD_API_VERSION, SHARD_KIND
from kcp_shard_operator.core.flags import flag_name, retire
from kcp_shard_operator.core.model import JSON, SpecError
from kcp_shard_operator.core.spec import (
    CASecretKeyRef,
    LocalObjectRef,
    SecretKeyRef,
    Shard,
    missing_root_kubeconfig,
)
from kcp_shard_operator.core.versions import (
    CACHE_KUBECONFIG_FLAG,
    ROOT_SHARD_KUBECONFIG_FLAG,
    Role,
    Version,
    flag_applies,
    retired_flags,
)

PORT = 6443
ROOT_DIRECTORY = "/var/lib/kcp"
VERSION_ANNOTATION = f"{API_GROUP}/kcp-version"
HASH_ANNOTATION = f"{API_GROUP}/config-hash"
SECRETS_ANNOTATION = f"{API_GROUP}/secret-revisions"
ROOT_SHARD_LABEL = f"{API_GROUP}/root-shard"


@dataclass(frozen=True)
class Rendered:
    """What a Shard renders to, and what was dropped on the way."""

    deployment: JSON
    service: JSON
    pdb: JSON | None
    dropped_args: list[str] = field(default_factory=list)
    unused_refs: list[str] = field(default_factory=list)

    @property
    def objects(self) -> list[JSON]:
        return [self.service, self.deployment] + ([self.pdb] if self.pdb else [])


def child_name(shard: Shard) -> str:
    return f"{shard.name}-kcp"


def selector_labels(shard: Shard) -> dict[str, str]:
    return {"app.kubernetes.io/name": "kcp", "app.kubernetes.io/instance": shard.name}


def labels(shard: Shard, root_name: str | None, *, versioned: bool = False) -> dict[str, str]:
    """Recommended labels; the kcp version only where it changes anyway (the Deployment),
    so that an upgrade does not rewrite the Service and the PodDisruptionBudget."""
    result = {
        **selector_labels(shard),
        "app.kubernetes.io/component": "root-shard" if shard.spec.is_root else "shard",
        "app.kubernetes.io/part-of": "kcp",
        "app.kubernetes.io/managed-by": FIELD_MANAGER,
    }
    if versioned:
        result["app.kubernetes.io/version"] = version_label(shard.spec.kcp_version)
    if root_name:
        result[ROOT_SHARD_LABEL] = root_name
    return result


def version_label(version: Version) -> str:
    """``version`` as a label value: without build metadata (``+`` is not allowed there)
    and without a trailing ``-`` (a pre-release may end in one, a label value may not)."""
    return str(version).rstrip("-")


def service_url(shard: Shard) -> str:
    return f"https://{child_name(shard)}.{shard.namespace}.svc:{PORT}"


def _metadata(shard: Shard, root_name: str | None, *, versioned: bool = False) -> JSON:
    meta: JSON = {
        "name": child_name(shard),
        "namespace": shard.namespace,
        "labels": labels(shard, root_name, versioned=versioned),
    }
    if shard.uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": SHARD_API_VERSION,
                "kind": SHARD_KIND,
                "name": shard.name,
                "uid": shard.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return meta


@dataclass
class _Pod:
    """Accumulates flags, volumes and mounts while rendering one pod."""

    args: list[str] = field(default_factory=list)
    volumes: list[JSON] = field(default_factory=list)
    mounts: list[JSON] = field(default_factory=list)

    def mount_secret(self, volume: str, secret: str, path: str, items: list[JSON] | None) -> None:
        source: JSON = {"secretName": secret, "defaultMode": 0o440}
        if items:
            source["items"] = items
        self.volumes.append({"name": volume, "secret": source})
        self.mounts.append({"name": volume, "mountPath": path, "readOnly": True})

    def kubeconfig(self, volume: str, ref: SecretKeyRef, directory: str) -> str:
        self.mount_secret(volume, ref.name, directory, [{"key": ref.key, "path": "kubeconfig"}])
        return f"{directory}/kubeconfig"

    def secret_dir(self, volume: str, ref: LocalObjectRef, directory: str) -> str:
        self.mount_secret(volume, ref.name, directory, None)
        return directory

    def ca_file(self, volume: str, ref: CASecretKeyRef, directory: str) -> str:
        self.mount_secret(volume, ref.name, directory, [{"key": ref.key, "path": "ca.crt"}])
        return f"{directory}/ca.crt"


REQUEST_HEADER_FLAGS = (
    "--requestheader-username-headers=X-Remote-User",
    "--requestheader-group-headers=X-Remote-Group",
    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
)
"""The headers kcp's front-proxy sets on the requests it forwards."""


def _kcp_flags(
    shard: Shard, root_name: str | None, deprecating_release: Version
) -> tuple[_Pod, list[str], list[str]]:
    spec = shard.spec
    version = spec.kcp_version
    role = Role.ROOT if spec.is_root else Role.NON_ROOT
    pod = _Pod()
    pod.volumes.append({"name": "data", "emptyDir": {}})
    pod.mounts.append({"name": "data", "mountPath": ROOT_DIRECTORY})
    args = pod.args
    args.append(f"--root-directory={ROOT_DIRECTORY}")
    if not spec.is_root:
        args.append(f"--shard-name={shard.name}")
    args.append(f"--shard-base-url={spec.base_url or service_url(shard)}")
    if spec.external_url:
        args.append(f"--shard-external-url={spec.external_url}")
    args.append(f"--secure-port={PORT}")
    if spec.etcd.endpoints:
        args.append(f"--etcd-servers={','.join(spec.etcd.endpoints)}")
        if spec.etcd.prefix:
            args.append(f"--etcd-prefix={spec.etcd.prefix}")
        if spec.etcd.tls_secret_ref:
            etcd_dir = pod.secret_dir("etcd-tls", spec.etcd.tls_secret_ref, "/etc/kcp/etcd")
            args += [
                f"--etcd-cafile={etcd_dir}/ca.crt",
                f"--etcd-certfile={etcd_dir}/tls.crt",
                f"--etcd-keyfile={etcd_dir}/tls.key",
            ]
    tls = spec.tls
    if tls.serving_cert_secret_ref:
        serving = pod.secret_dir(
            "serving-cert", tls.serving_cert_secret_ref, "/etc/kcp/tls/serving"
        )
        args += [f"--tls-cert-file={serving}/tls.crt", f"--tls-private-key-file={serving}/tls.key"]
    if tls.client_ca_secret_ref:
        ca_dir = pod.secret_dir("client-ca", tls.client_ca_secret_ref, "/etc/kcp/tls/client-ca")
        args.append(f"--client-ca-file={ca_dir}/ca.crt")
    if tls.service_account_key_secret_ref:
        sa_dir = pod.secret_dir(
            "service-account-key", tls.service_account_key_secret_ref, "/etc/kcp/tls/sa"
        )
        args += [
            f"--service-account-key-file={sa_dir}/tls.key",
            f"--service-account-private-key-file={sa_dir}/tls.key",
        ]
    if tls.request_header_client_ca_secret_ref:
        path = pod.ca_file(
            "requestheader-client-ca",
            tls.request_header_client_ca_secret_ref,
            "/etc/kcp/tls/requestheader-client-ca",
        )
        args += [f"--requestheader-client-ca-file={path}", *REQUEST_HEADER_FLAGS]
    if tls.shard_client_cert_secret_ref:
        client = pod.secret_dir(
            "shard-client-cert", tls.shard_client_cert_secret_ref, "/etc/kcp/tls/shard-client"
        )
        args += [
            f"--shard-client-cert-file={client}/tls.crt",
            f"--shard-client-key-file={client}/tls.key",
        ]
    if tls.root_ca_secret_ref:
        path = pod.ca_file("root-ca", tls.root_ca_secret_ref, "/etc/kcp/tls/root-ca")
        args.append(f"--root-ca-file={path}")
    lca_ref = spec.logical_cluster_admin_kubeconfig_secret_ref
    if lca_ref:
        path = pod.kubeconfig("logical-cluster-admin", lca_ref, "/etc/kcp/logical-cluster-admin")
        args.append(f"--logical-cluster-admin-kubeconfig={path}")
    external_lca_ref = spec.external_logical_cluster_admin_kubeconfig_secret_ref
    if external_lca_ref:
        path = pod.kubeconfig(
            "external-logical-cluster-admin",
            external_lca_ref,
            "/etc/kcp/external-logical-cluster-admin",
        )
        args.append(f"--external-logical-cluster-admin-kubeconfig={path}")
    cache_ref = spec.cache.kubeconfig_secret_ref
    if cache_ref and flag_applies(CACHE_KUBECONFIG_FLAG, version, role, deprecating_release):
        path = pod.kubeconfig("cache-kubeconfig", cache_ref, "/etc/kcp/cache")
        args.append(f"{CACHE_KUBECONFIG_FLAG}={path}")
    unused: list[str] = []
    root_ref = spec.root_shard_kubeconfig_secret_ref
    if flag_applies(ROOT_SHARD_KUBECONFIG_FLAG, version, role, deprecating_release):
        if root_ref is None:
            raise missing_root_kubeconfig(version, deprecating_release)
        path = pod.kubeconfig("root-shard-kubeconfig", root_ref, "/etc/kcp/root-shard")
        args.append(f"{ROOT_SHARD_KUBECONFIG_FLAG}={path}")
    elif root_ref is not None:
        unused.append("spec.rootShardKubeconfigSecretRef")
    extra, dropped = retire(spec.extra_args, retired_flags(version, role, deprecating_release))
    _refuse_overrides(args, extra)
    args += extra
    return pod, dropped, unused


def secret_names(pod_spec: JSON) -> list[str]:
    """Names of the Secrets a pod spec mounts, sorted."""
    return sorted({v["secret"]["secretName"] for v in pod_spec.get("volumes", []) if "secret" in v})


def _revisions_digest(names: list[str], revisions: Mapping[str, str]) -> str:
    text = ";".join(f"{name}={revisions.get(name, '')}" for name in names)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _refuse_overrides(rendered: list[str], extra: list[str]) -> None:
    """kcp would see both values of a flag given twice; say which spec field sets it.

    Names are compared as kcp's parser compares them (``_`` equals ``-``).
    """
    owned = {flag_name(arg) for arg in rendered}
    for index, arg in enumerate(extra):
        name = flag_name(arg)
        if name in owned:
            raise SpecError(
                f"spec.extraArgs[{index}]",
                f"{name} is rendered by the operator from the Shard's spec; set it there instead",
            )


def _deployment(
    shard: Shard, root_name: str | None, pod: _Pod, revisions: Mapping[str, str] | None
) -> JSON:
    spec = shard.spec
    probe_get = {"port": PORT, "scheme": "HTTPS"}
    container: JSON = {
        "name": "kcp",
        "image": spec.image_ref,
        "command": ["/kcp", "start"],
        "args": pod.args,
        "ports": [{"name": "https", "containerPort": PORT, "protocol": "TCP"}],
        "startupProbe": {
            "httpGet": {**probe_get, "path": "/readyz"},
            "periodSeconds": 5,
            "failureThreshold": 60,
        },
        "readinessProbe": {"httpGet": {**probe_get, "path": "/readyz"}, "periodSeconds": 5},
        "livenessProbe": {
            "httpGet": {**probe_get, "path": "/livez"},
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": pod.mounts,
    }
    if spec.image.pull_policy:
        container["imagePullPolicy"] = spec.image.pull_policy
    if spec.resources:
        container["resources"] = spec.resources
    pod_spec: JSON = {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "fsGroup": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": pod.volumes,
    }
    if spec.node_selector:
        pod_spec["nodeSelector"] = spec.node_selector
    if spec.tolerations:
        pod_spec["tolerations"] = spec.tolerations
    if spec.affinity:
        pod_spec["affinity"] = spec.affinity
    annotations = {VERSION_ANNOTATION: spec.version}
    if revisions is not None:
        annotations[SECRETS_ANNOTATION] = _revisions_digest(secret_names(pod_spec), revisions)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(shard, root_name, versioned=True),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(shard)},
            "strategy": strategy(shard),
            "template": {
                "metadata": {
                    "labels": labels(shard, root_name, versioned=True),
                    "annotations": annotations,
                },
                "spec": pod_spec,
            },
        },
    }


def changes_minor_release(shard: Shard) -> bool:
    """Whether ``shard`` moves from the kcp minor release rolled out on every replica
    (``status.version``) to another one."""
    running = shard.status_version
    return running is not None and running.minor_release != shard.spec.kcp_version.minor_release


def strategy(shard: Shard) -> JSON:
    """One surge pod at a time; ``Recreate`` while the shard moves to another kcp minor.

    Two kcp minor releases on one etcd fight over their bootstrap objects: kcp 0.27.1
    replicas keep patching the APIExports a 0.28.0 pod bootstraps as apis.kcp.io/v1alpha2,
    and the 0.28.0 pod stays unready for minutes (restarted by its startup probe). Recreate
    stops the old replicas first: the shard is down for one pod's restart instead.
    """
    if changes_minor_release(shard):
        return {"type": "Recreate"}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}


def _service(shard: Shard, root_name: str | None) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(shard, root_name),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(shard),
            "ports": [{"name": "https", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def _pdb(shard: Shard, root_name: str | None) -> JSON:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(shard, root_name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(shard)}},
    }


def stamped(obj: JSON) -> JSON:
    """``obj`` annotated with a hash of itself.

    A field dropped from the rendering changes the hash, so the operator re-applies
    (and server-side apply removes the field) even though what is left still matches.
    """
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]
    obj["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = digest
    return obj


def render_shard(
    shard: Shard,
    root: Shard | None,
    deprecating_release: Version,
    secret_revisions: Mapping[str, str] | None = None,
) -> Rendered:
    """The children of ``shard``; ``root`` is required exactly for non-root shards.

    With ``secret_revisions`` (Secret name -> resourceVersion), the pod template carries a
    digest of the mounted Secrets' revisions, so pods restart when a certificate rotates.
    """
    root_name = None
    if not shard.spec.is_root:
        assert shard.spec.root_shard_ref is not None
        root_name = shard.spec.root_shard_ref.name
        if root is None or root.name != root_name or root.namespace != shard.namespace:
            raise SpecError("spec.rootShardRef", f"root Shard {root_name!r} not found")
        if not root.spec.is_root:
            raise SpecError("spec.rootShardRef", f"Shard {root_name!r} is not a root shard")
    pod, dropped, unused = _kcp_flags(shard, root_name, deprecating_release)
    pdb = _pdb(shard, root_name) if shard.spec.replicas > 1 else None
    return Rendered(
        deployment=stamped(_deployment(shard, root_name, pod, secret_revisions)),
        service=stamped(_service(shard, root_name)),
        pdb=stamped(pdb) if pdb else None,
        dropped_args=dropped,
        unused_refs=unused,
    )
