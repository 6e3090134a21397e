"""What the kind upgrade tests sample while an installation rolls: a timeline of the pods of
the shards (and of its cache server, virtual-workspace servers and front-proxy, where it has
them), PDBs,
``status.version``, ``/readyz`` and the operator's rollouts-in-progress gauge, a faster
``/readyz`` probe per Service, and the figures read off them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from testkit.kube import Cluster, KubectlError
from testkit.tools import log

from .kind import operator_metrics, pod_ready, readyz_via_service

SHARDS = ("root", "shard-1")
CACHE = "cache"
FRONT_PROXY = "front-proxy"
INSTALLATION = (CACHE, *SHARDS, FRONT_PROXY)
"""The components of a whole installation, in the order they roll."""
SERVER_SUFFIX = "-vw"
SERVERS = tuple(f"{shard}{SERVER_SUFFIX}" for shard in SHARDS)
"""The VirtualWorkspaceServer of each shard (named as its shard), as a component."""
WITH_SERVERS = (CACHE, "root", "root-vw", "shard-1", "shard-1-vw", FRONT_PROXY)
"""A whole installation whose shards run their virtual workspaces in standalone servers, in
the order of ``kcp-shard-operator plan``."""
REPLICAS = 2
FLAG = "--root-shard-kubeconfig-file"
ROLLOUTS_IN_PROGRESS = "kcp_shard_operator_rollouts_in_progress"
KINDS = {CACHE: "cacheservers", FRONT_PROXY: "frontproxies"}
"""The kind of each component that is not a Shard (its object is the only one of it)."""


def component_of(labels: dict[str, str]) -> str:
    """The component a pod of the installation belongs to, by its labels."""
    app = labels.get("app.kubernetes.io/name")
    if app == "kcp-cache-server":
        return CACHE
    if app == "kcp-front-proxy":
        return FRONT_PROXY
    instance = labels.get("app.kubernetes.io/instance", "")
    if app == "kcp-virtual-workspaces":
        return f"{instance}{SERVER_SUFFIX}"
    return instance


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
    rollouts_in_progress: float | None = None
    """The operator's gauge through its metrics Service (None: no answer, as while its pod
    is replaced)."""


@dataclass
class Timeline:
    """Samples of the components' pods, PDBs, status and the shards' /readyz, taken by a
    background thread. ``epoch`` is the wall-clock time of ``started``."""

    cluster: Cluster
    namespace: str
    components: tuple[str, ...] = SHARDS
    started: float = field(default_factory=time.monotonic)
    epoch: float = field(default_factory=time.time)
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

    def at(self, wall_clock: float) -> float:
        """A wall-clock time as seconds on this timeline."""
        return wall_clock - self.epoch

    def sample(self) -> Sample:
        # The statuses before the pods: a status.version read after the pods could be newer
        # than them (a surge pod's rollout finishing in between) and fail the honesty check.
        versions = {
            s["metadata"]["name"]: s.get("status", {}).get("version")
            for s in self._get("shards")["items"]
        }
        for component, kind in KINDS.items():
            if component in self.components:
                items = self._get(kind)["items"]
                versions[component] = items[0].get("status", {}).get("version") if items else None
        if any(component in SERVERS for component in self.components):
            for server in self._get("virtualworkspaceservers")["items"]:
                name = f"{server['metadata']['name']}{SERVER_SUFFIX}"
                versions[name] = server.get("status", {}).get("version")
        pods: dict[str, list[PodState]] = {c: [] for c in self.components}
        terminating = set()
        for pod in self._get("pods", "-l", "app.kubernetes.io/part-of=kcp")["items"]:
            component = component_of(pod["metadata"]["labels"])
            if component not in pods:
                continue
            if pod["metadata"].get("deletionTimestamp"):
                terminating.add(pod["metadata"]["name"])
                continue
            container = pod["spec"]["containers"][0]
            pods[component].append(
                PodState(
                    name=pod["metadata"]["name"][-5:],
                    version=container["image"].rsplit(":v", 1)[-1],
                    ready=pod_ready(pod),
                    flag=any(arg.startswith(FLAG) for arg in container.get("args", [])),
                )
            )
        pdbs = {
            component_of(p["metadata"]["labels"]): p.get("status", {}).get("disruptionsAllowed")
            for p in self._get("pdb", "-l", "app.kubernetes.io/part-of=kcp")["items"]
        }
        readyz: dict[str, bool] = {}
        for shard in SHARDS:
            try:
                readyz[shard] = readyz_via_service(self.cluster, self.namespace, shard) == "ok"
            except KubectlError:
                readyz[shard] = False
        try:
            gauge = operator_metrics(self.cluster).value(ROLLOUTS_IN_PROGRESS)
        except (KubectlError, ValueError):
            gauge = None
        return Sample(
            at=time.monotonic() - self.started,
            rollouts_in_progress=gauge,
            pods=pods,
            disruptions_allowed={c: pdbs.get(c) for c in self.components},
            status_version={c: versions.get(c) for c in self.components},
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

    def table(self, reads: Callable[[float, float], str] | None = None) -> str:
        """The timeline as a table: one row per sample where something changed. ``reads``
        gives a cell for what happened between two times (the front-proxy's reads)."""
        header = (
            f"{'t[s]':>6}  "
            + "  ".join(
                f"{c + ' pods':<{_width(c)}} {'PDB':>3} {'status':>7}"
                + (f" {'readyz':>6}" if c in SHARDS else "")
                for c in self.components
            )
            + f"  {'rolling':>7}"
            + (f"  {'front-proxy reads':<24}" if reads else "")
        )
        rows, last, before = [header, "-" * len(header)], "", 0.0
        events = list(self.events)
        for sample in self.samples:
            while events and events[0][0] <= sample.at:
                at, what = events.pop(0)
                rows.append(f"{at:6.0f}  >> {what}")
            cells = []
            for c in self.components:
                pods = " ".join(
                    f"{p.version}/{'R' if p.ready else '-'}/{'F' if p.flag else '-'}"
                    for p in sorted(sample.pods[c], key=lambda p: p.name)
                )
                allowed = sample.disruptions_allowed[c]
                cell = (
                    f"{pods:<{_width(c)}} {'-' if allowed is None else allowed:>3} "
                    f"{sample.status_version[c] or '-':>7}"
                )
                if c in SHARDS:
                    cell += f" {'ok' if sample.readyz[c] else 'FAIL':>6}"
                cells.append(cell)
            gauge = sample.rollouts_in_progress
            cells.append(f"{'-' if gauge is None else int(gauge):>7}")
            if reads is not None:
                cells.append(f"{reads(before, sample.at):<24}")
            before = sample.at
            line = "  ".join(cells)
            if line != last:
                rows.append(f"{sample.at:6.0f}  {line}")
                last = line
        rows.extend(f"{at:6.0f}  >> {what}" for at, what in events)
        return "\n".join(rows)


def _width(component: str) -> int:
    """Room for the pods of ``component`` (version/ready/flag each, with a surge pod; a
    shard's ``Recreate`` may show two old and two new)."""
    return 22 if component == CACHE else 32 if component in SERVERS else 44


@dataclass(frozen=True)
class Reading:
    at: float
    answer: str
    """``ok``, kcp's other answer, or the first line of kubectl's error."""

    @property
    def ok(self) -> bool:
        return self.answer == "ok"


@dataclass
class ReadyzProbe:
    """``/readyz`` through each shard's Service every ``interval`` seconds, one thread per
    shard (the timeline's own readings are several seconds apart)."""

    cluster: Cluster
    namespace: str
    started: float
    interval: float = 1.0
    readings: dict[str, list[Reading]] = field(default_factory=lambda: {s: [] for s in SHARDS})
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def _read(self, shard: str) -> str:
        try:
            return readyz_via_service(self.cluster, self.namespace, shard)
        except KubectlError as err:
            return (str(err).strip().splitlines() or ["kubectl failed"])[-1]

    def _run(self, shard: str) -> None:
        while not self._stop.is_set():
            begun = time.monotonic()
            answer = self._read(shard)
            self.readings[shard].append(Reading(begun - self.started, answer))
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - begun)))

    def start(self) -> None:
        for shard in SHARDS:
            thread = threading.Thread(target=self._run, args=(shard,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def between(self, shard: str, start: float, end: float) -> list[Reading]:
        return [r for r in self.readings[shard] if start <= r.at <= end]


def rolled(sample: Sample, component: str, version: str) -> bool:
    """Every replica of ``component`` Ready at ``version`` (the cache server has one)."""
    pods = sample.pods[component]
    replicas = 1 if component == CACHE else REPLICAS
    return len(pods) == replicas and all(p.version == version and p.ready for p in pods)


def converged(sample: Sample, shard: str, version: str) -> bool:
    """Every replica Ready at ``version``, ``status.version`` says so and no old pod is left
    terminating."""
    return (
        rolled(sample, shard, version)
        and sample.status_version[shard] == version
        and not any(name.startswith(f"{shard}-kcp-") for name in sample.terminating)
    )


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
