"""Operator benchmark on the local cluster, against the floor, for N = 100 and 1000 Shards.

For each N it starts its own kwok cluster whose API server writes an audit log of two
ServiceAccounts: the operator's and the benchmark driver's (every kubectl call here).
It measures, in one run:

- the PKI: the Secrets the operator issues for the N Shards on the way to Ready (spec.pki:
  the installation's CA and client CA bundle, a serving certificate and an admin kubeconfig
  per Shard), their writes and the seconds until the last one;
- the floor: the driver server-side applies the operator's own rendering of the N Shards
  (Deployment and Service each) and waits until every Deployment is available;
- the operator: the driver applies the N Shards and waits until all are Ready; the
  operator's reads, writes, failed writes and Events to get there (from the audit log),
  its CPU time and peak RSS;
- the steady state: the operator's reads and writes over two quiet resync periods;
- a version change of 10% of the Shards: the operator's writes per changed Shard;
- reaction time: from a driver's patch of a Shard's spec to the operator's write of its
  Deployment, for 50 Shards patched one second apart (p50, p99), each change a rollout.

Prints one table and writes bench/results/operator.json. ``BENCH_SHARDS`` sets the sizes
("100 1000" by default).
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit import (
    AUDIT_POLICY,
    Counts,
    Request,
    count,
    parse,
    percentile,
    reaction_latencies,
    status_write_gaps,
)

from kcp_shard_operator.controller.handlers import RESYNC_SECONDS
from kcp_shard_operator.core.kcp.versions import DEFAULT_DEPRECATING_RELEASE
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.spec import parse_shard
from testkit.cluster import cluster_down, cluster_script_env, cluster_up, kwok_workdir
from testkit.kube import Cluster, apply_crds, shard_ready, token_cluster
from testkit.operator_metrics import scrape
from testkit.operator_process import OperatorProcess
from testkit.tools import CLUSTER_TOOLS, CRD_FILE, build_tools, log
from testkit.wait import wait_for

RESULTS = Path(__file__).parent / "results" / "operator.json"
SIZES = [int(n) for n in os.environ.get("BENCH_SHARDS", "100 1000").split()]
BENCH_NS = "bench"
OPERATOR = f"system:serviceaccount:{BENCH_NS}:operator"
DRIVER = f"system:serviceaccount:{BENCH_NS}:driver"
PODS_PER_NODE = 110  # kwok's node template
OLD, NEW = "0.32.3", "0.33.0"
FLOOR_WRITES_PER_SHARD = 3  # Deployment, Service and one status write
REACTIONS = 50
WRITES_METRIC = "kcp_shard_operator_api_writes_total"
SHARDS_METRIC = "kcp_shard_operator_shards"
REACTION_GAP = 1.0
APPLY_SECONDS = 1800
"""How long the driver's apply of N objects may take: 1000 Shards one request after another
took over 600 s on the shared 2-core machine at a load average of 30 to 60."""


def shard(name: str, namespace: str, version: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"version": version, "replicas": 1}
    if name != "root":
        spec["rootShardRef"] = {"name": "root"}
        spec["cache"] = {"kubeconfigSecretRef": {"name": "cache"}}
        spec["rootShardKubeconfigSecretRef"] = {"name": "root-admin"}
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "Shard",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def shards(n: int, namespace: str) -> list[dict[str, Any]]:
    return [shard("root", namespace, NEW)] + [
        shard(f"shard-{i}", namespace, OLD) for i in range(1, n)
    ]


def rendered(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the operator applies for ``docs`` (the floor applies the same objects)."""
    parsed = [parse_shard(doc, DEFAULT_DEPRECATING_RELEASE) for doc in docs]
    root = parsed[0]
    objects: list[dict[str, Any]] = []
    for item in parsed:
        owner = None if item is root else root
        objects.extend(render_shard(item, owner, DEFAULT_DEPRECATING_RELEASE).objects)
    return objects


def account_cluster(admin: Cluster, account: str, directory: Path) -> Cluster:
    """A Cluster that acts as ServiceAccount ``account`` (cluster-admin) of the bench ns."""
    admin.kubectl("create", "serviceaccount", "-n", BENCH_NS, account)
    admin.kubectl(
        "create",
        "clusterrolebinding",
        f"bench-{account}",
        "--clusterrole=cluster-admin",
        f"--serviceaccount={BENCH_NS}:{account}",
    )
    return token_cluster(admin, BENCH_NS, account, directory / f"{account}.kubeconfig", "6h")


def items(cluster: Cluster, kind: str, namespace: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", kind, "-n", namespace, "-o", "json", timeout=300)
    return list(json.loads(out)["items"])


def all_available(cluster: Cluster, namespace: str, n: int) -> bool:
    deps = items(cluster, "deployments", namespace)
    available = [
        d
        for d in deps
        if d.get("status", {}).get("availableReplicas", 0) == d["spec"]["replicas"]
        and d.get("status", {}).get("observedGeneration", 0) >= d["metadata"]["generation"]
    ]
    return len(available) == n


def ready_at(cluster: Cluster, namespace: str, names: set[str], version: str) -> bool:
    found = {
        s["metadata"]["name"]
        for s in items(cluster, "shards", namespace)
        if shard_ready(s, version)
    }
    return names <= found


def event_reasons(cluster: Cluster, namespace: str) -> dict[str, int]:
    """How many Events about Shards the namespace holds, by reason."""
    reasons: dict[str, int] = {}
    for event in items(cluster, "events", namespace):
        if (event.get("involvedObject") or {}).get("kind") == "Shard":
            reason = str(event.get("reason", ""))
            reasons[reason] = reasons.get(reason, 0) + int(event.get("count") or 1)
    return reasons


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def between(self, start: float, end: float) -> list[Request]:
        with self.path.open(encoding="utf-8") as lines:
            return [req for req in parse(lines) if start <= req.completed <= end]


def pki_writes(requests: list[Request]) -> list[Request]:
    """The operator's writes of the Secrets it issues (the PKI of spec.pki)."""
    return [
        r
        for r in requests
        if r.user == OPERATOR and r.resource == "secrets" and r.verb in ("create", "update")
    ]


def issued_kinds(issued: list[Request]) -> dict[str, int]:
    """Issued Secrets by what they are (the name's suffix after ``-kcp-``)."""
    kinds: dict[str, int] = {}
    for request in issued:
        kind = f"{request.verb} {request.name.partition('-kcp-')[2] or request.name}"
        kinds[kind] = kinds.get(kind, 0) + 1
    return dict(sorted(kinds.items()))


def per_shard(counts: Counts, shards_count: int) -> dict[str, float]:
    return {
        "reads": round(counts.reads / shards_count, 2),
        "writes": round(counts.writes / shards_count, 2),
        "failed_writes": round(counts.failed_writes / shards_count, 2),
        "events": round(counts.events / shards_count, 2),
    }


def measure(n: int, admin: Cluster, audit: AuditLog, work: Path) -> dict[str, Any]:
    apply_crds(admin, CRD_FILE)
    admin.kubectl("create", "namespace", BENCH_NS)
    driver = account_cluster(admin, "driver", work)
    operator_kube = account_cluster(admin, "operator", work)
    for namespace in ("floor", "shards"):
        driver.kubectl("create", "namespace", namespace)
        for secret in ("cache", "root-admin"):
            driver.kubectl(
                "create",
                "secret",
                "generic",
                secret,
                "-n",
                namespace,
                "--from-literal=kubeconfig=x",
            )

    log(f"[N={n}] floor: server-side apply of the rendered Deployments and Services")
    floor_start = time.time()
    objects = rendered(shards(n, "floor"))
    driver.kubectl(
        "apply",
        "--server-side",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(objects),
        timeout=APPLY_SECONDS,
    )
    wait_for(lambda: all_available(driver, "floor", n), 1200, f"{n} floor Deployments available")
    floor_seconds = time.time() - floor_start

    log(f"[N={n}] operator: {n} Shards to Ready")
    operator = OperatorProcess(
        cluster=operator_kube,
        args=["--namespace", "shards", "--standalone", "--log-level", "warning", "--no-kcp-checks"],
        log_path=work / "operator.log",
    )
    operator.start()
    assert operator.process.popen is not None
    pid = operator.process.popen.pid
    try:
        cpu_start = cpu_seconds(pid)
        start = time.time()
        driver.kubectl(
            "apply",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(shards(n, "shards")),
            timeout=APPLY_SECONDS,
        )
        names = {f"shard-{i}" for i in range(1, n)}
        wait_for(lambda: ready_at(driver, "shards", names, OLD), 1800, f"{n} Ready Shards")
        ready = time.time()
        cpu_to_ready = cpu_seconds(pid) - cpu_start
        to_ready = count(audit.between(start, ready), OPERATOR)
        issued = pki_writes(audit.between(start, ready))
        gaps = status_write_gaps(audit.between(start, ready), OPERATOR, "shards")
        reasons = event_reasons(driver, "shards")

        at_ready = scrape(operator.metrics)

        log(f"[N={n}] steady state: two quiet resync periods, /metrics scraped every second")
        time.sleep(2)
        quiet_start, quiet_cpu = time.time(), cpu_seconds(pid)
        scrapes = []
        while time.time() - quiet_start < 2 * RESYNC_SECONDS + 5:
            scraped_at = time.monotonic()
            scrapes.append((scrape(operator.metrics), time.monotonic() - scraped_at))
            time.sleep(1)
        quiet_seconds = time.time() - quiet_start
        quiet_cpu = cpu_seconds(pid) - quiet_cpu
        quiet = count(audit.between(quiet_start, time.time()), OPERATOR)

        changed = [f"shard-{i}" for i in range(1, max(2, n // 10 + 1))]
        log(f"[N={n}] version change of {len(changed)} Shards")
        change_start = time.time()
        for name in changed:
            driver.kubectl(
                "patch", "shard", name, "-n", "shards", "--type=merge",
                "-p", json.dumps({"spec": {"version": NEW}}),
            )  # fmt: skip
        wait_for(lambda: ready_at(driver, "shards", set(changed), NEW), 900, "changed Shards")
        time.sleep(2)
        version_change = count(audit.between(change_start, time.time()), OPERATOR)

        patched = [f"shard-{i}" for i in range(1, min(n, REACTIONS + 1))]
        log(f"[N={n}] reaction time: {len(patched)} spec changes, {REACTION_GAP} s apart")
        react_start = time.time()
        for name in patched:
            driver.kubectl(
                "patch", "shard", name, "-n", "shards", "--type=merge",
                "-p", json.dumps({"spec": {"extraArgs": ["--v=3"]}}),
            )  # fmt: skip
            time.sleep(REACTION_GAP)
        time.sleep(5)
        latencies = reaction_latencies(
            audit.between(react_start, time.time()), DRIVER, OPERATOR, "shards", "{}-kcp"
        )
        rss = peak_rss_mib(pid)
    finally:
        operator.stop()
    return {
        "shards": n,
        "floor_seconds_to_all_available": round(floor_seconds, 1),
        "floor_writes_per_shard": FLOOR_WRITES_PER_SHARD,
        "seconds_to_all_ready": round(ready - start, 1),
        "ready_vs_floor": round((ready - start) / floor_seconds, 2),
        "to_ready_per_shard": per_shard(to_ready, n),
        "to_ready_writes_by_target": to_ready.by_target,
        "to_ready_events_by_reason": reasons,
        "to_ready_status_write_gaps": {
            "p50_s": round(percentile(gaps, 50), 2),
            "within_2_s": sum(gap < 2 for gap in gaps),
            "within_5_s": sum(gap < 5 for gap in gaps),
            "all": len(gaps),
        },
        "pki_secrets_written": len(issued),
        "pki_writes_per_shard": round(len(issued) / n, 2),
        "pki_seconds_to_last_secret": round(
            max((r.completed for r in issued), default=start) - start, 1
        ),
        "pki_secrets_by_name_kind": issued_kinds(issued),
        "steady_reads_per_resync": quiet.reads / 2,
        "steady_writes_per_resync": quiet.writes / 2,
        "steady_cpu_percent": round(100 * quiet_cpu / quiet_seconds, 1),
        "steady_metrics_scrapes": len(scrapes),
        "metrics_scrape_p50_ms": round(percentile([t for _, t in scrapes], 50) * 1000, 1),
        "metrics_scrape_max_ms": round(max(t for _, t in scrapes) * 1000, 1),
        "metrics_bytes": scrapes[-1][0].size,
        "metrics_writes_counted_to_ready": at_ready.total(WRITES_METRIC),
        "metrics_events_counted_to_ready": at_ready.total("kcp_shard_operator_events_total"),
        "metrics_writes_counted_in_steady_state": scrapes[-1][0].total(WRITES_METRIC)
        - scrapes[0][0].total(WRITES_METRIC),
        "metrics_shards_ready": at_ready.value(SHARDS_METRIC, phase="Ready"),
        "version_change_writes_per_shard": round(version_change.writes / len(changed), 2),
        "version_change_by_target": version_change.by_target,
        "reactions_measured": len(latencies),
        "reaction_p50_ms": round(percentile(latencies, 50) * 1000),
        "reaction_p99_ms": round(percentile(latencies, 99) * 1000),
        "operator_cpu_seconds_per_shard_to_ready": round(cpu_to_ready / n, 3),
        "operator_peak_rss_mib": round(rss, 1),
    }


def run_size(n: int) -> dict[str, Any]:
    name = f"kcp-shard-operator-bench-{os.getpid()}-{n}"
    with tempfile.TemporaryDirectory(prefix="kcp-bench-") as tmp:
        work = Path(tmp)
        policy = work / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY.format(users=f'"{OPERATOR}", "{DRIVER}"'))
        script_env = cluster_script_env(os.environ, name)
        script_env["CLUSTER_AUDIT_POLICY"] = str(policy)
        script_env["CLUSTER_NODES"] = str(max(3, math.ceil(2 * n / PODS_PER_NODE) + 1))
        admin = cluster_up(script_env)
        audit = AuditLog(kwok_workdir(os.environ) / "clusters" / name / "logs" / "audit.log")
        try:
            return measure(n, admin, audit, work)
        finally:
            cluster_down(script_env)


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        ("floor: seconds to all available", "floor_seconds_to_all_available"),
        ("seconds to all Ready", "seconds_to_all_ready"),
        ("  ratio to the floor", "ready_vs_floor"),
        ("writes per Shard to Ready (floor 3)", ("to_ready_per_shard", "writes")),
        ("  of which Events", ("to_ready_per_shard", "events")),
        ("  failed writes per Shard", ("to_ready_per_shard", "failed_writes")),
        ("reads per Shard to Ready", ("to_ready_per_shard", "reads")),
        ("PKI: Secrets issued (writes)", "pki_secrets_written"),
        ("PKI: seconds to the last issued Secret", "pki_seconds_to_last_secret"),
        ("steady state: reads per resync", "steady_reads_per_resync"),
        ("steady state: writes per resync", "steady_writes_per_resync"),
        ("steady state: operator CPU % of a core", "steady_cpu_percent"),
        ("steady state: /metrics scrapes (1 per second)", "steady_metrics_scrapes"),
        (
            "steady state: writes the operator's metrics counted",
            "metrics_writes_counted_in_steady_state",
        ),
        ("/metrics scrape p50 ms", "metrics_scrape_p50_ms"),
        ("/metrics scrape max ms", "metrics_scrape_max_ms"),
        ("/metrics size (bytes)", "metrics_bytes"),
        ("writes the operator's metrics counted to Ready", "metrics_writes_counted_to_ready"),
        ("Events the operator's metrics counted to Ready", "metrics_events_counted_to_ready"),
        ("writes per version change", "version_change_writes_per_shard"),
        ("spec change -> Deployment p50 ms", "reaction_p50_ms"),
        ("spec change -> Deployment p99 ms", "reaction_p99_ms"),
        ("operator CPU s per Shard to Ready", "operator_cpu_seconds_per_shard_to_ready"),
        ("operator peak RSS MiB", "operator_peak_rss_mib"),
    ]
    lines = [f"{'figure':40}" + "".join(f"{'N=' + str(r['shards']):>12}" for r in results)]
    for label, key in rows:
        cells = []
        for result in results:
            value: Any = result
            for part in key if isinstance(key, tuple) else (key,):
                value = value[part]
            cells.append(f"{value:>12}")
        lines.append(f"{label:40}" + "".join(cells))
    return "\n".join(lines)


def main() -> int:
    build_tools(*CLUSTER_TOOLS)
    results = [run_size(n) for n in SIZES]
    print(table(results))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"results": results}, indent=2) + "\n", encoding="utf-8")
    print(f"written to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
