"""What the operator's watches miss: children deleted while it cannot reach the API server,
and a Deployment deleted and made again by hand.

The gap: the kwok cluster's kube-apiserver is killed, the root Shard's Deployment and Service
are deleted straight from etcd (no API server sees it, so no watch will ever deliver a
DELETED event for them), and the API server is started again. kopf's watches then get a 410
Gone for their old resourceVersion and list again: the listing re-sends what exists and
nothing for what vanished. The operator notices the listing again, lists every kind itself,
drops what is gone from its store and makes the children again, and never writes a status
that says Ready while the Deployment does not exist. How soon is measured from the API
server's process start to the new objects' creationTimestamp (one-second resolution), and
from the test's first answer from the API server to seeing them.

Prints the figures and writes them to bench/results/watch-gap.json.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from testkit.kube import KubectlError
from testkit.kwok import KUBE_APISERVER, KwokControlPlane
from testkit.operator_process import RESYNC_WINDOW, OperatorProcess
from testkit.tools import REPO, log
from testkit.wait import wait_for

from .capture import uncaptured
from .shards import Kubectl, apply, get, patch_spec, shard, wait_ready
from .test_apiserver_outage import api_serving, restore

pytestmark = pytest.mark.e2e

VERSION = "0.34.0"
RESULTS = REPO / "bench" / "results" / "watch-gap.json"
GONE = ("deployment", "service")
RELISTED = "listed again"
"""What the operator logs when it notices a watch that listed again."""
BACK_TIMEOUT = 180.0


@dataclass
class Gap:
    """What was seen from the API server's return (``since``, monotonic): when each child was
    seen made again, and every status the Shard had while its Deployment did not exist."""

    since: float = 0.0
    made_again: dict[str, float] = field(default_factory=dict)
    statuses_without_deployment: list[dict[str, Any]] = field(default_factory=list)

    def observe(self, kubectl: Kubectl, ns: str) -> None:
        now = round(time.monotonic() - self.since, 1)
        found = json.loads(
            kubectl(
                "get",
                "-n",
                ns,
                "shard/root",
                *(f"{kind}/root-kcp" for kind in GONE),
                "--ignore-not-found",
                "-o",
                "json",
            )
        )["items"]
        kinds = {item["kind"].lower(): item for item in found}
        for kind in GONE:
            if kind in kinds:
                self.made_again.setdefault(kind, now)
        if "deployment" not in kinds:
            status = copy.deepcopy(kinds["shard"].get("status") or {})
            status["resourceVersion"] = kinds["shard"]["metadata"]["resourceVersion"]
            self.statuses_without_deployment.append(status)


def started_at(pid: int) -> float:
    """When process ``pid`` started, in seconds since the epoch."""
    boot = next(
        float(line.split()[1])
        for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime ")
    )
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def created_at(obj: dict[str, Any]) -> float:
    stamp = obj["metadata"]["creationTimestamp"].replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(stamp).timestamp()


def uid(kubectl: Kubectl, ns: str, kind: str) -> str:
    return str(get(kubectl, ns, kind, "root-kcp")["metadata"]["uid"])


def record(figures: dict[str, Any], config: pytest.Config) -> None:
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[figures["case"]] = figures
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    with uncaptured(config):
        for key, value in figures.items():
            log(f"measured (watch gap, {figures['case']}): {key}: {value}")


@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused-across-the-gap"])
def test_children_deleted_while_the_api_server_is_down_are_made_again(
    paused: bool,
    kwok_control_plane: KwokControlPlane,
    operator_process: OperatorProcess,
    kubectl: Kubectl,
    namespace: str,
    pytestconfig: pytest.Config,
) -> None:
    """Running, the operator makes the children again before the test's first look; paused
    (SIGSTOP) from before the API server is killed until the test has seen both gone and the
    Shard's status still saying Ready from before, its reconnecting watches list again when
    it resumes, and every status it writes is watched."""
    plane = kwok_control_plane
    apply(kubectl, namespace, shard("root", VERSION))
    wait_ready(kubectl, namespace, "root", VERSION)
    before = {kind: uid(kubectl, namespace, kind) for kind in GONE}
    ready_rv = get(kubectl, namespace, "shard", "root")["metadata"]["resourceVersion"]
    case = "operator paused across the gap" if paused else "operator running"
    figures: dict[str, Any] = {"case": f"children deleted from etcd, {case}"}
    log_offset = operator_process.log_path.stat().st_size
    gap = Gap()

    def made_again() -> bool:
        with contextlib.suppress(KubectlError):
            gap.observe(kubectl, namespace)
        return len(gap.made_again) == len(GONE)

    try:
        if paused:
            operator_process.pause()
        try:
            started = time.monotonic()
            plane.kill(KUBE_APISERVER)
            deleted = [
                plane.etcd_delete(f"/registry/deployments/{namespace}/root-kcp"),
                plane.etcd_delete(f"/registry/services/specs/{namespace}/root-kcp"),
            ]
            assert deleted == [1, 1], "the Deployment and the Service were not in etcd"
            plane.start_stopped()
            wait_for(lambda: api_serving(kubectl), 120, "the API server to serve again", 0.2)
            gap.since = time.monotonic()
            apiserver = plane.pid(KUBE_APISERVER)
            assert apiserver is not None
            figures["outage_s"] = round(gap.since - started, 1)
            if paused:
                assert not made_again(), "made again while the operator was paused"
        finally:
            operator_process.resume()
        resumed = time.monotonic()
        wait_for(made_again, BACK_TIMEOUT, "the Deployment and the Service made again", 0.2)
        figures["answering_to_seen_made_again_s"] = gap.made_again
        if paused:
            figures["resumed_to_seen_made_again_s"] = round(time.monotonic() - resumed, 1)
        made = {kind: get(kubectl, namespace, kind, "root-kcp") for kind in GONE}
        figures["apiserver_start_to_made_again_s"] = {
            kind: round(created_at(obj) - started_at(apiserver), 1) for kind, obj in made.items()
        }
        restore(plane)
        wait_ready(kubectl, namespace, "root", VERSION, timeout=BACK_TIMEOUT)
        figures["answering_to_ready_s"] = round(time.monotonic() - gap.since, 1)
    finally:
        restore(plane)
    log_text = operator_process.log_path.read_bytes()[log_offset:].decode(errors="replace")
    figures["relists_noticed"] = [line for line in log_text.splitlines() if RELISTED in line]
    written = [s for s in gap.statuses_without_deployment if s["resourceVersion"] != ready_rv]
    figures["statuses_seen_without_deployment"] = sorted(
        {f"{s.get('phase')} ({'written after' if s in written else 'before'} the gap)"
         for s in gap.statuses_without_deployment}
    )  # fmt: skip
    record(figures, pytestconfig)
    assert figures["relists_noticed"], "the operator did not notice its watches listing again"
    if paused:
        assert gap.statuses_without_deployment, "the gap was not seen"
        assert figures["resumed_to_seen_made_again_s"] <= RESYNC_WINDOW
    for kind in GONE:
        assert uid(kubectl, namespace, kind) != before[kind], f"{kind} is not a new one"
        took = figures["apiserver_start_to_made_again_s"][kind]
        assert paused or took <= RESYNC_WINDOW, f"{kind} made again {took}s after the return"
    said_ready = [s for s in written if says_ready(s)]
    assert not said_ready, f"Ready written while the Deployment did not exist: {said_ready}"


def says_ready(status: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def test_a_deployment_deleted_and_made_again_by_hand_is_the_one_the_operator_manages(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    """Deleted and created again from its own manifest while the operator is paused: it gets
    both events at once (kopf orders the events of one object, not of two) and goes on
    managing the new Deployment: a spec change lands in it, and it is not replaced."""
    apply(kubectl, namespace, shard("root", VERSION))
    wait_ready(kubectl, namespace, "root", VERSION)
    live = get(kubectl, namespace, "deployment", "root-kcp")
    again = {key: live[key] for key in ("apiVersion", "kind", "spec")}
    again["metadata"] = {
        key: live["metadata"][key]
        for key in ("name", "labels", "annotations", "ownerReferences")
        if key in live["metadata"]
    }
    operator_process.pause()
    try:
        kubectl("delete", "-n", namespace, "deployment", "root-kcp", "--wait=true")
        kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(again))
    finally:
        operator_process.resume()
    made_by_hand = uid(kubectl, namespace, "deployment")
    assert made_by_hand != live["metadata"]["uid"]
    patch_spec(kubectl, namespace, "root", {"extraArgs": ["--v=3"]})

    def changed() -> bool:
        container = get(kubectl, namespace, "deployment", "root-kcp")["spec"]["template"]["spec"]
        return "--v=3" in container["containers"][0]["args"]

    wait_for(changed, RESYNC_WINDOW, "the spec change in the Deployment made by hand")
    wait_ready(kubectl, namespace, "root", VERSION)
    assert uid(kubectl, namespace, "deployment") == made_by_hand
