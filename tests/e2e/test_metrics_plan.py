"""The operator's /metrics and ``plan`` against a real API server: the counters say what the
API server holds, ``plan`` writes nothing and its order is the order the upgrade then takes."""

from __future__ import annotations

import json
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from testkit.kube import Cluster, condition, shard_ready
from testkit.metrics import api_request_totals, writes_between
from testkit.operator_metrics import Scrape, scrape
from testkit.operator_process import CHILD_RESOURCES, OperatorProcess
from testkit.wait import wait_for

from .shards import (
    Kubectl,
    apply,
    cache_server,
    front_proxy,
    get,
    patch_spec,
    plan_json,
    shard,
    wait_ready,
    wait_settled,
)

pytestmark = pytest.mark.e2e
OLD, NEW = "0.27.1", "0.28.0"
SHARDS = ("root", "shard-1")


def installation(version: str) -> list[dict[str, Any]]:
    return [shard("root", version), shard("shard-1", version, rootShardRef={"name": "root"})]


def issued_secrets(kubectl: Kubectl, namespace: str) -> int:
    out = kubectl("get", "secrets", "-n", namespace, "-l", "kcpshard.dev/issued", "-o", "name")
    return len(out.split())


def template_version(kubectl: Kubectl, namespace: str, name: str) -> str:
    deployment = get(kubectl, namespace, "deployment", f"{name}-kcp")
    return str(
        deployment["spec"]["template"]["metadata"]["annotations"]["kcpshard.dev/kcp-version"]
    )


def test_metrics_count_what_the_api_server_holds(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, *installation(OLD))
    for name in SHARDS:
        wait_ready(kubectl, namespace, name, OLD)
    wait_for(
        lambda: (
            scrape(operator_process.metrics).value("kcp_shard_operator_shards", phase="Ready") == 2
        ),
        30,
        "both Shards Ready in /metrics",
    )
    found = scrape(operator_process.metrics)
    assert found.value("kcp_shard_operator_shards_running_version", version=OLD) == 2
    writes = "kcp_shard_operator_api_writes_total"
    assert found.value(writes, kind="Deployment", verb="apply") == 2
    created = found.value(writes, kind="Secret", verb="create") or 0
    failed = found.total("kcp_shard_operator_api_write_failures_total", kind="Secret")
    assert created - failed == issued_secrets(kubectl, namespace)
    for role in ("root", "non-root"):
        count = "kcp_shard_operator_rollout_duration_seconds_count"
        assert found.value(count, role=role) == 1, role
    assert found.total("kcp_shard_operator_reconcile_passes_total", kind="Shard") >= 4
    status = get(kubectl, namespace, "shard", "root")["status"]
    expiries = found.labelled("kcp_shard_operator_certificate_expiry_timestamp_seconds", "secret")
    assert set(expiries) >= {entry["secret"] for entry in status["certificates"]}

    reads = [scrape(operator_process.metrics) for _ in range(3)]
    counted = {s.total("kcp_shard_operator_api_reads_total") for s in reads}
    assert len(counted) == 1, "a scrape made the operator read the API"


def planner(cluster: Cluster, namespace: str, directory: Path) -> Cluster:
    """A ServiceAccount with what docs/upgrades.md says ``plan`` needs: list Shards,
    CacheServers, FrontProxies and VirtualWorkspaceServers, get Deployments."""
    kubectl = cluster.kubectl
    for verb, resource in (
        ("list", "shards.kcpshard.dev"),
        ("list", "cacheservers.kcpshard.dev"),
        ("list", "frontproxies.kcpshard.dev"),
        ("list", "virtualworkspaceservers.kcpshard.dev"),
        ("get", "deployments.apps"),
    ):
        role = f"plan-{verb}-{resource.split('.')[0]}"
        kubectl("create", "role", role, f"--verb={verb}", f"--resource={resource}", "-n", namespace)
        sa = f"--serviceaccount={namespace}:planner"
        kubectl("create", "rolebinding", role, f"--role={role}", sa, "-n", namespace)
    return cluster.as_service_account(namespace, "planner", directory)


def read_only_plan(cluster: Cluster, namespace: str, directory: Path, *args: str) -> Any:
    """``plan -n namespace <args>`` as the :func:`planner` ServiceAccount, which the API server
    counted no write of."""
    restricted = planner(cluster, namespace, directory)
    before = api_request_totals(cluster)
    planned = plan_json(restricted, "-n", namespace, *args)
    after = api_request_totals(cluster)
    written = (
        *CHILD_RESOURCES,
        "shards",
        "cacheservers",
        "frontproxies",
        "virtualworkspaceservers",
        "secrets",
    )
    assert writes_between(before, after, written) == {}
    return planned


def test_plan_reads_only_and_its_order_is_the_upgrade_s(
    operator_process: OperatorProcess,
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    tmp_path: Path,
) -> None:
    apply(kubectl, namespace, *installation(OLD))
    for name in SHARDS:
        wait_settled(kubectl, namespace, name, OLD)
    planned = read_only_plan(cluster, namespace, tmp_path, "--to", NEW)
    steps = {step["name"]: step for step in planned["steps"]}
    assert [(s["name"], s["order"]) for s in planned["steps"]] == [("root", 1), ("shard-1", 2)]
    assert steps["shard-1"]["waitsFor"] == f"root shard root to roll out kcp {NEW}"
    assert all(s["flagsDropped"] == [] and s["now"] == OLD for s in steps.values())
    assert steps["shard-1"]["identityCache"] == "kept (OlderVersion)"

    in_progress: list[float] = []
    stop_sampling = threading.Event()

    def sample_in_progress() -> None:
        """The gauge every 10 ms from before the patches until both Shards are Ready: on kwok
        a rollout can be over within a second, between two polls of the waits below."""
        while not stop_sampling.wait(0.01):
            found: Scrape = scrape(operator_process.metrics)
            in_progress.append(found.value("kcp_shard_operator_rollouts_in_progress") or 0)

    sampler = threading.Thread(target=sample_in_progress, daemon=True)
    sampler.start()
    changed_at: dict[str, float] = {}
    try:
        for name in SHARDS:
            patch_spec(kubectl, namespace, name, {"version": NEW})
        start = time.monotonic()

        def both_changed() -> bool:
            for name in SHARDS:
                if name not in changed_at and template_version(kubectl, namespace, name) == NEW:
                    changed_at[name] = time.monotonic() - start
            return len(changed_at) == len(SHARDS)

        wait_for(both_changed, 120, "both Deployments on the new version", interval=0.2)
        order = sorted(changed_at, key=changed_at.__getitem__)
        assert order == [s["name"] for s in planned["steps"]], changed_at
        wait_for(
            lambda: all(
                shard_ready(get(kubectl, namespace, "shard", name), NEW) for name in SHARDS
            ),
            180,
            f"both Shards Ready at kcp {NEW}",
            interval=0.2,
        )
    finally:
        stop_sampling.set()
        sampler.join()
    wait_for(
        lambda: (
            scrape(operator_process.metrics).total(
                "kcp_shard_operator_rollout_duration_seconds_count"
            )
            == 4
        ),
        30,
        "two more rollouts observed",
    )
    found = scrape(operator_process.metrics)
    for role in ("root", "non-root"):
        assert found.value("kcp_shard_operator_rollout_duration_seconds_count", role=role) == 2
    assert found.value("kcp_shard_operator_shards_running_version", version=NEW) == 2
    assert max(in_progress) >= 1, f"none of {len(in_progress)} samples saw a rollout going on"
    print(f"plan order {order}, Deployments changed at {changed_at}")
    assert plan_json(cluster, "-n", namespace)["steps"][0]["outcome"] == "Unchanged"

    refused = plan_json(cluster, "-n", namespace, "--to", OLD, "--exit-code", exit_code=3)["steps"]
    assert [(s["outcome"], s["reason"], s["after"]) for s in refused] == [
        ("Refused", "DowngradeRefused", NEW)
    ] * 2
    for name in SHARDS:
        patch_spec(kubectl, namespace, name, {"version": OLD})

    def refused_now(name: str) -> bool:
        degraded = condition(get(kubectl, namespace, "shard", name), "Degraded")
        return degraded.get("reason") == "DowngradeRefused"

    for name in SHARDS:
        wait_for(partial(refused_now, name), 60, f"{name} DowngradeRefused")
        message = condition(get(kubectl, namespace, "shard", name), "Degraded")["message"]
        assert message == next(s["message"] for s in refused if s["name"] == name)


WHOLE = {
    ("cacheserver", "cache"): "cache-cache",
    ("shard", "root"): "root-kcp",
    ("shard", "shard-1"): "shard-1-kcp",
    ("frontproxy", "kcp"): "kcp-front-proxy",
}
"""The objects of a whole installation and their Deployments."""


def test_the_plan_of_a_whole_installation_is_the_order_it_rolls(
    operator_process: OperatorProcess,
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    tmp_path: Path,
) -> None:
    """CacheServer, root, shard-1 and FrontProxy planned from the live objects (read only),
    then all bumped at once: their Deployments change in the planned order."""
    on_cache = {"serverRef": {"name": "cache"}}
    apply(kubectl, namespace, cache_server("cache", OLD))
    apply(
        kubectl,
        namespace,
        shard("root", OLD, cache=on_cache),
        shard("shard-1", OLD, cache=on_cache, rootShardRef={"name": "root"}),
        front_proxy("kcp", OLD),
    )
    for name in SHARDS:
        wait_ready(kubectl, namespace, name, OLD)
    wait_for(
        lambda: (
            (get(kubectl, namespace, "frontproxy", "kcp").get("status") or {}).get("phase")
            == "Ready"
        ),
        90,
        "the FrontProxy Ready",
    )
    wait_settled(kubectl, namespace, "root", OLD)
    planned = read_only_plan(cluster, namespace, tmp_path, "--to", NEW)
    assert [(s["kind"], s["name"], s["order"]) for s in planned["steps"]] == [
        ("CacheServer", "cache", 1),
        ("Shard", "root", 2),
        ("Shard", "shard-1", 3),
        ("FrontProxy", "kcp", 4),
    ], planned
    assert all(s["now"] == OLD and s["after"] == NEW for s in planned["steps"]), planned

    bumped = json.dumps({"spec": {"version": NEW}})
    for kind, name in WHOLE:
        kubectl("patch", "-n", namespace, kind, name, "--type=merge", "-p", bumped)
    start = time.monotonic()
    changed_at: dict[str, float] = {}

    def all_changed() -> bool:
        for (_, name), deployment in WHOLE.items():
            found = get(kubectl, namespace, "deployment", deployment)
            annotations = found["spec"]["template"]["metadata"]["annotations"]
            if name not in changed_at and annotations["kcpshard.dev/kcp-version"] == NEW:
                changed_at[name] = time.monotonic() - start
        return len(changed_at) == len(WHOLE)

    wait_for(all_changed, 240, "every Deployment of the installation on the new version")
    order = sorted(changed_at, key=changed_at.__getitem__)
    print(f"installation plan order {order}, Deployments changed at {changed_at}")
    assert order == [s["name"] for s in planned["steps"]], changed_at
