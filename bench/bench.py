"""Benchmarks: render throughput, values migration speed, and memory.

Prints each figure and writes them all to bench/results/latest.json.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from report import report

from kcp_shard_operator.core.kcp.versions import DEFAULT_DEPRECATING_RELEASE
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.spec import parse_shard
from kcp_shard_operator.migrate.values import migrate_text

RESULTS = Path(__file__).parent / "results" / "latest.json"
RELEASE = DEFAULT_DEPRECATING_RELEASE


def timed(fn: Callable[[], object], repeat: int = 5) -> float:
    """Median wall time of ``fn`` in seconds over ``repeat`` runs."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def shard_objects(count: int) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [
        {
            "metadata": {"name": "root", "namespace": "bench", "uid": "u-root"},
            "spec": {"version": "0.34.0", "replicas": 1},
        }
    ]
    for i in range(count - 1):
        objs.append(
            {
                "metadata": {"name": f"shard-{i}", "namespace": "bench", "uid": f"u-{i}"},
                "spec": {
                    "version": "0.32.3" if i % 2 else "0.34.0",
                    "rootShardRef": {"name": "root"},
                    "replicas": 3,
                    "etcd": {"endpoints": ["https://etcd:2379"], "prefix": f"/s{i}"},
                    "cache": {"kubeconfigSecretRef": {"name": "cache"}},
                    "rootShardKubeconfigSecretRef": {"name": "root-admin"},
                    # kcp 0.32.3 gets the flag from rootShardKubeconfigSecretRef;
                    # on 0.34.0 the hand-written one is dropped
                    "extraArgs": ["--v=2"]
                    if i % 2
                    else ["--root-shard-kubeconfig-file", "/x", "--v=2"],
                },
            }
        )
    return objs


def bench_render(count: int) -> float:
    objs = shard_objects(count)

    def run() -> None:
        shards = [parse_shard(obj, RELEASE) for obj in objs]
        root = shards[0]
        for shard in shards:
            render_shard(shard, None if shard.spec.is_root else root, RELEASE)

    return count / timed(run)


def values_file(shards: int) -> str:
    lines = ["# project chart values", "shards:"]
    for i in range(shards):
        lines += [
            f"  # shard {i}",
            f"  - name: shard-{i}",
            '    version: "0.34.0"',
            "    rootShardRef: {name: root}",
            "    cache:",
            "      kubeconfigSecretRef: {name: cache}  # cache server",
            "    rootShardKubeconfigSecretRef: {name: root-admin}",
            "    extraArgs:",
            "      - --v=2",
            "      # old flag, ignored from 0.34",
            "      - --root-shard-kubeconfig-file=/etc/kcp/root/kubeconfig",
        ]
    return "\n".join(lines) + "\n"


def bench_migrate(shards: int) -> tuple[int, float]:
    text = values_file(shards)
    result = migrate_text(text, deprecating_release=RELEASE)
    if not result.changed or result.errors:
        raise SystemExit(f"benchmark input did not migrate cleanly: {result.errors}")
    return len(text.splitlines()), timed(lambda: migrate_text(text, deprecating_release=RELEASE), 3)


def main() -> int:
    figures: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": len(os.sched_getaffinity(0)),
    }
    figures["render_shards_per_second_1000"] = round(bench_render(1000), 1)
    lines, seconds = bench_migrate(500)
    figures["migrate_values_lines"] = lines
    figures["migrate_values_seconds"] = round(seconds, 4)
    figures["migrate_values_lines_per_second"] = round(lines / seconds, 1)
    figures["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    report(figures, RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
