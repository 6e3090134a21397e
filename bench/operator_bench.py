"""Operator benchmark on the local cluster: time to Ready and memory for many Shards.

Starts its own kwok cluster, runs the operator as a local process, applies one root
shard and N-1 non-root shards, and measures how long until every Shard is Ready, how
many API writes a quiet resync makes, and the operator's peak RSS. Prints the figures
and writes them to bench/results/operator.json.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from report import report
from tests.e2e.kube import (
    CLUSTER_TOOLS,
    CRD_FILE,
    HACK,
    Cluster,
    OperatorProcess,
    apply_crds,
    build_tools,
    cluster_script_env,
    create_namespace,
    run_visible,
    tools_env,
    wait_for,
)

RESULTS = Path(__file__).parent / "results" / "operator.json"
SHARDS = int(os.environ.get("BENCH_SHARDS", "50"))


def shard(name: str, root: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"version": "0.34.0", "replicas": 1}
    if not root:
        spec["rootShardRef"] = {"name": "root"}
        spec["cache"] = {"kubeconfigSecretRef": {"name": "cache"}}
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "Shard",
        "metadata": {"name": name},
        "spec": spec,
    }


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def ready_count(cluster: Cluster, namespace: str) -> int:
    out = cluster.kubectl("get", "shards", "-n", namespace, "-o", "json")
    items = json.loads(out)["items"]
    return sum(1 for item in items if item.get("status", {}).get("phase") == "Ready")


def deployment_versions(cluster: Cluster, namespace: str) -> dict[str, str]:
    out = cluster.kubectl("get", "deployments", "-n", namespace, "-o", "json")
    items = json.loads(out)["items"]
    return {item["metadata"]["name"]: item["metadata"]["resourceVersion"] for item in items}


def measure(cluster: Cluster, log_dir: Path) -> dict[str, Any]:
    apply_crds(cluster, CRD_FILE)
    namespace = create_namespace(cluster, "bench")
    operator = OperatorProcess(
        cluster=cluster,
        args=["--namespace", namespace, "--standalone"],
        log_path=log_dir / "op.log",
    )
    operator.start()
    try:
        docs = [shard("root", True)] + [shard(f"shard-{i}", False) for i in range(1, SHARDS)]
        start = time.monotonic()
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all(docs))
        wait_for(lambda: ready_count(cluster, namespace) == SHARDS, 600, f"{SHARDS} Ready Shards")
        to_ready = time.monotonic() - start
        before = deployment_versions(cluster, namespace)
        time.sleep(65)  # two resync periods with nothing to do
        after = deployment_versions(cluster, namespace)
        rewritten = sum(1 for name, version in before.items() if after.get(name) != version)
        assert operator.process is not None
        rss = peak_rss_mib(operator.process.pid)
    finally:
        operator.stop()
    return {
        "shards": SHARDS,
        "seconds_to_all_ready": round(to_ready, 1),
        "deployments_rewritten_by_quiet_resync": rewritten,
        "operator_peak_rss_mib": round(rss, 1),
    }


def main() -> int:
    build_tools(*CLUSTER_TOOLS)
    script_env = cluster_script_env(os.environ, f"kcp-shard-operator-bench-{os.getpid()}")
    run_visible([str(HACK / "cluster.sh"), "up"], env=script_env)
    env = tools_env(os.environ)
    env["KUBECONFIG"] = script_env["CLUSTER_KUBECONFIG"]
    cluster = Cluster(kubeconfig=Path(env["KUBECONFIG"]), env=env)
    try:
        figures = measure(cluster, RESULTS.parent)
    finally:
        run_visible([str(HACK / "cluster.sh"), "down"], env=script_env)
    report(figures, RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
