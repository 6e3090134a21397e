"""Fixtures for the end-to-end tests on kind: real kubelets, images built without a registry.

The session starts its own kind cluster (``hack/cluster.sh`` with ``CLUSTER=kind``, name
``kcp-shard-operator-kind-<pid>`` or ``E2E_CLUSTER_NAME``) and deletes it at the end unless
``E2E_KEEP_CLUSTER=1``; ``E2E_USE_EXISTING_CLUSTER=1`` uses the kind cluster in ``KUBECONFIG``
(named ``E2E_CLUSTER_NAME``). Images come from ``hack/image.sh`` and are loaded into the node.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kcp_shard_operator.constants import DEFAULT_IMAGE_REPOSITORY
from testkit.cluster import cluster_down, cluster_script_env, cluster_up
from testkit.kube import Cluster
from testkit.tools import HACK, REPO, build_tools, helm, log, run_visible
from tests.chart import CHART
from tests.e2e.capture import uncaptured

from .kind import OPERATOR_NAMESPACE, RELEASE, image_names, kcp_image


@pytest.fixture(scope="session")
def kind_cluster(pytestconfig: pytest.Config) -> Iterator[Cluster]:
    """A kind cluster with the operator and kcp images loaded into its node."""
    name = os.environ.get("E2E_CLUSTER_NAME") or f"kcp-shard-operator-kind-{os.getpid()}"
    script_env = {**cluster_script_env(os.environ, name), "CLUSTER": "kind"}
    existing = os.environ.get("E2E_USE_EXISTING_CLUSTER") == "1"
    if existing:
        script_env["CLUSTER_KUBECONFIG"] = os.environ["KUBECONFIG"]
    started = time.monotonic()
    try:
        with uncaptured(pytestconfig):
            build_tools("kubernetes", "helm")
            if existing:
                cluster = Cluster.at(Path(script_env["CLUSTER_KUBECONFIG"]))
            else:
                cluster = cluster_up(script_env)
            run_visible([str(HACK / "image.sh"), "operator"])
            run_visible([str(HACK / "image.sh"), "kcp"])
            # The operator's image, the kcp image, and the same kcp under the name the kcp
            # objects default to (the samples and docs/examples name no image).
            default = f"{DEFAULT_IMAGE_REPOSITORY}:{kcp_image()[1]}"
            run_visible([str(HACK / "kind.sh"), "load", name, *image_names()[:2], default])
            log(f"kind cluster {name} with images ready in {time.monotonic() - started:.0f}s")
        yield cluster
    finally:
        if not existing and os.environ.get("E2E_KEEP_CLUSTER") != "1":
            with uncaptured(pytestconfig):
                cluster_down(script_env)


@pytest.fixture(scope="session")
def operator_release(kind_cluster: Cluster, pytestconfig: pytest.Config) -> Iterator[str]:
    """The chart installed with ``helm install --wait``: the operator runs in-cluster from its
    image (``pullPolicy: Never``, so only the image loaded into the node can run)."""
    args = ["--namespace", OPERATOR_NAMESPACE, "--create-namespace", "--wait", "--timeout", "300s"]
    # The image hack/image.sh built and loaded: OPERATOR_IMAGE gives a worktree an image of its
    # own, where several share one docker engine (each would load the others' default tag).
    repository, _, tag = image_names()[0].rpartition(":")
    with uncaptured(pytestconfig):
        log(f"helm install {RELEASE} (operator image {image_names()[0]})")
        kind_cluster.helm(
            "upgrade", "--install", RELEASE, str(CHART), *args,
            # Each test makes its own namespace: watch them all (the chart's opt-in mode).
            "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
            "--set", "image.pullPolicy=Never", "--set", "operator.logFormat=full",
            "--set", "clusterWide=true", timeout=400,
        )  # fmt: skip
        if os.environ.get("E2E_USE_EXISTING_CLUSTER") == "1":
            # The same tag may hold a newly built image: restart onto it.
            deployment = f"deployment/{RELEASE}"
            kind_cluster.kubectl("rollout", "restart", "-n", OPERATOR_NAMESPACE, deployment)
            kind_cluster.kubectl(
                "rollout", "status", "-n", OPERATOR_NAMESPACE, deployment, "--timeout=180s",
                timeout=200,
            )  # fmt: skip
    yield RELEASE
    if os.environ.get("E2E_KEEP_CLUSTER") != "1":
        uninstall = ("uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait")
        helm(kind_cluster.env, *uninstall, check=False)


@pytest.fixture(scope="session")
def demo(pytestconfig: pytest.Config) -> Iterator[Cluster]:
    """``make demo`` with CLUSTER=kind on its own cluster, shared by the demo's test modules;
    ``make demo-down`` afterwards (unless ``E2E_KEEP_CLUSTER=1``)."""
    name = f"kcp-shard-operator-demo-{os.getpid()}"
    kubeconfig = REPO / ".cluster" / f"{name}.kubeconfig"
    env = {
        **os.environ,
        "CLUSTER": "kind",
        "CLUSTER_NAME": name,
        "CLUSTER_KUBECONFIG": str(kubeconfig),
    }
    make = ["make", "-C", str(REPO), "--no-print-directory"]
    started = time.monotonic()
    try:
        with uncaptured(pytestconfig):
            subprocess.run([*make, "demo"], env=env, check=True, stdout=sys.stderr)
            log(f"CLUSTER=kind make demo finished in {time.monotonic() - started:.0f}s")
        yield Cluster.at(Path(kubeconfig))
    finally:
        if os.environ.get("E2E_KEEP_CLUSTER") != "1":
            with uncaptured(pytestconfig):
                subprocess.run([*make, "demo-down"], env=env, check=False, stdout=sys.stderr)
