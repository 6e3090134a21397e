"""The user's path on kind, for real: the chart installed with helm, the operator running
in-cluster from its image, a root and a non-root Shard applied with kubectl, and both shards'
kcp pods (started from the operator's own Deployments) Running and Ready on a real kubelet,
``/readyz`` answered by kcp through each Service, the non-root shard registered with the root;
then a workspace on each shard with objects inside (:mod:`testkit.kcpdata`), both Deployments
restarted with ``kubectl rollout restart``, and every object read again, UID and content kept.

kcp is v0.27.1, built from its Go module (the newest release the module proxy serves in a
buildable form), still on ``--root-shard-kubeconfig-file``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testkit.kcpdata import KcpData
from testkit.kube import Cluster
from testkit.tools import log
from testkit.wait import wait_for
from tests.e2e.pki import Pki, shard_secrets

from .durability import pki_kubeconfig, replace_all_pods, rollout_restart, shard_apis
from .kind import (
    describe_failure,
    image_names,
    kcp_get,
    kcp_image,
    kcp_namespace,
    pod_ready,
    pods,
    port_forward,
    readyz_via_service,
    shard_spec,
)

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

VERSION = "0.27.1"
START_TIMEOUT = 420


@pytest.fixture
def shard_namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    with kcp_namespace(kind_cluster, "kcp-real") as name:
        yield name


def test_root_and_non_root_shard_run_from_the_operators_deployments(
    kind_cluster: Cluster, shard_namespace: str, tmp_path: Path
) -> None:
    ns = shard_namespace
    kubectl = kind_cluster.kubectl
    operator_pod = yaml.safe_load(kubectl("get", "pods", "-n", "kcp-shard-operator", "-o", "yaml"))[
        "items"
    ][0]
    assert operator_pod["spec"]["containers"][0]["image"] == image_names()[0]
    assert pod_ready(operator_pod), "the operator runs in-cluster from its image"

    pki = Pki.create(tmp_path / "pki")
    kubectl(
        "apply",
        "-n",
        ns,
        "-f",
        "-",
        stdin=yaml.safe_dump_all(shard_secrets(pki, ns, "root", ["shard-1"])),
    )
    _, tag = kcp_image()
    started = time.monotonic()
    objs = [shard_spec("root", ns, VERSION, tag), shard_spec("shard-1", ns, VERSION, tag, "root")]
    kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(objs))
    try:
        for shard in ("root", "shard-1"):
            wait_for(
                lambda shard=shard: (
                    kubectl(  # type: ignore[misc]
                        "get", "shard", shard, "-n", ns, "-o", "jsonpath={.status.phase}"
                    )
                    == "Ready"
                ),
                START_TIMEOUT,
                f"Shard {shard} Ready",
                interval=3,
            )
            log(f"Shard {shard} Ready after {time.monotonic() - started:.0f}s")
        for shard in ("root", "shard-1"):
            running = pods(kind_cluster, ns, shard)
            assert len(running) == 1
            pod = running[0]
            assert pod["status"]["phase"] == "Running"
            assert pod_ready(pod)
            assert pod["spec"]["containers"][0]["image"] == f"{kcp_image()[0]}:{tag}"
            assert pod["status"]["containerStatuses"][0]["restartCount"] == 0 or shard != "root"
            assert readyz_via_service(kind_cluster, ns, shard) == "ok"
        with port_forward(kind_cluster, ns, "root-kcp") as port:
            status, body = kcp_get(pki, port, "/clusters/root/apis/core.kcp.io/v1alpha1/shards")
        assert status == 200, body
        registered = {item["metadata"]["name"]: item["spec"] for item in body["items"]}
        assert set(registered) == {"root", "shard-1"}
        assert registered["shard-1"]["baseURL"] == f"https://shard-1-kcp.{ns}.svc:6443"

        # The data survives the pods: both shards keep embedded etcd on their claims.
        shards = ("root", "shard-1")
        with shard_apis(kind_cluster, ns, pki_kubeconfig(pki, tmp_path), shards) as apis:
            data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="real")
            took = replace_all_pods(
                kind_cluster, ns, shards, 1, START_TIMEOUT,
                lambda: rollout_restart(kind_cluster, ns, shards),
            )  # fmt: skip
            log(f"both shards restarted in {took:.0f}s")
            data.assert_intact(apis, "after kubectl rollout restart")
    except BaseException:
        print(describe_failure(kind_cluster, ns))
        raise
