"""The rolling upgrade on real pods (make e2e-upgrade): a root and a non-root shard, two kcp
replicas each on an etcd pod, bumped together from kcp v0.27.1 to v0.28.0 (both built from
their Go modules), the operator pod killed once mid-rollout; then bumped back down to v0.27.1.

The upgrade crosses a kcp minor release, so the operator renders it as ``Recreate``: the
test checks that a shard's pods never run two versions at once, the root shard rolls first
and ``/readyz`` through each Service fails no longer than one pod's restart.

A sampler records a timeline (each pod's kcp version and readiness, whether it runs with
``--root-shard-kubeconfig-file``, each PodDisruptionBudget's ``disruptionsAllowed``,
``status.version`` and ``/readyz`` through each Service), printed as a table at the end.

The bump down crosses a minor release, which kcp does not support: v0.28.0 stores APIExports
and APIBindings as apis.kcp.io/v1alpha2, and a v0.27.1 pod on that etcd never becomes ready
(its CRD update is refused). The operator refuses it: both shards keep serving v0.28.0 with
``DowngradeRefused``, no v0.27.1 pod starts, and the spec set back to v0.28.0 is Ready again.

Then, on the external etcd: both serving certificates rotated, ``kubectl rollout restart``,
and the last hop to the newest kcp that builds here (``KCP_NEXT_VERSION``, v0.30.0). The
workspaces and objects of :mod:`testkit.kcpdata` on both shards are read again after every
step (``bench/results/durability.json``, ``external-etcd``).

Every version still needs ``--root-shard-kubeconfig-file``, so the flag stays on the non-root
shard throughout: no kcp release that ignores it can be built here (see README, Known
limitations), and dropping it from a kcp that needs it would break the shard.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.kcpdata import KcpData
from testkit.kube import Cluster, KubectlError
from testkit.operator_metrics import Scrape
from testkit.operator_process import RESYNC_WINDOW
from testkit.tools import log, pinned_version
from testkit.wait import wait_for
from tests.e2e.pki import Pki
from tests.e2e.shards import plan_json

from .durability import (
    OPERATOR_SELECTOR,
    RESULTS,
    DataSteps,
    pki_kubeconfig,
    replace_all_pods,
    rollout_restart,
    rotate_serving_certs,
    shard_apis,
)
from .kind import (
    NEW,
    OLD,
    OPERATOR_NAMESPACE,
    bump,
    condition_of,
    describe_failure,
    kcp_namespace,
    load_kcp_image,
    operator_metrics,
    shards_on_etcd_pod,
    wait_degraded_cleared,
    wait_refused,
    wait_version,
)
from .timeline import (
    FLAG,
    REPLICAS,
    SHARDS,
    Sample,
    Timeline,
    first,
    longest_outage,
    longest_pod_start,
    longest_pod_stop,
    rolled,
)

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

NEXT = pinned_version("KCP_NEXT_VERSION").removeprefix("v")
"""The newest kcp that builds here: the last hop, from NEW across the minors between."""
ROLL_TIMEOUT = 900
REFUSAL_WATCH = RESYNC_WINDOW
"""Seconds the timeline keeps sampling after the refusal: at least one resync pass of each
Shard, and long enough for the Deployment controller to have started a pod on the refused
version, had the operator asked for one."""


def assert_invariants(samples: list[Sample], new: str) -> None:
    """What must hold at every moment of an upgrade to ``new`` across a kcp minor release:
    the root shard rolls first, a shard's pods never run two kcp versions at once (on one
    etcd they fight over their bootstrap objects), the PDB holds, ``status.version`` is
    honest."""
    root_done = first(samples, lambda s: rolled(s, "root", new))
    shard_started = first(samples, lambda s: any(p.version == new for p in s.pods["shard-1"]))
    if shard_started is not None:
        assert root_done is not None, f"shard-1 started {new} before the root shard rolled out"
        assert shard_started >= root_done, "shard-1 rolled before the root shard had rolled out"
    for sample in samples:
        for shard in SHARDS:
            versions = {p.version for p in sample.pods[shard]}
            assert len(versions) <= 1, f"{shard}: kcp {sorted(versions)} at {sample.at:.0f}s"
            allowed = sample.disruptions_allowed[shard]
            assert allowed is None or allowed >= 0, sample
            if sample.status_version[shard] == new:
                assert all(p.version == new for p in sample.pods[shard] if p.ready), (
                    f"{shard}: status.version {new} at {sample.at:.0f}s while replicas ran "
                    f"{[p.version for p in sample.pods[shard]]}"
                )


def assert_rollout(samples: list[Sample], new: str, restart_bound: float) -> None:
    """A finished rollout: no PDB violation, short outages, honest status, root first."""
    assert any(rolled(s, "root", new) for s in samples), f"root never ran {new} everywhere"
    assert any(rolled(s, "shard-1", new) for s in samples), f"shard-1 never ran {new}"
    assert_invariants(samples, new)
    for shard in SHARDS:
        outage = longest_outage(samples, shard)
        assert outage <= restart_bound, f"{shard} /readyz failed for {outage:.0f}s"


ROLLOUT_COUNT = "kcp_shard_operator_rollout_duration_seconds_count"
ROLLOUT_SUM = "kcp_shard_operator_rollout_duration_seconds_sum"
WRITES = "kcp_shard_operator_api_writes_total"


def plan_summary(planned: dict[str, Any]) -> str:
    return ", ".join(
        f"{s['order']}. {s['name']} {s['now']} -> {s['after']} "
        f"(drops {s['flagsDropped'] or 'nothing'})"
        for s in planned["steps"]
    )


def _scrape_at(cluster: Cluster, version: str) -> Scrape | None:
    """A scrape of the operator once it counts every shard Ready at ``version``."""
    try:
        found = operator_metrics(cluster)
    except (KubectlError, ValueError):
        return None
    running = found.value("kcp_shard_operator_shards_running_version", version=version) or 0
    return found if running >= len(SHARDS) else None


def assert_plan_was_the_upgrade(planned: dict[str, Any], upgrade: list[Sample]) -> None:
    """The plan taken before the bump: the order the timeline shows (the root's pods all at
    NEW before any shard-1 pod), and the flags the pods then ran with (nothing dropped: the
    flag stays on every shard-1 pod, as asserted on the timeline)."""
    assert [(s["name"], s["order"]) for s in planned["steps"]] == [("root", 1), ("shard-1", 2)]
    assert all(s["now"] == OLD and s["after"] == NEW for s in planned["steps"]), planned
    assert all(s["flagsDropped"] == [] for s in planned["steps"]), planned
    root_done = first(upgrade, lambda s: rolled(s, "root", NEW))
    shard_started = first(upgrade, lambda s: any(p.version == NEW for p in s.pods["shard-1"]))
    assert root_done is not None
    assert shard_started is not None
    assert root_done <= shard_started


def assert_metrics_moved(
    initial: Scrape, before_kill: Scrape, after: Scrape, upgrade: list[Sample]
) -> None:
    """The operator's counters over the upgrade, across its pod's replacement (a new pod
    counts from zero): one rollout observed per shard, Deployment writes, the gauge up while
    rolling; written to bench/results/upgrade-metrics.json."""
    figures: dict[str, Any] = {}
    for role in ("root", "non-root"):
        old_pod = (before_kill.value(ROLLOUT_COUNT, role=role) or 0) - (
            initial.value(ROLLOUT_COUNT, role=role) or 0
        )
        observed = old_pod + (after.value(ROLLOUT_COUNT, role=role) or 0)
        seconds = (
            (before_kill.value(ROLLOUT_SUM, role=role) or 0)
            - (initial.value(ROLLOUT_SUM, role=role) or 0)
            + (after.value(ROLLOUT_SUM, role=role) or 0)
        )
        figures[role] = {"rollouts_observed": observed, "rollout_seconds": round(seconds, 1)}
        assert observed == 1, (role, figures)
    writes = (
        before_kill.total(WRITES, kind="Deployment")
        - initial.total(WRITES, kind="Deployment")
        + after.total(WRITES, kind="Deployment")
    )
    figures["deployment_writes"] = writes
    gauge = [s.rollouts_in_progress for s in upgrade if s.rollouts_in_progress is not None]
    figures["rollouts_in_progress_max"] = max(gauge, default=None)
    figures["metrics_unanswered_samples"] = sum(s.rollouts_in_progress is None for s in upgrade)
    log(f"operator metrics over the upgrade: {figures}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "upgrade-metrics.json").write_text(json.dumps(figures, indent=2) + "\n")
    assert writes >= len(SHARDS), figures
    assert max(gauge, default=0) >= 1, figures


@pytest.fixture
def upgrade_namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    assert load_kcp_image(kind_cluster, "kcp-upgrade", "KCP_UPGRADE_VERSION") == NEW
    assert load_kcp_image(kind_cluster, "kcp-next", "KCP_NEXT_VERSION") == NEXT
    with kcp_namespace(kind_cluster, "kcp-upgrade") as name:
        yield name


def template_version(cluster: Cluster, namespace: str, shard: str) -> str:
    return cluster.kubectl(
        "get", "deployment", f"{shard}-kcp", "-n", namespace, "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ).rsplit(":v", 1)[-1]  # fmt: skip


def test_rolling_upgrade_and_rollback_on_real_pods(
    kind_cluster: Cluster, upgrade_namespace: str, tmp_path: Path
) -> None:
    ns, kubectl = upgrade_namespace, kind_cluster.kubectl
    pki = Pki.create(tmp_path / "pki")
    shards = shards_on_etcd_pod(kind_cluster, ns, pki, OLD, REPLICAS)
    timeline = Timeline(kind_cluster, ns)
    stack = ExitStack()
    try:
        kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(shards))
        timeline.start()
        timeline.mark(f"applied root and shard-1 at kcp {OLD}, {REPLICAS} replicas each")
        wait_version(kind_cluster, ns, SHARDS, OLD, ROLL_TIMEOUT)
        timeline.mark(f"both Ready at {OLD}")
        apis = stack.enter_context(
            shard_apis(kind_cluster, ns, pki_kubeconfig(pki, tmp_path), SHARDS)
        )
        data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="upgrade")
        steps = DataSteps(data, apis, "durability", "external-etcd")
        timeline.mark(f"data created: {len(data.records)} objects on both shards")
        planned = plan_json(kind_cluster, "-n", ns, "--to", NEW)
        timeline.mark(f"plan --to {NEW}: {plan_summary(planned)}")
        initial = operator_metrics(kind_cluster)
        upgrade_from = len(timeline.samples)
        started = time.monotonic()

        bump(kind_cluster, ns, SHARDS, NEW)
        timeline.mark(f"both Shards bumped to {NEW}")
        wait_for(
            lambda: (
                any(rolled(s, "root", NEW) for s in timeline.samples[-3:])
                or any(p.version == NEW for s in timeline.samples[-2:] for p in s.pods["root"])
            ),
            ROLL_TIMEOUT,
            "a root pod on the new version",
            interval=2,
        )
        before_kill = operator_metrics(kind_cluster)
        kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_SELECTOR)
        timeline.mark("operator pod deleted mid-rollout")
        wait_version(kind_cluster, ns, SHARDS, NEW, ROLL_TIMEOUT)
        wait_for(
            lambda: (
                bool(timeline.samples) and all(rolled(timeline.samples[-1], s, NEW) for s in SHARDS)
            ),
            60,
            f"a timeline sample with every replica Ready at {NEW}",
            interval=1,
        )
        timeline.mark(f"both Ready at {NEW}")
        upgrade = timeline.samples[upgrade_from:]
        after_upgrade = wait_for(
            lambda: _scrape_at(kind_cluster, NEW), 60, f"/metrics of the new operator pod at {NEW}"
        )
        steps.check(
            f"the upgrade to {NEW}, the operator pod killed mid-rollout", time.monotonic() - started
        )
        refusal_from = len(timeline.samples)
        started = time.monotonic()

        refused = plan_json(kind_cluster, "-n", ns, "--to", OLD)["steps"]
        timeline.mark(
            f"plan --to {OLD}: {[(s['name'], s['outcome'], s['reason']) for s in refused]}"
        )
        assert {(s["outcome"], s["reason"]) for s in refused} == {("Refused", "DowngradeRefused")}
        bump(kind_cluster, ns, SHARDS, OLD)
        timeline.mark(f"bump down: both Shards set to {OLD} (an older minor)")
        wait_refused(kind_cluster, ns, SHARDS, 120)
        timeline.mark("both Shards report DowngradeRefused")
        time.sleep(REFUSAL_WATCH)
        for shard in SHARDS:
            assert template_version(kind_cluster, ns, shard) == NEW
            ready = condition_of(kind_cluster, ns, shard, "Ready")
            assert ready.get("status") == "True", ready
            message = condition_of(kind_cluster, ns, shard, "Degraded").get("message", "")
            assert f"the shard stays at kcp {NEW}" in message, message
        steps.check(f"the refused downgrade to {OLD}", time.monotonic() - started)

        bump(kind_cluster, ns, SHARDS, NEW)
        timeline.mark(f"spec set back to {NEW}")
        wait_version(kind_cluster, ns, SHARDS, NEW, 120)
        wait_degraded_cleared(kind_cluster, ns, SHARDS, 120)
        timeline.mark(f"both Ready at {NEW} again, Degraded cleared")
        time.sleep(4)
        after = timeline.samples[refusal_from:]

        def rotate() -> None:
            rotate_serving_certs(kind_cluster, ns, pki, SHARDS)
            timeline.mark("both serving certificates rotated")

        def restart_deployments() -> None:
            rollout_restart(kind_cluster, ns, SHARDS)
            timeline.mark("kubectl rollout restart of both Deployments")

        for what, act in (
            ("a rotation of both serving certificates", rotate),
            ("kubectl rollout restart", restart_deployments),
        ):
            steps.check(
                what, replace_all_pods(kind_cluster, ns, SHARDS, REPLICAS, ROLL_TIMEOUT, act)
            )

        started = time.monotonic()
        next_from = len(timeline.samples)
        bump(kind_cluster, ns, SHARDS, NEXT)
        timeline.mark(f"both Shards bumped to {NEXT}, the newest kcp that builds here")
        wait_version(kind_cluster, ns, SHARDS, NEXT, ROLL_TIMEOUT)
        timeline.mark(f"both Ready at {NEXT}")
        steps.check(f"the upgrade to {NEXT}", time.monotonic() - started)
        to_next = timeline.samples[next_from:]
    except BaseException:
        timeline.stop()
        stack.close()
        print(timeline.table())
        print(describe_failure(kind_cluster, ns))
        raise
    timeline.stop()
    stack.close()
    print(f"\nTimeline (pods: kcp version / R ready / F {FLAG}):\n{timeline.table()}")
    start, stop = longest_pod_start(timeline.samples), longest_pod_stop(timeline.samples)
    samples = timeline.samples
    resolution = max(b.at - a.at for a, b in pairwise(samples))
    restart = start + stop + resolution
    log(
        f"one pod's restart: longest stop {stop:.0f}s + longest start {start:.0f}s "
        f"(+ {resolution:.0f}s, the longest time between two samples)"
    )
    for shard in SHARDS:
        log(f"{shard}: longest /readyz failure {longest_outage(upgrade, shard):.0f}s")
    assert_rollout(upgrade, NEW, restart_bound=restart)
    for shard in SHARDS:
        log(f"{shard}: longest /readyz failure to {NEXT} {longest_outage(to_next, shard):.0f}s")
    assert_invariants(to_next, NEXT)
    assert after, "no samples after the bump down"
    for sample in after:
        for shard in SHARDS:
            assert rolled(sample, shard, NEW), f"{shard} at {sample.at:.0f}s: {sample.pods[shard]}"
            assert sample.readyz[shard], f"{shard} /readyz failed at {sample.at:.0f}s"
            assert sample.status_version[shard] == NEW, sample
    assert all(p.flag for s in timeline.samples for p in s.pods["shard-1"])
    assert not any(p.flag for s in timeline.samples for p in s.pods["root"])
    assert_plan_was_the_upgrade(planned, upgrade)
    assert_metrics_moved(initial, before_kill, after_upgrade, upgrade)
