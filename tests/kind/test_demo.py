"""The README's kind path as written: ``CLUSTER=kind make demo`` on a cluster of its own.

The demo creates the cluster, builds and loads the images, installs the chart watching the
samples' namespace only (``watchNamespaces``), and applies ``manifests/samples/`` (a
CacheServer, a root and a non-root Shard on it and a FrontProxy, no Secret); all must be Ready
and verified from real kcp pods on the kind node with the certificates and kubeconfigs the
operator issued. A workspace on each shard, with objects inside, created with the admin
kubeconfig ``kcp-shard-operator kubeconfig`` prints, and one on each shard created through the
front-proxy with a ConfigMap written and read back through it (with the users' admin
kubeconfig ``kcp-shard-operator kubeconfig --front-proxy`` prints), are there when read
again. A certificate lifetime shortened in the spec renews the certificates at once: the pods
roll, kcp serves the new certificate, the shards are Ready and keep their data.
A Shard in a namespace the release does not serve has no status at all, unlike the served
ones, and the fix the chart's NOTES give (adding the namespace to ``watchNamespaces``) makes
the operator take it up.
"""

from __future__ import annotations

import datetime
import json
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from kcp_shard_operator.constants import DEFAULT_IMAGE_REPOSITORY
from testkit.kcpdata import FRONT_PROXY, KcpData
from testkit.kube import Cluster, delete_shards
from testkit.operator_process import RESYNC_WINDOW
from testkit.tools import REPO, log
from testkit.wait import wait_for

from .durability import (
    CLI,
    admin_kubeconfig,
    front_proxy_kubeconfig,
    pod_names,
    shard_apis,
    wait_replaced,
)
from .kind import (
    OPERATOR_NAMESPACE,
    RELEASE,
    describe_failure,
    kcp_image,
    pod_ready,
    pods,
    port_forward,
    readyz_via_service,
)

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

DEMO_NAMESPACE = "kcp-samples"
UNSERVED_NAMESPACE = "kcp-samples-unserved"
TRUST = [
    "root-kcp-requestheader-ca",
    "root-kcp-requestheader-client-ca",
]
ISSUED = {
    "root": sorted(
        [
            "root-kcp-admin-kubeconfig",
            "root-kcp-ca",
            "root-kcp-client-ca",
            "root-kcp-external-logical-cluster-admin-kubeconfig",
            "root-kcp-logical-cluster-admin-kubeconfig",
            "root-kcp-serving",
            *TRUST,
        ]
    ),
    "shard-1": sorted(
        [
            "root-kcp-admin-kubeconfig",
            "root-kcp-ca",
            "root-kcp-client-ca",
            "root-kcp-external-logical-cluster-admin-kubeconfig",
            "shard-1-kcp-admin-kubeconfig",
            "shard-1-kcp-logical-cluster-admin-kubeconfig",
            "shard-1-kcp-serving",
            *TRUST,
        ]
    ),
}
"""The Secrets the operator issues for each sample Shard, as its status.certificates lists them."""
FRONT_PROXY_ISSUED = sorted(
    [
        "kcp-front-proxy-admin-kubeconfig",
        "kcp-front-proxy-kubeconfig",
        "kcp-front-proxy-requestheader",
        "kcp-front-proxy-serving",
        *TRUST,
    ]
)
SHORT_LIFETIME = {"certificateLifetime": "15m", "renewBefore": "5m"}
OPERATOR_ACCOUNT = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{RELEASE}"
SERVE_TIMEOUT = 240
RENEWAL_TIMEOUT = 420


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def shard(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        cluster.kubectl("get", "shard", name, "-n", namespace, "-o", "json")
    )
    return loaded


def can_i(cluster: Cluster, verb: str, resource: str, namespace: str) -> bool:
    """``kubectl auth can-i`` as the operator's ServiceAccount (exit 1 means no)."""
    proc = subprocess.run(
        ["kubectl", "auth", "can-i", verb, resource, "-n", namespace, "--as", OPERATOR_ACCOUNT],
        env=dict(cluster.env),
        capture_output=True,
        text=True,
        timeout=30,
    )
    return proc.stdout.strip() == "yes"


def cleaned_with_the_issued_kubeconfig(cluster: Cluster, namespace: str, folder: Path) -> str:
    """``cleanup-identitycache`` on shard-1 with the admin kubeconfig the operator issued
    for it. kcp 0.27.1 still runs the identitycache controller, which writes the ConfigMap
    again: the point is that the issued credentials may read and delete it."""
    with port_forward(cluster, namespace, "shard-1-kcp") as port:
        server = ("--server", f"https://127.0.0.1:{port}")
        kubeconfig = admin_kubeconfig(cluster, namespace, "shard-1", folder, *server)
        proc = subprocess.run(
            [CLI, "cleanup-identitycache", "--kubeconfig", str(kubeconfig)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def status_of(cluster: Cluster, namespace: str, kind: str, name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json")
    )
    return dict(loaded.get("status") or {})


def served_certificate(cluster: Cluster, namespace: str, service: str) -> x509.Certificate:
    """The certificate kcp serves behind ``service`` (read over TLS, not from the Secret)."""
    with port_forward(cluster, namespace, service) as port:
        pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=10)
    return x509.load_pem_x509_certificate(pem.encode())


def test_make_demo_runs_a_whole_installation_from_real_kcp_pods(
    demo: Cluster, tmp_path: Path
) -> None:
    ns = DEMO_NAMESPACE
    _, tag = kcp_image()
    try:
        log(demo.kubectl("get", "shards,cacheservers,frontproxies", "-n", ns))
        cache = status_of(demo, ns, "cacheserver", "cache")
        assert (cache["phase"], cache["version"]) == ("Ready", tag.removeprefix("v")), cache
        proxy = status_of(demo, ns, "frontproxy", "kcp")
        assert (proxy["phase"], proxy["version"]) == ("Ready", tag.removeprefix("v")), proxy
        assert condition(proxy, "Routing")["status"] == "True", proxy
        assert [c["secret"] for c in proxy["certificates"]] == FRONT_PROXY_ISSUED, proxy
        proxies = pods(demo, ns, "kcp", name="kcp-front-proxy")
        assert [pod_ready(p) for p in proxies] == [True, True], proxies
        # DataVerified comes with the operator's next probe of kcp after a rollout (the session's
        # demo cluster has just had every pod restarted by test_no_false_alarm).
        wait_for(
            lambda: all(
                condition(shard(demo, ns, name).get("status") or {}, "DataVerified").get("status")
                == "True"
                for name in ("root", "shard-1")
            ),
            180,
            "DataVerified=True on both shards",
        )
        for name in ("root", "shard-1"):
            status = shard(demo, ns, name)["status"]
            assert status["phase"] == "Ready", status
            assert status["version"] == tag.removeprefix("v"), status
            assert condition(status, "DataVerified")["status"] == "True", status
            assert [c["secret"] for c in status["certificates"]] == ISSUED[name], status
            running = pods(demo, ns, name)
            assert [p["status"]["phase"] for p in running] == ["Running"], running
            assert pod_ready(running[0])
            assert (
                running[0]["spec"]["containers"][0]["image"] == f"{DEFAULT_IMAGE_REPOSITORY}:{tag}"
            )
            assert readyz_via_service(demo, ns, name) == "ok"
        # A user's workspaces land on both shards of the demo and stay, as the admin
        # kubeconfig of the root shard that kcp-shard-operator kubeconfig prints sees them,
        # and as a user sees those made through the front-proxy.
        kubeconfig = admin_kubeconfig(demo, ns, "root", tmp_path)
        shards = ("root", "shard-1")
        front = ("kcp-front-proxy", front_proxy_kubeconfig(demo, ns, tmp_path))
        with shard_apis(demo, ns, kubeconfig, shards, front) as apis:
            data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="demo")
            data.assert_intact(apis, "in the demo")
            cleaned = cleaned_with_the_issued_kubeconfig(demo, ns, tmp_path)
            log(f"cleanup-identitycache with shard-1's issued kubeconfig: {cleaned.strip()}")
            assert "deleted" in cleaned, cleaned
            served = {name: served_certificate(demo, ns, f"{name}-kcp") for name in shards}
            old_pods = {name: pod_names(demo, ns, name) for name in shards}
            started = time.monotonic()
            demo.kubectl(
                "patch", "shard", "root", "-n", ns, "--type=merge",
                "-p", json.dumps({"spec": {"pki": SHORT_LIFETIME}}),
            )  # fmt: skip
            for name in shards:
                wait_replaced(demo, ns, name, old_pods[name], 1, RENEWAL_TIMEOUT)
            log(f"certificates renewed and both shards Ready in {time.monotonic() - started:.0f}s")
            renewed = served_certificate(demo, ns, "root-kcp")
            assert renewed.serial_number != served["root"].serial_number
            lifetime = renewed.not_valid_after_utc - renewed.not_valid_before_utc
            assert lifetime <= datetime.timedelta(minutes=21), lifetime
            data.assert_intact(apis, "after the certificates were renewed")
            workspaces = demo_workspaces(apis)
            assert set(workspaces.values()) == {"Ready"}, workspaces
    except BaseException:
        print(describe_failure(demo, ns))
        raise
    finally:
        # Back to the default lifetime (one more renewal), so that the shards stop rolling.
        demo.kubectl(
            "patch", "shard", "root", "-n", ns, "--type=merge", "-p", '{"spec": {"pki": null}}'
        )
    # The least privilege that serves the demo: a Role in its namespace, nothing cluster-wide.
    assert can_i(demo, "get", "secrets", ns)
    assert can_i(demo, "create", "secrets", ns)
    assert not can_i(demo, "get", "secrets", "default")
    assert not can_i(demo, "create", "secrets", "default")
    assert not can_i(demo, "delete", "secrets", ns)
    assert f"This release serves only {ns}." in demo.helm(
        "get", "notes", RELEASE, "-n", OPERATOR_NAMESPACE
    )


def demo_workspaces(apis: dict[str, Any]) -> dict[str, str]:
    """The phase of each workspace in ``root``, read through the front-proxy: a workspace on
    shard-1 is Ready there too (the root reads its LogicalCluster through the front-proxy)."""
    listed = apis[FRONT_PROXY].get("/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces")
    assert listed is not None
    return {
        item["metadata"]["name"]: (item.get("status") or {}).get("phase", "")
        for item in listed["items"]
    }


def test_a_shard_no_operator_serves_has_no_status_until_its_namespace_is_watched(
    demo: Cluster,
) -> None:
    demo.kubectl("create", "namespace", UNSERVED_NAMESPACE)
    demo.kubectl(
        "apply", "-n", UNSERVED_NAMESPACE, "-f", "-",
        stdin=json.dumps({
            "apiVersion": "kcpshard.dev/v1alpha1", "kind": "Shard",
            "metadata": {"name": "stray"}, "spec": {"version": kcp_image()[1].removeprefix("v")},
        }),
    )  # fmt: skip
    try:
        log(f"watching the unserved Shard for {RESYNC_WINDOW}s (one resync pass)")
        time.sleep(RESYNC_WINDOW)
        stray = shard(demo, UNSERVED_NAMESPACE, "stray")
        assert "status" not in stray, stray
        assert not stray["metadata"].get("finalizers"), stray
        served = shard(demo, DEMO_NAMESPACE, "root")
        assert served["status"]["observedGeneration"] == served["metadata"]["generation"]

        # The chart's NOTES: add the namespace to watchNamespaces.
        started = time.monotonic()
        demo.helm(
            "upgrade", RELEASE, str(REPO / "charts" / "kcp-shard-operator"),
            "-n", OPERATOR_NAMESPACE, "--reuse-values", "--wait", "--timeout", "180s",
            "--set-json", f'watchNamespaces=["{DEMO_NAMESPACE}","{UNSERVED_NAMESPACE}"]',
            timeout=240,
        )  # fmt: skip

        def observed() -> dict[str, Any] | None:
            status = shard(demo, UNSERVED_NAMESPACE, "stray").get("status", {})
            return status if "observedGeneration" in status else None

        status = wait_for(observed, SERVE_TIMEOUT, "the operator to take up the stray Shard", 2)
        log(f"stray Shard has phase {status.get('phase')} {time.monotonic() - started:.0f}s later")
        assert status.get("phase"), status
    finally:
        delete_shards(demo, UNSERVED_NAMESPACE)
        demo.kubectl("delete", "namespace", UNSERVED_NAMESPACE, "--wait=false")
