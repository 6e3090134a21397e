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

Both versions still need ``--root-shard-kubeconfig-file``, so the flag stays on the non-root
shard throughout: no kcp release that ignores it can be built here (see README, Known
limitations), and dropping it from a kcp that needs it would break the shard.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.kube import Cluster, KubectlError, condition, create_namespace, shard_ready
from testkit.operator_process import RESYNC_WINDOW
from testkit.tools import HACK, log, run_visible
from testkit.wait import wait_for
from tests.e2e.pki import Pki, shard_secrets

from .kind import (
    OPERATOR_NAMESPACE,
    describe_failure,
    image_names,
    pod_ready,
    readyz_via_service,
    shard_spec,
)

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

OLD, NEW = "0.27.1", "0.28.0"
SHARDS = ("root", "shard-1")
REPLICAS = 2
ROLL_TIMEOUT = 900
REFUSAL_WATCH = RESYNC_WINDOW
"""Seconds the timeline keeps sampling after the refusal: at least one resync pass of each
Shard, and long enough for the Deployment controller to have started a pod on the refused
version, had the operator asked for one."""
OPERATOR_SELECTOR = "app.kubernetes.io/name=kcp-shard-operator"
FLAG = "--root-shard-kubeconfig-file"

ETCD = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: etcd}
spec:
  replicas: 1
  selector: {matchLabels: {app: etcd}}
  template:
    metadata: {labels: {app: etcd}}
    spec:
      containers:
        - name: etcd
          image: registry.k8s.io/etcd:3.6.5-0
          imagePullPolicy: Never
          command: [/usr/local/bin/etcd, --data-dir=/var/lib/etcd, --name=etcd,
                    --listen-client-urls=http://0.0.0.0:2379, --advertise-client-urls=http://etcd:2379]
          ports: [{containerPort: 2379}]
          volumeMounts: [{name: data, mountPath: /var/lib/etcd}]
      volumes: [{name: data, emptyDir: {}}]
---
apiVersion: v1
kind: Service
metadata: {name: etcd}
spec:
  selector: {app: etcd}
  ports: [{port: 2379, targetPort: 2379}]
"""


@dataclass(frozen=True)
class PodState:
    name: str
    version: str
    ready: bool
    flag: bool


@dataclass(frozen=True)
class Sample:
    at: float
    pods: dict[str, list[PodState]]
    disruptions_allowed: dict[str, int | None]
    status_version: dict[str, str | None]
    readyz: dict[str, bool]
    terminating: frozenset[str] = frozenset()


@dataclass
class Timeline:
    """Samples of the shards' pods, PDBs, status and /readyz, taken by a background thread."""

    cluster: Cluster
    namespace: str
    started: float = field(default_factory=time.monotonic)
    samples: list[Sample] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def mark(self, what: str) -> None:
        self.events.append((time.monotonic() - self.started, what))
        log(what)

    def _get(self, *args: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(
            self.cluster.kubectl("get", *args, "-n", self.namespace, "-o", "json", timeout=20)
        )
        return result

    def sample(self) -> Sample:
        pods: dict[str, list[PodState]] = {s: [] for s in SHARDS}
        terminating = set()
        for pod in self._get("pods", "-l", "app.kubernetes.io/name=kcp")["items"]:
            shard = pod["metadata"]["labels"]["app.kubernetes.io/instance"]
            if pod["metadata"].get("deletionTimestamp"):
                terminating.add(pod["metadata"]["name"])
                continue
            container = pod["spec"]["containers"][0]
            pods[shard].append(
                PodState(
                    name=pod["metadata"]["name"][-5:],
                    version=container["image"].rsplit(":v", 1)[-1],
                    ready=pod_ready(pod),
                    flag=any(arg.startswith(FLAG) for arg in container.get("args", [])),
                )
            )
        pdbs = {
            p["metadata"]["name"].removesuffix("-kcp"): p.get("status", {}).get(
                "disruptionsAllowed"
            )
            for p in self._get("pdb")["items"]
        }
        shards = {s["metadata"]["name"]: s for s in self._get("shards")["items"]}
        readyz: dict[str, bool] = {}
        for shard in SHARDS:
            try:
                readyz[shard] = readyz_via_service(self.cluster, self.namespace, shard) == "ok"
            except KubectlError:
                readyz[shard] = False
        return Sample(
            at=time.monotonic() - self.started,
            pods=pods,
            disruptions_allowed={s: pdbs.get(s) for s in SHARDS},
            status_version={s: shards.get(s, {}).get("status", {}).get("version") for s in SHARDS},
            readyz=readyz,
            terminating=frozenset(terminating),
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.sample())
            except (KubectlError, KeyError, ValueError) as err:
                log(f"timeline sample failed: {err}")
            self._stop.wait(2)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def table(self) -> str:
        """The timeline as a table: one row per sample where something changed."""
        header = f"{'t[s]':>6}  " + "  ".join(
            f"{s + ' pods (version/ready/flag)':<44} {'PDB':>3} {'status':>7} {'readyz':>6}"
            for s in SHARDS
        )
        rows, last = [header, "-" * len(header)], ""
        events = list(self.events)
        for sample in self.samples:
            while events and events[0][0] <= sample.at:
                at, what = events.pop(0)
                rows.append(f"{at:6.0f}  >> {what}")
            cells = []
            for s in SHARDS:
                pods = " ".join(
                    f"{p.version}/{'R' if p.ready else '-'}/{'F' if p.flag else '-'}"
                    for p in sorted(sample.pods[s], key=lambda p: p.name)
                )
                allowed = sample.disruptions_allowed[s]
                readyz = "ok" if sample.readyz[s] else "FAIL"
                cells.append(
                    f"{pods:<44} {'-' if allowed is None else allowed:>3} "
                    f"{sample.status_version[s] or '-':>7} {readyz:>6}"
                )
            line = "  ".join(cells)
            if line != last:
                rows.append(f"{sample.at:6.0f}  {line}")
                last = line
        rows.extend(f"{at:6.0f}  >> {what}" for at, what in events)
        return "\n".join(rows)


def rolled(sample: Sample, shard: str, version: str) -> bool:
    pods = sample.pods[shard]
    return len(pods) == REPLICAS and all(p.version == version and p.ready for p in pods)


def first(samples: list[Sample], predicate: Any) -> float | None:
    return next((s.at for s in samples if predicate(s)), None)


def longest_outage(samples: list[Sample], shard: str) -> float:
    """The longest time /readyz through the shard's Service kept failing."""
    longest, since = 0.0, None
    for sample in samples:
        if not sample.readyz[shard]:
            since = sample.at if since is None else since
            longest = max(longest, sample.at - since)
        else:
            since = None
    return longest


def longest_pod_start(samples: list[Sample]) -> float:
    """The longest time a pod took from its first sample to its first Ready sample."""
    seen: dict[str, float] = {}
    started: dict[str, float] = {}
    for sample in samples:
        for pods in sample.pods.values():
            for pod in pods:
                seen.setdefault(pod.name, sample.at)
                if pod.ready:
                    started.setdefault(pod.name, sample.at - seen[pod.name])
    return max(started.values(), default=0.0)


def longest_pod_stop(samples: list[Sample]) -> float:
    """The longest time a pod took from its deletion to gone."""
    since: dict[str, float] = {}
    longest = 0.0
    for sample in samples:
        for name in sample.terminating:
            since.setdefault(name, sample.at)
        for name in [n for n in since if n not in sample.terminating]:
            longest = max(longest, sample.at - since.pop(name))
    return longest


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


@pytest.fixture
def upgrade_namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    run_visible([str(HACK / "image.sh"), "kcp-upgrade"])
    name = kind_cluster.kubectl("config", "view", "-o", "jsonpath={.contexts[0].context.cluster}")
    run_visible([str(HACK / "kind.sh"), "load", name.removeprefix("kind-"), image_names()[3]])
    namespace = create_namespace(kind_cluster, "kcp-upgrade")
    yield namespace
    kind_cluster.kubectl(
        "delete", "shards", "--all", "-n", namespace, "--timeout=120s", timeout=150
    )
    kind_cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def shard_object(cluster: Cluster, namespace: str, shard: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(
        cluster.kubectl("get", "shard", shard, "-n", namespace, "-o", "json")
    )
    return obj


def wait_version(cluster: Cluster, namespace: str, version: str, timeout: float) -> None:
    def done() -> bool:
        return all(shard_ready(shard_object(cluster, namespace, s), version) for s in SHARDS)

    wait_for(done, timeout, f"both Shards Ready at kcp {version}", interval=3)


def bump(cluster: Cluster, namespace: str, version: str) -> None:
    for shard in SHARDS:
        patch = {"spec": {"version": version, "image": {"tag": f"v{version}"}}}
        cluster.kubectl(
            "patch", "shard", shard, "-n", namespace, "--type=merge", "-p", json.dumps(patch)
        )


def condition_of(cluster: Cluster, namespace: str, shard: str, type_: str) -> dict[str, Any]:
    return condition(shard_object(cluster, namespace, shard), type_)


def wait_refused(cluster: Cluster, namespace: str, timeout: float) -> None:
    def done() -> bool:
        return all(
            condition_of(cluster, namespace, shard, "Degraded").get("reason") == "DowngradeRefused"
            for shard in SHARDS
        )

    wait_for(done, timeout, "both Shards reporting DowngradeRefused", interval=2)


def template_version(cluster: Cluster, namespace: str, shard: str) -> str:
    return cluster.kubectl(
        "get", "deployment", f"{shard}-kcp", "-n", namespace, "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ).rsplit(":v", 1)[-1]  # fmt: skip


def test_rolling_upgrade_and_rollback_on_real_pods(
    kind_cluster: Cluster, upgrade_namespace: str, tmp_path: Path
) -> None:
    ns, kubectl = upgrade_namespace, kind_cluster.kubectl
    kubectl("apply", "-n", ns, "-f", "-", stdin=ETCD)
    kubectl("rollout", "status", "-n", ns, "deployment/etcd", "--timeout=120s", timeout=150)
    pki = Pki.create(tmp_path / "pki")
    secrets = shard_secrets(pki, ns, "root", ["shard-1"])
    kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(secrets))
    shards = []
    for name in SHARDS:
        obj = shard_spec(name, OLD, f"v{OLD}", root=None if name == "root" else "root")
        obj["spec"]["replicas"] = REPLICAS
        obj["spec"]["etcd"] = {"endpoints": [f"http://etcd.{ns}.svc:2379"], "prefix": f"/{name}"}
        shards.append(obj)
    timeline = Timeline(kind_cluster, ns)
    try:
        kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(shards))
        timeline.start()
        timeline.mark(f"applied root and shard-1 at kcp {OLD}, {REPLICAS} replicas each")
        wait_version(kind_cluster, ns, OLD, ROLL_TIMEOUT)
        timeline.mark(f"both Ready at {OLD}")
        upgrade_from = len(timeline.samples)

        bump(kind_cluster, ns, NEW)
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
        kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_SELECTOR)
        timeline.mark("operator pod deleted mid-rollout")
        wait_version(kind_cluster, ns, NEW, ROLL_TIMEOUT)
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
        refusal_from = len(timeline.samples)

        bump(kind_cluster, ns, OLD)
        timeline.mark(f"bump down: both Shards set to {OLD} (an older minor)")
        wait_refused(kind_cluster, ns, 120)
        timeline.mark("both Shards report DowngradeRefused")
        time.sleep(REFUSAL_WATCH)
        for shard in SHARDS:
            assert template_version(kind_cluster, ns, shard) == NEW
            ready = condition_of(kind_cluster, ns, shard, "Ready")
            assert ready.get("status") == "True", ready
            message = condition_of(kind_cluster, ns, shard, "Degraded").get("message", "")
            assert f"the shard stays at kcp {NEW}" in message, message

        bump(kind_cluster, ns, NEW)
        timeline.mark(f"spec set back to {NEW}")
        wait_version(kind_cluster, ns, NEW, 120)
        wait_for(
            lambda: all(
                condition_of(kind_cluster, ns, s, "Degraded").get("status") == "False"
                for s in SHARDS
            ),
            120,
            "Degraded cleared on both Shards",
            interval=2,
        )
        timeline.mark(f"both Ready at {NEW} again, Degraded cleared")
        time.sleep(4)
        after = timeline.samples[refusal_from:]
    except BaseException:
        timeline.stop()
        print(timeline.table())
        print(describe_failure(kind_cluster, ns))
        raise
    timeline.stop()
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
    assert after, "no samples after the bump down"
    for sample in after:
        for shard in SHARDS:
            assert rolled(sample, shard, NEW), f"{shard} at {sample.at:.0f}s: {sample.pods[shard]}"
            assert sample.readyz[shard], f"{shard} /readyz failed at {sample.at:.0f}s"
            assert sample.status_version[shard] == NEW, sample
    assert all(p.flag for s in timeline.samples for p in s.pods["shard-1"])
    assert not any(p.flag for s in timeline.samples for p in s.pods["root"])
