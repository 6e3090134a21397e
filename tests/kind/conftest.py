"""Fixtures for the end-to-end tests on kind: real kubelets, images built without a registry.

The session starts its own kind cluster (``hack/cluster.sh`` with ``CLUSTER=kind``, name
``kcp-shard-operator-kind-<pid>`` or ``E2E_CLUSTER_NAME``) and deletes it at the end unless
``E2E_KEEP_CLUSTER=1``; ``E2E_USE_EXISTING_CLUSTER=1`` uses the kind cluster in ``KUBECONFIG``
(named ``E2E_CLUSTER_NAME``). Images come from ``hack/image.sh`` and are loaded into the node.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chart import CHART
from tests.e2e.chart_fixtures import helm
from tests.e2e.conftest import _uncaptured
from tests.e2e.kube import (
    HACK,
    Cluster,
    build_tools,
    cluster_script_env,
    log,
    run_visible,
    tools_env,
)

from .kind import OPERATOR_NAMESPACE, RELEASE, image_names


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
        with _uncaptured(pytestconfig):
            build_tools("kubernetes", "helm")
            if not existing:
                run_visible([str(HACK / "cluster.sh"), "up"], env=script_env)
            run_visible([str(HACK / "image.sh"), "operator"])
            run_visible([str(HACK / "image.sh"), "kcp"])
            run_visible([str(HACK / "kind.sh"), "load", name, *image_names()[:2]])
            log(f"kind cluster {name} with images ready in {time.monotonic() - started:.0f}s")
        env = tools_env(os.environ)
        env["KUBECONFIG"] = script_env["CLUSTER_KUBECONFIG"]
        yield Cluster(kubeconfig=Path(env["KUBECONFIG"]), env=env)
    finally:
        if not existing and os.environ.get("E2E_KEEP_CLUSTER") != "1":
            with _uncaptured(pytestconfig):
                run_visible([str(HACK / "cluster.sh"), "down"], env=script_env)


@pytest.fixture(scope="session")
def operator_release(kind_cluster: Cluster, pytestconfig: pytest.Config) -> Iterator[str]:
    """The chart installed with ``helm install --wait``: the operator runs in-cluster from its
    image (``pullPolicy: Never``, so only the image loaded into the node can run)."""
    args = ["--namespace", OPERATOR_NAMESPACE, "--create-namespace", "--wait", "--timeout", "300s"]
    with _uncaptured(pytestconfig):
        log(f"helm install {RELEASE} (operator image {image_names()[0]})")
        helm(
            kind_cluster, "upgrade", "--install", RELEASE, str(CHART), *args,
            # Each test makes its own namespace: watch them all (the chart's opt-in mode).
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
        subprocess.run(
            ["helm", "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait"],
            env=dict(kind_cluster.env),
            check=False,
            capture_output=True,
        )
