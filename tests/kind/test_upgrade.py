"""The rolling upgrade of a whole installation on real pods (make e2e-upgrade): a CacheServer,
a root and a non-root shard (two kcp replicas each, on an etcd pod), a standalone
VirtualWorkspaceServer for each shard (two replicas each) and a FrontProxy (two replicas), all
on the operator's own PKI, bumped together from kcp v0.27.1 to v0.28.0 (both built from their
Go modules), the operator pod killed once mid-rollout; then the Shards bumped back down to
v0.27.1, which is refused.

The operator orders the upgrade as ``kcp-shard-operator plan`` says: the cache server first,
then the root shard, then shard-1 and the root's virtual-workspace server, then shard-1's
server, then the front-proxy, each once what it waits for has rolled out (a server waits for
its shard, the front-proxy for every shard and server). The upgrade crosses a kcp minor
release, so the shards roll with ``Recreate``: the test checks that a shard's pods never run two
versions at once, the order above, and that ``/readyz`` through each Service fails no longer
than one pod's restart.

A sampler records a timeline (each pod's kcp version and readiness, whether a shard's pod runs
with ``--root-shard-kubeconfig-file``, each PodDisruptionBudget's ``disruptionsAllowed``,
``status.version``, ``/readyz`` through each shard's Service), and a pod in the cluster reads
through the front-proxy every second: a ConfigMap in a workspace on the root and one in a
workspace on shard-1, made through the front-proxy, and the Widgets of an APIExport in a
workspace on the root at the virtual-workspace URL its APIExportEndpointSlice lists (the
root's standalone server; kcp's front-proxy sends ``/services/`` to one backend, so shard-1's
server is not reachable through it). The timeline is printed as a table with the front-proxy's
failed reads; per step, the longest time a read kept failing, and for the upgrades when each
component began and finished rolling beside the plan's order, go to
``bench/results/upgrade-front-proxy.json``.

The bump down crosses a minor release, which kcp does not support: v0.28.0 stores APIExports
and APIBindings as apis.kcp.io/v1alpha2, and a v0.27.1 pod on that etcd never becomes ready.
The operator refuses it: both shards keep serving v0.28.0 with ``DowngradeRefused``, and the
spec set back to v0.28.0 is Ready again.

Then: both serving certificates issued again (their Secrets deleted: the operator issues new
ones and rolls the pods), ``kubectl rollout restart``, the last hop of the whole installation to
the newest kcp that builds here (``KCP_NEXT_VERSION``, v0.30.0), and both root pods killed at
once while the front-proxy is read: what a read of the workspace on shard-1 gets while the root
shard is down. The workspaces and objects of :mod:`testkit.kcpdata`, those made through the
front-proxy among them, are read again after every step (``bench/results/durability.json``,
``installation``).

Every version still needs ``--root-shard-kubeconfig-file``, so the flag stays on the non-root
shard throughout: no kcp release that ignores it can be built here (see docs/upgrades.md,
Limitations), and dropping it from a kcp that needs it would break the shard.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from contextlib import ExitStack
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from testkit.kcpdata import FRONT_PROXY as FRONT_PROXY_API
from testkit.kcpdata import KcpData
from testkit.kube import Cluster, KubectlError, shard_ready
from testkit.operator_metrics import Scrape
from testkit.operator_process import RESYNC_WINDOW
from testkit.tools import log, pinned_version
from testkit.wait import wait_for
from tests.e2e.shards import plan_json

from . import kind
from .durability import (
    OPERATOR_SELECTOR,
    RESULTS,
    DataSteps,
    admin_kubeconfig,
    front_proxy_kubeconfig,
    replace_all_pods,
    rollout_restart,
    shard_apis,
)
from .kind import (
    NEW,
    OLD,
    OPERATOR_NAMESPACE,
    bump,
    bump_installation,
    condition_of,
    describe_failure,
    installation_on_etcd_pod,
    installation_ready,
    kcp_namespace,
    kcp_object,
    load_kcp_image,
    operator_metrics,
    wait_degraded_cleared,
    wait_refused,
    wait_version,
)
from .reader import FrontProxyReader, Read, failures, longest_failure
from .timeline import (
    CACHE,
    FLAG,
    FRONT_PROXY,
    REPLICAS,
    SERVER_SUFFIX,
    SERVERS,
    SHARDS,
    WITH_SERVERS,
    Sample,
    Timeline,
    first,
    longest_outage,
    longest_pod_start,
    longest_pod_stop,
    rolled,
)
from .virtualworkspaces import (
    container_args,
    exported,
    rolled_out,
    services_backend,
    widgets_at,
    widgets_path,
)

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

NEXT = pinned_version("KCP_NEXT_VERSION").removeprefix("v")
"""The newest kcp that builds here: the last hop, from NEW across the minors between."""
ROLL_TIMEOUT = 900
REFUSAL_WATCH = RESYNC_WINDOW
"""Seconds the timeline keeps sampling after the refusal: at least one resync pass of each
Shard, and long enough for the Deployment controller to have started a pod on the refused
version, had the operator asked for one."""
ROOT_DOWN_WATCH = 20.0
"""Seconds of reads through the front-proxy after both root pods are gone, before the
replacements may be Ready."""
COMPONENTS = WITH_SERVERS
VW_KEY = "root-vw"
"""The reads of the Widgets at the root's virtual-workspace URL through the front-proxy."""
ROLLS_AFTER = (
    (CACHE, "root"),
    ("root", "shard-1"),
    *((shard, f"{shard}{SERVER_SUFFIX}") for shard in SHARDS),
    *((component, FRONT_PROXY) for component in (*SHARDS, *SERVERS)),
)
"""(before, after): what waits for what to roll out, as the plan's steps say."""


def started_at(samples: list[Sample], component: str, version: str) -> float | None:
    """When a pod of ``component`` first ran ``version``."""
    return first(samples, lambda s: any(p.version == version for p in s.pods[component]))


def assert_order(samples: list[Sample], new: str) -> None:
    """Each component of :data:`ROLLS_AFTER` rolled after what it waits for: no pod of it ran
    ``new`` before every pod of the other did."""
    for before, after in ROLLS_AFTER:
        done = first(samples, lambda s, c=before: rolled(s, c, new))
        begun = started_at(samples, after, new)
        assert begun is not None, f"{after} never ran {new}"
        assert done is not None, f"{after} started {new} before {before} had rolled out"
        assert begun >= done, f"{after} started {new} at {begun:.0f}s, {before} done at {done:.0f}s"


def assert_invariants(samples: list[Sample], new: str) -> None:
    """What must hold at every moment of an upgrade to ``new`` across a kcp minor release:
    the order of the installation, a shard's pods never run two kcp versions at once (on one
    etcd they fight over their bootstrap objects), the PDBs hold, ``status.version`` is
    honest."""
    assert_order(samples, new)
    for sample in samples:
        for component in COMPONENTS:
            allowed = sample.disruptions_allowed[component]
            assert allowed is None or allowed >= 0, sample
            if sample.status_version[component] == new:
                assert all(p.version == new for p in sample.pods[component] if p.ready), (
                    f"{component}: status.version {new} at {sample.at:.0f}s while replicas ran "
                    f"{[p.version for p in sample.pods[component]]}"
                )
        for shard in SHARDS:
            versions = {p.version for p in sample.pods[shard]}
            assert len(versions) <= 1, f"{shard}: kcp {sorted(versions)} at {sample.at:.0f}s"


def assert_rollout(samples: list[Sample], new: str, restart_bound: float) -> None:
    """A finished rollout: every component at ``new``, the invariants, short outages."""
    for component in COMPONENTS:
        assert any(rolled(s, component, new) for s in samples), f"{component} never ran {new}"
    assert_invariants(samples, new)
    for shard in SHARDS:
        outage = longest_outage(samples, shard)
        assert outage <= restart_bound, f"{shard} /readyz failed for {outage:.0f}s"


ROLLOUT_COUNT = "kcp_shard_operator_rollout_duration_seconds_count"
ROLLOUT_SUM = "kcp_shard_operator_rollout_duration_seconds_sum"
WRITES = "kcp_shard_operator_api_writes_total"
ROLES = {"cache-server": 1, "root": 1, "non-root": 1, "virtual-workspaces": 2, "front-proxy": 1}
"""The rollouts the operator observes per role over one upgrade."""


def plan_summary(planned: dict[str, Any]) -> str:
    return ", ".join(
        f"{s['order']}. {s['kind']} {s['name']} {s['now']} -> {s['after']} "
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


PLANNED_ORDER = [
    ("CacheServer", kind.CACHE, 1),
    ("Shard", "root", 2),
    ("Shard", "shard-1", 3),
    ("VirtualWorkspaceServer", "root", 3),
    ("VirtualWorkspaceServer", "shard-1", 4),
    ("FrontProxy", kind.FRONT_PROXY, 5),
]


def assert_plan_was_the_upgrade(
    planned: dict[str, Any], upgrade: list[Sample], now: str, new: str
) -> None:
    """The plan taken before the bump from ``now`` to ``new``: the order and waits the
    timeline shows (:func:`assert_order`), and the flags the pods then ran with (nothing
    dropped: the flag stays on every shard-1 pod, as asserted on the timeline)."""
    steps = planned["steps"]
    assert [(s["kind"], s["name"], s["order"]) for s in steps] == PLANNED_ORDER, planned
    assert all(s["now"] == now and s["after"] == new for s in steps), planned
    assert all(s["flagsDropped"] == [] for s in steps), planned
    waits = {component_of_step(s): s["waitsFor"] or "" for s in steps}
    for before, after in ROLLS_AFTER:
        # The plan names a server's shard, and the front-proxy waits for "the shards of root
        # and their virtual-workspace servers".
        named = before if after != FRONT_PROXY else "virtual-workspace servers"
        assert named.removesuffix(SERVER_SUFFIX) in waits[after], (after, waits[after])
    assert_order(upgrade, new)


def component_of_step(step: dict[str, Any]) -> str:
    """The timeline's component of a step of ``plan -o json``."""
    kinds = {
        "CacheServer": CACHE,
        "FrontProxy": FRONT_PROXY,
        "VirtualWorkspaceServer": f"{step['name']}{SERVER_SUFFIX}",
    }
    return kinds.get(str(step["kind"]), str(step["name"]))


def rollout_against_plan(
    planned: dict[str, Any], samples: list[Sample], version: str, since: float
) -> list[dict[str, Any]]:
    """Per step of the plan: its order and what it waits for, and when (seconds after
    ``since`` on the timeline) the component's first pod ran ``version`` and when every
    replica was Ready at it."""
    rows = []
    for step in planned["steps"]:
        component = component_of_step(step)
        begun = started_at(samples, component, version)
        done = first(samples, lambda s, c=component: rolled(s, c, version))
        rows.append(
            {
                "component": component,
                "order": step["order"],
                "waits_for": step["waitsFor"],
                "began_seconds": None if begun is None else round(begun - since, 1),
                "rolled_seconds": None if done is None else round(done - since, 1),
            }
        )
    return rows


def rollout_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'order':>5}  {'component':<12} {'began':>6} {'rolled':>6}  waits for (the plan)"]
    for row in rows:
        lines.append(
            f"{row['order']:>5}  {row['component']:<12} {row['began_seconds'] or '-':>6} "
            f"{row['rolled_seconds'] or '-':>6}  {row['waits_for'] or '-'}"
        )
    return "\n".join(lines)


def assert_metrics_moved(
    initial: Scrape, before_kill: Scrape, after: Scrape, upgrade: list[Sample]
) -> None:
    """The operator's counters over the upgrade, across its pod's replacement (a new pod
    counts from zero): one rollout observed per component, Deployment writes, the gauge up
    while rolling; written to bench/results/upgrade-metrics.json."""
    figures: dict[str, Any] = {}
    for role in ROLES:
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
        assert observed == ROLES[role], (role, figures)
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
    assert writes >= len(COMPONENTS), figures
    assert max(gauge, default=0) >= 1, figures


def front_proxy_figures(
    reads: list[Read],
    steps: list[tuple[str, float, float]],
    keys: list[str],
    rollouts: dict[str, list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Per step (name, wall-clock start, end) and read key: the reads, the failed ones and the
    longest time reads kept failing, and for an upgrade (``rollouts``, by step name) each
    component's rollout beside the plan; written to bench/results/upgrade-front-proxy.json."""
    figures = []
    for name, start, end in steps:
        figure: dict[str, Any] = {"step": name, "seconds": round(end - start, 1)}
        if name in rollouts:
            figure["rollout"] = rollouts[name]
        for key in keys:
            within = [r for r in reads if r.key == key and start <= r.at <= end]
            figure[key] = {
                "reads": len(within),
                "failed": len(failures(reads, key, start, end)),
                "longest_failure_seconds": round(longest_failure(reads, key, start, end), 1),
            }
        figures.append(figure)
        log(f"front-proxy reads during {name}: {figure}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "upgrade-front-proxy.json").write_text(json.dumps(figures, indent=2) + "\n")
    return figures


def read_cell(timeline: Timeline, reads: list[Read], keys: list[str]) -> Any:
    """The table's cell of the front-proxy's reads between two samples: ``ok`` or the failed
    reads per key (and the first error)."""

    def cell(start: float, end: float) -> str:
        bad = [r for r in reads if not r.ok and start < timeline.at(r.at) <= end and r.key in keys]
        if not bad:
            return "ok"
        counts = " ".join(f"{k}:{sum(r.key == k for r in bad)}F" for k in keys)
        return f"{counts} {bad[0].status or bad[0].error[:20]}"

    return cell


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


def wait_installation(cluster: Cluster, namespace: str, version: str, timeline: Timeline) -> None:
    wait_for(
        lambda: installation_ready(cluster, namespace, version),
        ROLL_TIMEOUT,
        f"the whole installation Ready at kcp {version}",
        interval=3,
    )
    wait_for(
        lambda: (
            bool(timeline.samples)
            and all(rolled(timeline.samples[-1], c, version) for c in COMPONENTS)
        ),
        60,
        f"a timeline sample with every replica Ready at {version}",
        interval=1,
    )


def kill_root(cluster: Cluster, namespace: str, timeline: Timeline) -> tuple[float, float]:
    """Both root pods deleted at once; the wall-clock times of the deletion and of the root
    Ready again on new pods."""
    selector = "app.kubernetes.io/name=kcp,app.kubernetes.io/instance=root"
    begun = time.time()
    cluster.kubectl("delete", "pods", "-n", namespace, "-l", selector, "--wait=false")
    timeline.mark("both root pods deleted")
    time.sleep(ROOT_DOWN_WATCH)
    wait_version(cluster, namespace, ("root",), NEXT, ROLL_TIMEOUT)
    wait_for(
        lambda: bool(timeline.samples) and rolled(timeline.samples[-1], "root", NEXT),
        120,
        "a timeline sample with both new root pods Ready",
        interval=1,
    )
    timeline.mark("root Ready again on new pods")
    return begun, time.time()


ROOT_KILLED = "both root pods killed"
TO_IN_PROCESS = "the root's virtual workspaces standalone -> in-process"
TO_STANDALONE = "the root's virtual workspaces in-process -> standalone"


def root_switched(cluster: Cluster, namespace: str, standalone: bool) -> bool:
    """The root rolled out running its virtual workspaces where ``standalone`` says, the
    front-proxy rolled out sending ``/services/`` there, and the root's server Ready (or, back
    in-process, gone: the operator keeps it until nothing sends it requests)."""
    servers = cluster.kubectl("get", "vws", "-n", namespace, "-o", "name").split()
    if ("virtualworkspaceserver.kcpshard.dev/root" in servers) != standalone:
        return False
    if standalone and not shard_ready(kcp_object(cluster, namespace, "vws", "root")):
        return False
    args = container_args(cluster, namespace, "root-kcp")
    service = "root-vw" if standalone else "root-kcp"
    return (
        ("--run-virtual-workspaces=false" in args) == standalone
        and rolled_out(cluster, namespace, "root-kcp")
        and services_backend(cluster, namespace) == f"https://{service}.{namespace}.svc:6443"
        and rolled_out(cluster, namespace, "kcp-front-proxy")
    )


def switch_root_server(
    cluster: Cluster, namespace: str, timeline: Timeline
) -> list[tuple[str, float, float]]:
    """The root's virtual workspaces back in-process (its server deleted) and standalone
    again (the server made again), each until it has rolled out; the steps (name, wall-clock
    start, end)."""
    body = kcp_object(cluster, namespace, "vws", "root")
    again = {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": {"name": "root"},
        "spec": body["spec"],
    }

    def delete() -> None:
        cluster.kubectl("delete", "vws", "root", "-n", namespace, "--wait=false")

    def create() -> None:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(again))

    switches = []
    for name, act, standalone in ((TO_IN_PROCESS, delete, False), (TO_STANDALONE, create, True)):
        began = time.time()
        act()
        timeline.mark(name)
        wait_for(
            partial(root_switched, cluster, namespace, standalone),
            ROLL_TIMEOUT,
            f"{name}, rolled out",
            interval=2,
        )
        timeline.mark(f"{name}: rolled out, the front-proxy too")
        switches.append((name, began, time.time()))
    return switches


def test_rolling_upgrade_of_a_whole_installation_on_real_pods(
    kind_cluster: Cluster, upgrade_namespace: str, tmp_path: Path
) -> None:
    ns, kubectl = upgrade_namespace, kind_cluster.kubectl
    objects = installation_on_etcd_pod(kind_cluster, ns, OLD, REPLICAS, servers=True)
    timeline = Timeline(kind_cluster, ns, COMPONENTS)
    stack = ExitStack()
    steps: list[tuple[str, float, float]] = []
    reader: FrontProxyReader | None = None
    keys: list[str] = []
    try:
        kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(objects))
        timeline.start()
        timeline.mark(
            f"applied the cache server, root, shard-1, their virtual-workspace servers and the "
            f"front-proxy at {OLD}"
        )
        wait_installation(kind_cluster, ns, OLD, timeline)
        timeline.mark(f"all Ready at {OLD}")
        front = ("kcp-front-proxy", front_proxy_kubeconfig(kind_cluster, ns, tmp_path))
        root_admin = admin_kubeconfig(kind_cluster, ns, "root", tmp_path)
        apis = stack.enter_context(shard_apis(kind_cluster, ns, root_admin, SHARDS, front))
        data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="upgrade")
        checks = DataSteps(data, apis, "durability", "installation")
        timeline.mark(f"data created: {len(data.records)} objects, through the front-proxy too")
        front_api = apis[FRONT_PROXY_API]
        token = secrets.token_hex(3)
        export_path, export_url = exported(front_api, apis["root"], token)
        assert urlsplit(export_url).netloc == f"root-vw.{ns}.svc:6443", export_url
        vw_path = urlsplit(export_url).path
        timeline.mark(f"the root's APIExportEndpointSlice in {export_path} lists {export_url}")
        paths = {**data.through_front_proxy(), VW_KEY: widgets_path(vw_path)}
        keys = sorted(paths)
        reader = FrontProxyReader(kind_cluster, ns, "kcp-front-proxy-admin-kubeconfig", paths)
        reader.start()
        stack.callback(reader.stop)
        wait_for(
            lambda: {r.key for r in reader.reads() if r.ok} == set(keys) if reader else False,
            60,
            f"a good read of each of {keys}",
            interval=2,
        )
        timeline.mark(f"reading {keys} through the front-proxy every second, from a pod")
        planned = plan_json(kind_cluster, "-n", ns, "--to", NEW)
        timeline.mark(f"plan --to {NEW}: {plan_summary(planned)}")
        initial = operator_metrics(kind_cluster)
        upgrade_from = len(timeline.samples)
        began, started = time.time(), time.monotonic()

        bump_installation(kind_cluster, ns, NEW)
        timeline.mark(f"the whole installation bumped to {NEW}")
        wait_for(
            lambda: any(p.version == NEW for s in timeline.samples[-2:] for p in s.pods["root"]),
            ROLL_TIMEOUT,
            "a root pod on the new version",
            interval=2,
        )
        before_kill = operator_metrics(kind_cluster)
        kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_SELECTOR)
        timeline.mark("operator pod deleted mid-rollout")
        wait_installation(kind_cluster, ns, NEW, timeline)
        timeline.mark(f"all Ready at {NEW}")
        steps.append((f"the upgrade to {NEW}", began, time.time()))
        upgrade = timeline.samples[upgrade_from:]
        rollouts = {
            f"the upgrade to {NEW}": rollout_against_plan(planned, upgrade, NEW, timeline.at(began))
        }
        after_upgrade = wait_for(
            lambda: _scrape_at(kind_cluster, NEW), 60, f"/metrics of the new operator pod at {NEW}"
        )
        checks.check(
            f"the upgrade to {NEW}, the operator pod killed mid-rollout",
            time.monotonic() - started,
        )
        refusal_from = len(timeline.samples)
        began, started = time.time(), time.monotonic()

        refused = plan_json(kind_cluster, "-n", ns, "--to", OLD)["steps"]
        timeline.mark(
            f"plan --to {OLD}: {[(s['name'], s['outcome'], s['reason']) for s in refused]}"
        )
        # The CacheServer and the Shards keep data: refused. The front-proxy and the
        # virtual-workspace servers keep none: they may go down.
        keep_none = ("FrontProxy", "VirtualWorkspaceServer")
        assert {(s["outcome"], s["reason"]) for s in refused if s["kind"] not in keep_none} == {
            ("Refused", "DowngradeRefused")
        }, refused
        assert all(s["outcome"] == "Rolls" for s in refused if s["kind"] in keep_none), refused
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
        checks.check(f"the refused downgrade to {OLD}", time.monotonic() - started)
        bump(kind_cluster, ns, SHARDS, NEW)
        timeline.mark(f"spec set back to {NEW}")
        wait_version(kind_cluster, ns, SHARDS, NEW, 120)
        wait_degraded_cleared(kind_cluster, ns, SHARDS, 120)
        timeline.mark(f"both Ready at {NEW} again, Degraded cleared")
        time.sleep(4)
        steps.append((f"the refused downgrade to {OLD}", began, time.time()))
        after = timeline.samples[refusal_from:]

        def renew() -> None:
            serving = [f"{shard}-kcp-serving" for shard in SHARDS]
            kubectl("delete", "secret", "-n", ns, *serving)
            timeline.mark("both serving certificates' Secrets deleted (issued again)")

        def restart_deployments() -> None:
            rollout_restart(kind_cluster, ns, SHARDS)
            timeline.mark("kubectl rollout restart of both Deployments")

        for what, act in (
            ("serving certificates issued again", renew),
            ("kubectl rollout restart", restart_deployments),
        ):
            began = time.time()
            took = replace_all_pods(kind_cluster, ns, SHARDS, REPLICAS, ROLL_TIMEOUT, act)
            steps.append((what, began, time.time()))
            checks.check(what, took)

        planned_next = plan_json(kind_cluster, "-n", ns, "--to", NEXT)
        timeline.mark(f"plan --to {NEXT}: {plan_summary(planned_next)}")
        began, started = time.time(), time.monotonic()
        next_from = len(timeline.samples)
        bump_installation(kind_cluster, ns, NEXT)
        timeline.mark(f"the whole installation bumped to {NEXT}, the newest kcp that builds here")
        wait_installation(kind_cluster, ns, NEXT, timeline)
        timeline.mark(f"all Ready at {NEXT}")
        steps.append((f"the upgrade to {NEXT}", began, time.time()))
        checks.check(f"the upgrade to {NEXT}", time.monotonic() - started)
        to_next = timeline.samples[next_from:]
        rollouts[f"the upgrade to {NEXT}"] = rollout_against_plan(
            planned_next, to_next, NEXT, timeline.at(began)
        )

        root_down = kill_root(kind_cluster, ns, timeline)
        steps.append((ROOT_KILLED, *root_down))
        checks.check(ROOT_KILLED, root_down[1] - root_down[0])
        status, _ = front_api.request("GET", widgets_path(vw_path))
        assert status == 200, f"the root's virtual-workspace URL through the front-proxy: {status}"
        assert widgets_at(front_api, vw_path) == [f"w-{token}"], "the Widget kept"

        for switch in switch_root_server(kind_cluster, ns, timeline):
            steps.append(switch)
            checks.check(switch[0], switch[2] - switch[1])
        assert widgets_at(front_api, vw_path) == [f"w-{token}"], "the Widget kept"
        reads = reader.reads()
    except BaseException:
        timeline.stop()
        found = reader.reads() if reader is not None else []
        stack.close()
        print(timeline.table(read_cell(timeline, found, keys) if keys else None))
        print(describe_failure(kind_cluster, ns))
        raise
    timeline.stop()
    stack.close()
    table = timeline.table(read_cell(timeline, reads, keys))
    print(f"\nTimeline (pods: kcp version / R ready / F {FLAG}):\n{table}")
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
    for name, rows in rollouts.items():
        table_of_rows = rollout_table(rows)
        print(f"\nRollouts of {name} against the plan (seconds after the bump):\n{table_of_rows}")
    figures = front_proxy_figures(reads, steps, keys, rollouts)
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
    assert all(r.ok for r in reads if r.at < steps[0][1]), "reads failed before the upgrade"
    for key in keys:
        last = [r for r in reads if r.key == key][-3:]
        assert last, key
        assert all(r.ok for r in last), f"reads of {key} failing at the end: {last}"
    by_step = {figure["step"]: figure for figure in figures}
    root_killed = by_step[ROOT_KILLED]
    log(
        "with both root pods gone, reads through the front-proxy of the workspace on shard-1: "
        f"{root_killed['shard-1']}; on the root: {root_killed['root']}"
    )
    assert root_killed["root"]["failed"] > 0, "the root's workspace read while no root pod ran"
    _, killed_at, back_at = next(step for step in steps if step[0] == ROOT_KILLED)
    refused = failures(reads, "shard-1", killed_at, back_at)
    log(f"reads of shard-1's workspace that failed with the root down: {refused}")
    # kcp answered every read (no HTTP error). One read without an answer (status 0: the
    # connection to the front-proxy's Service) was seen once in 2026-12-07's runs on the loaded
    # machine as the root came back; more than one is a regression too.
    assert not [r for r in refused if r.status != 0], (
        f"kcp {NEXT} serves a workspace on shard-1 through the front-proxy while the root shard "
        f"is down (seen on every run so far): an error answer is a regression: {refused}"
    )
    assert len(refused) <= 1, f"reads of shard-1 unanswered with the root down: {refused}"
    assert_plan_was_the_upgrade(planned, upgrade, OLD, NEW)
    assert_plan_was_the_upgrade(planned_next, to_next, NEW, NEXT)
    assert_metrics_moved(initial, before_kill, after_upgrade, upgrade)
