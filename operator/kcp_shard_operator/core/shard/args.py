"""Shard -> the ``kcp start`` arguments of its pods, with the Secret volumes they mount (pure).

Every flag a Shard's spec sets is rendered here, gated by kcp version through the flag table
(:mod:`kcp_shard_operator.core.kcp.versions`).
"""

from __future__ import annotations

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.auth.flags import SHARD_SPEC_FIELDS as AUTH_SPEC_FIELDS
from kcp_shard_operator.core.auth.flags import shard_auth_args
from kcp_shard_operator.core.kcp.audit import AUDIT_FLAGS, audit_flags
from kcp_shard_operator.core.kcp.flags import refuse_overrides, retire
from kcp_shard_operator.core.kcp.podtemplate import PORT, Pod
from kcp_shard_operator.core.kcp.versions import (
    CACHE_KUBECONFIG_FLAG,
    ROOT_SHARD_KUBECONFIG_FLAG,
    Role,
    Version,
    flag_applies,
    retired_flags,
)
from kcp_shard_operator.core.pki.spec import url_host
from kcp_shard_operator.core.shard.names import audit_policy_name, base_url
from kcp_shard_operator.core.shard.spec import Shard, missing_root_kubeconfig

ROOT_DIRECTORY = "/var/lib/kcp"
ETCD_TLS_VOLUME = "etcd-tls"
ETCD_TLS_DIRECTORY = "/etc/kcp/etcd"
"""Where the pod mounts the client TLS Secret of an external etcd (spec.etcd.tlsSecretRef)."""
STANDALONE_FLAG = "--run-virtual-workspaces=false"
EXTERNAL_HOSTNAME_FLAG = "--external-hostname"
"""On a shard whose virtual workspaces a standalone server runs."""


REQUEST_HEADER_FLAGS = (
    "--requestheader-username-headers=X-Remote-User",
    "--requestheader-group-headers=X-Remote-Group",
    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
)
"""The headers kcp's front-proxy sets on the requests it forwards."""

LEADER_ELECTION_NAMESPACE = "kube-system"
LEADER_ELECTION_NAME = "kcp-controllers"
LEADER_ELECTION_FLAGS = (
    "--enable-leader-election=true",
    f"--leader-election-namespace={LEADER_ELECTION_NAMESPACE}",
    f"--leader-election-name={LEADER_ELECTION_NAME}",
)
"""A shard of several replicas elects one to run kcp's controllers: the lease
``kube-system/kcp-controllers`` in each shard's own ``system:admin`` logical cluster. kcp's
defaults (the same from 0.27 to 0.31), rendered so that a later kcp changing them cannot move
the lease between the old and new pods of a rolling upgrade. The API is served by every
replica all the same."""

SPEC_FIELDS = {
    "--shard-base-url": "spec.baseURL",
    "--shard-external-url": "spec.externalURL",
    "--etcd-servers": "spec.etcd.endpoints",
    "--etcd-prefix": "spec.etcd.prefix",
    **dict.fromkeys(
        ("--etcd-cafile", "--etcd-certfile", "--etcd-keyfile"), "spec.etcd.tlsSecretRef"
    ),
    **dict.fromkeys(("--tls-cert-file", "--tls-private-key-file"), "spec.tls.servingCertSecretRef"),
    "--client-ca-file": "spec.tls.clientCASecretRef",
    **dict.fromkeys(
        ("--service-account-key-file", "--service-account-private-key-file"),
        "spec.tls.serviceAccountKeySecretRef",
    ),
    **dict.fromkeys(
        ("--requestheader-client-ca-file", *(flag.split("=")[0] for flag in REQUEST_HEADER_FLAGS)),
        "spec.tls.requestHeaderClientCASecretRef",
    ),
    **dict.fromkeys(
        ("--shard-client-cert-file", "--shard-client-key-file"), "spec.tls.shardClientCertSecretRef"
    ),
    "--root-ca-file": "spec.tls.rootCASecretRef",
    **dict.fromkeys(
        ("--shard-virtual-workspace-url", "--run-virtual-workspaces"), "spec.virtualWorkspaceURL"
    ),
    "--shard-virtual-workspace-ca-file": "spec.tls.virtualWorkspaceCASecretRef",
    EXTERNAL_HOSTNAME_FLAG: "spec.baseURL (with spec.virtualWorkspaceURL)",
    "--enable-leader-election": "spec.replicas",
    "--logical-cluster-admin-kubeconfig": "spec.logicalClusterAdminKubeconfigSecretRef",
    "--external-logical-cluster-admin-kubeconfig": (
        "spec.externalLogicalClusterAdminKubeconfigSecretRef"
    ),
    CACHE_KUBECONFIG_FLAG: "spec.cache.kubeconfigSecretRef",
    ROOT_SHARD_KUBECONFIG_FLAG: "spec.rootShardKubeconfigSecretRef",
    **AUTH_SPEC_FIELDS,
    **dict.fromkeys(AUDIT_FLAGS, "spec.audit"),
}
"""The spec field each rendered flag comes from. The others (``--root-directory``,
``--secure-port``, ``--shard-name``) are the operator's own: no field sets them."""


def kcp_flags(
    shard: Shard, root_name: str | None, deprecating_release: Version, data: JSON
) -> tuple[Pod, list[str], list[str]]:
    """The pod's ``kcp start`` arguments, volumes and mounts; ``data`` is the volume of the
    root directory. Also returns the extra arguments dropped and the refs left unused."""
    spec = shard.spec
    version = spec.kcp_version
    role = Role.ROOT if spec.is_root else Role.NON_ROOT
    pod = Pod()
    pod.volumes.append(data)
    pod.mounts.append({"name": data["name"], "mountPath": ROOT_DIRECTORY})
    args = pod.args
    args.append(f"--root-directory={ROOT_DIRECTORY}")
    if not spec.is_root:
        args.append(f"--shard-name={shard.name}")
    args.append(f"--shard-base-url={base_url(shard)}")
    if spec.external_url:
        args.append(f"--shard-external-url={spec.external_url}")
    args.append(f"--secure-port={PORT}")
    if spec.replicas > 1:
        args += LEADER_ELECTION_FLAGS
    if spec.etcd.endpoints:
        args.append(f"--etcd-servers={','.join(spec.etcd.endpoints)}")
        if spec.etcd.prefix:
            args.append(f"--etcd-prefix={spec.etcd.prefix}")
        if spec.etcd.tls_secret_ref:
            etcd_dir = pod.secret_dir(ETCD_TLS_VOLUME, spec.etcd.tls_secret_ref, ETCD_TLS_DIRECTORY)
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
    if spec.virtual_workspace_url:
        args += [
            STANDALONE_FLAG,
            f"--shard-virtual-workspace-url={spec.virtual_workspace_url}",
        ]
        if flag_applies(EXTERNAL_HOSTNAME_FLAG, version, role, deprecating_release):
            # Up to kcp 0.30 the shard's APIBinding initializer reaches its own /services/
            # at https://<external host>:<port> (pkg/server/controllers.go), verified with
            # --shard-virtual-workspace-ca-file: the default external host, the pod IP, is
            # in no serving certificate; the host of its base URL is.
            args.append(f"{EXTERNAL_HOSTNAME_FLAG}={url_host(base_url(shard))}")
    if tls.virtual_workspace_ca_secret_ref:
        path = pod.ca_file(
            "virtual-workspace-ca",
            tls.virtual_workspace_ca_secret_ref,
            "/etc/kcp/tls/virtual-workspace-ca",
        )
        args.append(f"--shard-virtual-workspace-ca-file={path}")
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
    cache_ref = spec.cache.kubeconfig_ref
    if cache_ref and flag_applies(CACHE_KUBECONFIG_FLAG, version, role, deprecating_release):
        path = pod.kubeconfig("cache-kubeconfig", cache_ref, "/etc/kcp/cache")
        args.append(f"{CACHE_KUBECONFIG_FLAG}={path}")
    if spec.audit is not None:
        audit_flags(pod, spec.audit, audit_policy_name(shard))
    unused: list[str] = []
    root_ref = spec.root_shard_kubeconfig_secret_ref
    if flag_applies(ROOT_SHARD_KUBECONFIG_FLAG, version, role, deprecating_release):
        if root_ref is None:
            raise missing_root_kubeconfig(version, deprecating_release)
        path = pod.kubeconfig("root-shard-kubeconfig", root_ref, "/etc/kcp/root-shard")
        args.append(f"{ROOT_SHARD_KUBECONFIG_FLAG}={path}")
    elif root_ref is not None:
        unused.append("spec.rootShardKubeconfigSecretRef")
    shard_auth_args(pod, spec.auth, "/etc/kcp/auth")
    extra, dropped = retire(spec.extra_args, retired_flags(version, role, deprecating_release))
    refuse_overrides(args, extra, SPEC_FIELDS)
    args += extra
    return pod, dropped, unused
