"""The Helm chart on a real API server: server-side dry-run of the rendered manifests, install,
the operator running with the chart's ServiceAccount token, namespaced RBAC, upgrade, uninstall.

kwok pods run no containers: the chart's operator pod is scheduled and marked Ready but never
executes, so the operator runs as a local process with a token of the chart's ServiceAccount.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.kube import (
    OPERATED_KINDS,
    Cluster,
    KubectlError,
    apply_crds,
    create_namespace,
    delete_namespace,
    delete_operated,
    shard_ready,
    token_cluster,
)
from testkit.tools import HelmError, log, service_monitor_crd
from testkit.wait import wait_for
from tests.chart import CHART, CI_VALUES, RENDER_INSTALL, SAMPLES, render

from .chart_fixtures import rbac_denials, release, running_operator, samples_in

pytestmark = pytest.mark.e2e

Kubectl = Callable[..., str]
SAMPLE_SHARDS = ("root", "shard-1")
ISSUED_SECRETS = (
    "cache-cache-ca",
    "cache-cache-serving",
    "cache-cache-kubeconfig",
    "root-kcp-ca",
    "root-kcp-client-ca",
    "root-kcp-serving",
    "root-kcp-admin-kubeconfig",
    "root-kcp-logical-cluster-admin-kubeconfig",
    "root-kcp-service-account-key",
    "root-kcp-requestheader-ca",
    "root-kcp-requestheader-client-ca",
    "root-kcp-external-logical-cluster-admin-kubeconfig",
    "shard-1-kcp-serving",
    "shard-1-kcp-admin-kubeconfig",
    "shard-1-kcp-logical-cluster-admin-kubeconfig",
    "kcp-front-proxy-serving",
    "kcp-front-proxy-requestheader",
    "kcp-front-proxy-kubeconfig",
    "kcp-front-proxy-admin-kubeconfig",
)
"""What the operator issues for the samples: the CacheServer's, the installation's (its trust in
the front-proxy among them), each Shard's and the FrontProxy's (kcp 0.27.1: shard-1 also mounts
the root's admin kubeconfig)."""
PEERING_CRDS = CHART / "crds" / "kopf.dev_peerings.yaml"


def root_sample(namespace: str) -> str:
    """The sample root Shard in ``namespace``, on the root's embedded cache (no CacheServer)."""
    obj = yaml.safe_load((SAMPLES / "20-root-shard.yaml").read_text())
    obj["metadata"]["namespace"] = namespace
    del obj["spec"]["cache"]
    return yaml.safe_dump(obj)


def release_name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def fullname(name: str) -> str:
    return f"{name}-kcp-shard-operator"


def get(kubectl: Kubectl, *args: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kubectl("get", *args, "-o", "json"))
    return result


def exists(kubectl: Kubectl, *args: str) -> bool:
    return bool(kubectl("get", *args, "--ignore-not-found", "-o", "name").strip())


def wait_ready(kubectl: Kubectl, namespace: str, name: str, timeout: float = 120) -> None:
    wait_for(
        lambda: shard_ready(get(kubectl, "shard", name, "-n", namespace)),
        timeout,
        f"Shard {namespace}/{name} Ready",
    )


def can_i(as_sa: Cluster, *args: str) -> bool:
    proc = subprocess.run(
        ["kubectl", "auth", "can-i", *args],
        env=dict(as_sa.env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() in ("yes", "no"), proc.stderr
    return proc.stdout.strip() == "yes"


@pytest.fixture
def other_namespace(cluster: Cluster) -> Iterator[str]:
    """A second fresh namespace."""
    name = create_namespace(cluster, "e2e-chart-other")
    yield name
    delete_namespace(cluster, name)


@pytest.fixture
def samples_namespace(cluster: Cluster) -> Iterator[str]:
    """A namespace name for the samples (they create it); Shards deleted before it goes."""
    name = f"e2e-samples-{secrets.token_hex(3)}"
    yield name
    delete_namespace(cluster, name)


def test_rendered_manifests_pass_server_side_dry_run(
    cluster: Cluster, crds: list[str], kubectl: Kubectl, namespace: str, other_namespace: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    apply_crds(cluster, PEERING_CRDS)
    apply_crds(cluster, service_monitor_crd())
    install = subprocess.run(
        [str(RENDER_INSTALL)],
        env={**cluster.env, "INSTALL_NAMESPACE": namespace},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    out = kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", stdin=install)
    assert "deployment.apps/kcp-shard-operator created (server dry run)" in out, out
    assert "clusterrole.rbac.authorization.k8s.io/kcp-shard-operator" in out, out

    ci_values = (
        CI_VALUES[0].read_text().replace("kcp-a", namespace).replace("kcp-b", other_namespace)
    )
    values_file = tmp_path / "values.yaml"
    values_file.write_text(ci_values)
    objects = render("-f", str(values_file), namespace=namespace)
    kinds = sorted({obj["kind"] for obj in objects})
    assert kinds == [
        "ClusterRole", "ClusterRoleBinding", "Deployment", "KopfPeering", "PodDisruptionBudget",
        "Role", "RoleBinding", "Service", "ServiceAccount", "ServiceMonitor", "Shard",
    ]  # fmt: skip
    out = kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-f", "-",
        stdin=yaml.safe_dump_all(objects),
    )  # fmt: skip
    assert out.count("(server dry run)") == len(objects), out

    broken = [obj for obj in objects if obj["kind"] == "Shard"][:1]
    broken[0]["spec"]["replicas"] = 0
    with pytest.raises(KubectlError, match=r"spec.replicas"):
        kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(broken))
    # The ServiceMonitor's schema is prometheus-operator's own: it refuses a bad interval.
    monitor = [obj for obj in objects if obj["kind"] == "ServiceMonitor"]
    monitor[0]["spec"]["endpoints"][0]["interval"] = "often"
    with pytest.raises(KubectlError, match=r"interval"):
        kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(monitor))


def test_install_and_token_operator_reconciles_the_samples(
    cluster: Cluster, crds: list[str], kubectl: Kubectl, namespace: str, samples_namespace: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    name = release_name("kso")
    # The operator pod must pass the "restricted" Pod Security Standard.
    kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    with pytest.raises(KubectlError, match='violates PodSecurity "restricted'):
        kubectl("run", "unrestricted", "-n", namespace, "--image=busybox", "--restart=Never")
    with release(cluster, name, namespace, "--set", "clusterWide=true") as notes:
        assert "kubectl apply -f manifests/samples/" in notes
        deployment = get(kubectl, "deployment", fullname(name), "-n", namespace)
        assert deployment["status"]["readyReplicas"] == 1
        assert exists(kubectl, "crd", "kopfpeerings.kopf.dev")

        as_sa = token_cluster(cluster, namespace, fullname(name), tmp_path / "sa-kubeconfig")
        whoami = as_sa.kubectl("auth", "whoami", "-o", "json")
        sa_user = f"system:serviceaccount:{namespace}:{fullname(name)}"
        assert json.loads(whoami)["status"]["userInfo"]["username"] == sa_user

        kubectl("apply", "-f", "-", stdin=samples_in(samples_namespace))
        log_path = tmp_path / "operator.log"
        args = ["--all-namespaces", "--standalone"]
        with running_operator(cluster, as_sa, args, log_path, [samples_namespace]) as operator:
            for shard in SAMPLE_SHARDS:
                wait_ready(kubectl, samples_namespace, shard)
            for kind, other in (("cacheserver", "cache"), ("frontproxy", "kcp")):

                def ready(kind: str = kind, other: str = other) -> bool:
                    return shard_ready(get(kubectl, kind, other, "-n", samples_namespace))

                wait_for(ready, 120, f"{kind} {other} Ready")
            log(f"samples Ready in {samples_namespace} with the token of {sa_user}")
            # Their whole PKI, issued with the chart's RBAC (create and update on Secrets).
            for secret in ISSUED_SECRETS:
                issued = get(kubectl, "secret", secret, "-n", samples_namespace)
                assert issued["metadata"]["labels"]["app.kubernetes.io/managed-by"] == (
                    "kcp-shard-operator"
                )
            shard_1 = get(kubectl, "shard", "shard-1", "-n", samples_namespace)
            # Every one it uses but the service-account key (which does not expire), CA included.
            assert len(shard_1["status"]["certificates"]) == 9, shard_1["status"]
            assert operator.running(), operator.log_tail()
        assert rbac_denials(log_path.read_text()) == []


def test_namespaced_install_cannot_touch_other_namespaces(
    cluster: Cluster, crds: list[str], kubectl: Kubectl, namespace: str, other_namespace: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    name = release_name("kso-ns")
    watched = namespace
    with release(cluster, name, namespace, "--set-json", f'watchNamespaces=["{watched}"]'):
        as_sa = token_cluster(cluster, namespace, fullname(name), tmp_path / "sa-kubeconfig")
        assert can_i(as_sa, "patch", "shards", "-n", watched)
        assert can_i(as_sa, "get", "secrets", "-n", watched)
        assert not can_i(as_sa, "patch", "shards", "-n", other_namespace)
        assert not can_i(as_sa, "get", "secrets", "-n", other_namespace)
        assert not can_i(as_sa, "list", "shards", "--all-namespaces")
        assert not can_i(as_sa, "get", "secrets", "--all-namespaces")
        with pytest.raises(KubectlError, match=r"(?s)Forbidden|forbidden"):
            as_sa.kubectl("get", "shards", "-n", other_namespace)

        root = root_sample("{ns}")
        for ns in (watched, other_namespace):
            kubectl("apply", "-f", "-", stdin=root.replace("{ns}", ns))
        # Told to watch both, the operator reconciles only where its Role lets it.
        log_path = tmp_path / "operator.log"
        args = ["--namespace", watched, "--namespace", other_namespace, "--standalone"]
        with running_operator(cluster, as_sa, args, log_path, [watched]):
            wait_ready(kubectl, watched, "root")
            denials = wait_for(
                lambda: [d for d in rbac_denials(log_path.read_text()) if "shards" in d],
                60,
                "a 403 on Shards in the other namespace",
            )
            other = get(kubectl, "shard", "root", "-n", other_namespace)
            assert "status" not in other
            assert not exists(kubectl, "deployment", "root-kcp", "-n", other_namespace)
        log(f"denied: {denials}")
        assert f"list shards in {other_namespace}" in denials
        assert all(d.endswith(f" in {other_namespace}") for d in rbac_denials(log_path.read_text()))
        kubectl("delete", "shard", "root", "-n", other_namespace, "--timeout=60s")


def test_upgrade_with_changed_values(
    cluster: Cluster, crds: list[str], kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    name = release_name("kso-up")
    peering = f"peering-{name}"
    deployment = fullname(name)
    chart = str(CHART)
    cluster_wide = ("--set", "clusterWide=true")
    with release(cluster, name, namespace, *cluster_wide, "--set", f"peering.name={peering}"):
        as_sa = token_cluster(cluster, namespace, fullname(name), tmp_path / "sa-kubeconfig")
        assert not can_i(as_sa, "patch", f"clusterkopfpeerings/{peering}")
        cluster.helm(
            "upgrade", name, chart, "--namespace", namespace,
            "--wait", "--timeout", "120s",
            "--reuse-values",
            "--set", "replicaCount=2",
            "--set", "operator.logLevel=debug",
            "--set", "operator.identityCacheCleanup=false",
            "--set", "operator.rootShardFlagRemovedIn=0.34.0",
        )  # fmt: skip
        live = get(kubectl, "deployment", deployment, "-n", namespace)
        assert live["status"]["readyReplicas"] == 2
        assert live["spec"]["strategy"]["type"] == "RollingUpdate"
        ctr = live["spec"]["template"]["spec"]["containers"][0]
        assert f"--peering={peering}" in ctr["args"]
        env = {e["name"]: e.get("value") for e in ctr["env"]}
        assert env["KCP_SHARD_LOG_LEVEL"] == "debug"
        assert env["KCP_SHARD_IDENTITY_CACHE_CLEANUP"] == "false"
        assert env["KCP_SHARD_ROOT_SHARD_FLAG_REMOVED_IN"] == "0.34.0"
        assert get(kubectl, "pdb", deployment, "-n", namespace)["spec"]["minAvailable"] == 1
        assert exists(kubectl, "clusterkopfpeering", peering)
        assert can_i(as_sa, "patch", f"clusterkopfpeerings/{peering}")

        # The peered operator with the upgraded RBAC: reconciles, no 403.
        log_path = tmp_path / "operator.log"
        kubectl("apply", "-f", "-", stdin=samples_in(namespace))
        args = ["--all-namespaces", f"--peering={peering}"]
        with running_operator(cluster, as_sa, args, log_path, [namespace]):
            for shard in SAMPLE_SHARDS:
                wait_ready(kubectl, namespace, shard)
        assert rbac_denials(log_path.read_text()) == []

        cluster.helm(
            "upgrade", name, chart, "--namespace", namespace,
            "--wait", "--timeout", "120s",
            "--reuse-values", "--set", "replicaCount=1",
        )  # fmt: skip
        live = get(kubectl, "deployment", deployment, "-n", namespace)
        assert live["spec"]["strategy"]["type"] == "Recreate"
        assert "--standalone" in live["spec"]["template"]["spec"]["containers"][0]["args"]
        assert not exists(kubectl, "pdb", deployment, "-n", namespace)
        assert not exists(kubectl, "clusterkopfpeering", peering)
        history = json.loads(cluster.helm("history", name, "-n", namespace, "-o", "json"))
        assert [h["revision"] for h in history] == [1, 2, 3]
        assert history[-1]["status"] == "deployed"


def test_uninstall_keeps_the_crd_and_the_shards(
    cluster: Cluster, crds: list[str], kubectl: Kubectl, namespace: str, other_namespace: str
) -> None:
    name = release_name("kso-un")
    values_shard = '[{"name":"from-values","version":"0.34.0","replicas":1}]'
    with release(cluster, name, namespace, "--set-json", f"shards={values_shard}"):
        user_shard = (
            (SAMPLES / "20-root-shard.yaml").read_text().replace("kcp-samples", other_namespace)
        )
        kubectl("apply", "-f", "-", stdin=user_shard)
        assert exists(kubectl, "shard", "from-values", "-n", namespace)
        assert exists(kubectl, "clusterrole", fullname(name))
    with pytest.raises(HelmError, match="not found"):
        cluster.helm("status", name, "-n", namespace)
    assert exists(kubectl, "crd", "shards.kcpshard.dev")
    assert exists(kubectl, "shard", "root", "-n", other_namespace)
    kept = get(kubectl, "shard", "from-values", "-n", namespace)
    assert kept["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    for args in (
        ("deployment", fullname(name), "-n", namespace),
        ("serviceaccount", fullname(name), "-n", namespace),
        ("clusterrole", fullname(name)),
        ("clusterrolebinding", fullname(name)),
    ):
        assert not exists(kubectl, *args), args
    kubectl("delete", "shard", "root", "-n", other_namespace)
    kubectl("delete", "shard", "from-values", "-n", namespace)


def test_two_peered_replicas_reconcile(
    cluster: Cluster, crds: list[str], kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    name = release_name("kso-ha")
    peering = f"peering-{name}"
    values: tuple[str, ...] = ("--set", "replicaCount=2", "--set", f"peering.name={peering}")
    values += ("--set", "clusterWide=true")
    with release(cluster, name, namespace, *values):
        as_sa = token_cluster(cluster, namespace, fullname(name), tmp_path / "sa-kubeconfig")
        args = ["--all-namespaces", f"--peering={peering}"]
        # A LIST that kopf retries after a 429 (a CRD's storage still initializing) delivers its
        # objects even to a replica paused meanwhile: the kinds must be served before it starts.
        wait_for(
            lambda: kubectl("get", OPERATED_KINDS, "-A", "-o", "name") is not None,
            60,
            f"{OPERATED_KINDS} served",
        )
        with (
            running_operator(cluster, as_sa, args, tmp_path / "a.log", [namespace]) as first,
            # Stopped first, so that the remaining replica can clean up after it.
            running_operator(cluster, as_sa, args, tmp_path / "b.log", []) as second,
        ):
            wait_for(
                lambda: len(get(kubectl, "clusterkopfpeering", peering).get("status") or {}) == 2,
                30,
                "both replicas in the peering object",
            )
            kubectl("apply", "-f", "-", stdin=samples_in(namespace))
            for shard in SAMPLE_SHARDS:
                wait_ready(kubectl, namespace, shard, timeout=30)
            handled = [
                (tmp_path / log_name).read_text().count("Handler 'on_shard_event' succeeded")
                for log_name in ("a.log", "b.log")
            ]
            assert sorted(handled)[0] == 0, f"both replicas reconciled: {handled}"
            # The active replica crashes (SIGKILL: no goodbye in the peering object); the
            # other one takes over once the crashed one's record expires (--peering-lifetime).
            active, standby = (first, second) if handled[0] else (second, first)
            crashed = time.monotonic()
            active.process.kill()
            kubectl("patch", "-n", namespace, "shard", "root", "--type=merge", "-p",
                    '{"spec": {"extraArgs": ["--v=3"]}}')  # fmt: skip

            def taken_over() -> bool:
                container = get(kubectl, "deployment", "root-kcp", "-n", namespace)["spec"][
                    "template"
                ]["spec"]["containers"][0]
                return "--v=3" in container["args"]

            wait_for(taken_over, 90, "the standby replica to take over")
            log(f"measured: failover after a crash of the active replica took "
                f"{time.monotonic() - crashed:.1f}s (peering lifetime 15 s)")  # fmt: skip
            # The samples' objects go while an operator still runs to remove the finalizers.
            delete_operated(cluster, namespace)
            assert standby.running()
