"""The kwok cluster's API server stopped, or paused, while a spec change is pending.

The operator runs as a local process. The change is made pending deterministically: the
operator is paused (SIGSTOP) before the Shard's spec is patched and resumed (SIGCONT) only once
the API server is down. A stopped process writes nothing, so the outage starts with the Shard
at generation N+1 and observedGeneration N whatever the machine's load; the resumed operator
then meets the outage with the change's watch event waiting in its socket (or, had it not
arrived, learns the change when its watches list again).

Two faults: the API server SIGKILLed and started again the way kwokctl does it (``kwokctl stop
cluster`` kills each component and removes its pid file, ``kwokctl start cluster`` starts every
component that is gone), and the API server paused with SIGSTOP and resumed with SIGCONT
(connections stay open and requests hang, as on a frozen control-plane node). After either,
the Shard reaches observedGeneration N+1 with the change in its Deployment and becomes Ready;
the Shard and its children keep their UIDs and no object is added or lost; the operator is the
same running process; its log has no traceback and no credential.

kwok's kube-controller-manager and kube-scheduler exit when they cannot renew their leader
lease (about 10 s into either outage), and nothing starts them again. The components kwokctl
reports Stopped are recorded when the fault ends and once the status is written, with what
``hack/cluster.sh status`` says; those still stopped are then started with ``kwokctl start
cluster`` (what ``hack/cluster.sh up`` does for an existing cluster) before the wait for Ready,
which needs the Deployment controller and the scheduler. After the kill they were already
started again with the API server by the same command.

Prints the figures and writes them to bench/results/apiserver-outage.json, one entry per fault.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from testkit.kube import KubectlError, credential_strings, shard_ready
from testkit.kwok import KUBE_APISERVER, KUBE_SCHEDULER, KwokControlPlane
from testkit.operator_process import OperatorProcess
from testkit.tools import REPO, log
from testkit.wait import wait_for

from .capture import uncaptured
from .shards import Kubectl, apply, get, patch_spec, shard, wait_ready

pytestmark = pytest.mark.e2e

RESULTS = REPO / "bench" / "results" / "apiserver-outage.json"
OWNED = "shards,deployments,services,poddisruptionbudgets"
OLD, NEW = "0.33.0", "0.34.0"
CONVERGE_TIMEOUT = 180.0


@dataclass(frozen=True)
class Fault:
    name: str
    seconds: float
    begin: Callable[[KwokControlPlane], None]
    end: Callable[[KwokControlPlane], None]


FAULTS = [
    Fault(
        "stopped",
        20.0,
        begin=lambda plane: plane.kill(KUBE_APISERVER),
        end=KwokControlPlane.start_stopped,
    ),
    Fault(
        "paused",
        30.0,
        begin=lambda plane: plane.send_signal(KUBE_APISERVER, signal.SIGSTOP),
        end=lambda plane: plane.send_signal(KUBE_APISERVER, signal.SIGCONT),
    ),
]


def api_serving(kubectl: Kubectl) -> bool:
    try:
        return bool(kubectl("get", "--raw", "/readyz", "--request-timeout=2s", timeout=10) == "ok")
    except (KubectlError, subprocess.TimeoutExpired):
        return False


def restore(plane: KwokControlPlane) -> list[str]:
    """Resume a paused API server, start every component kwokctl reports Stopped; return the
    names of those started."""
    if plane.pid(KUBE_APISERVER) is not None:
        plane.send_signal(KUBE_APISERVER, signal.SIGCONT)
    stopped = sorted(name for name, status in plane.components().items() if status == "Stopped")
    if stopped:
        plane.start_stopped()
    return stopped


def stopped_components(plane: KwokControlPlane) -> dict[str, str]:
    """The components kwokctl reports Stopped, each with the last line of its log (why it
    ended, read before ``kwokctl start cluster`` truncates the log)."""
    return {
        name: " ".join(plane.log_tail(name))[:300]
        for name, status in plane.components().items()
        if status == "Stopped"
    }


def owned_uids(kubectl: Kubectl, ns: str) -> dict[str, str]:
    items = json.loads(kubectl("get", OWNED, "-n", ns, "-o", "json"))["items"]
    return {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["uid"] for o in items}


@dataclass
class Timeline:
    """Seconds from ``since`` (the API server back) until the Deployment had kcp NEW, the
    Shard's status observed ``generation`` and the Shard was Ready at NEW; the phases the
    Shard's status went through meanwhile, each with when it was first seen."""

    since: float
    generation: int
    applied: float | None = None
    written: float | None = None
    ready: float | None = None
    phases: list[str] = field(default_factory=list)

    def wait(self, kubectl: Kubectl, ns: str, done: Callable[[Timeline], bool]) -> None:
        deadline = self.since + CONVERGE_TIMEOUT
        while not done(self):
            assert time.monotonic() < deadline, f"after {CONVERGE_TIMEOUT:g}s: {self}"
            with contextlib.suppress(KubectlError):
                self._observe(kubectl, ns)
            time.sleep(0.2)

    def _observe(self, kubectl: Kubectl, ns: str) -> None:
        found = json.loads(
            kubectl("get", "-n", ns, "shard/root", "deployment/root-kcp", "-o", "json")
        )["items"]
        now = round(time.monotonic() - self.since, 1)
        status = found[0].get("status") or {}
        phase = f"generation {status.get('observedGeneration')} {status.get('phase')}"
        if not self.phases or not self.phases[-1].endswith(f": {phase}"):
            self.phases.append(f"{now}s: {phase}")
        image = found[1]["spec"]["template"]["spec"]["containers"][0]["image"]
        if self.applied is None and image.endswith(f":v{NEW}"):
            self.applied = now
        if self.written is None and status.get("observedGeneration") == self.generation:
            self.written = now
        if self.ready is None and shard_ready(found[0], NEW):
            self.ready = now


def failure_lines(log_text: str) -> dict[str, Any]:
    """What an operator log slice says about failed requests: the operator's own lines for a
    failed write and a stopped pass (distinct ones), and how many retries kopf logged."""
    lines = log_text.splitlines()
    own = [line for line in lines if line.startswith(("could not write", "pass over Shard"))]
    return {
        "passes_stopped": sum(line.startswith("pass over Shard") for line in own),
        "writes_failed": sum(line.startswith("could not write") for line in own),
        "kopf_request_retries": sum("failed; will retry" in line for line in lines),
        "distinct_lines": list(dict.fromkeys(own)),
    }


def event_reasons(kubectl: Kubectl, ns: str, name: str) -> dict[str, int]:
    """How many Events of each reason the object ``name`` has (what ``kubectl describe`` shows)."""
    out = kubectl(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json"
    )
    reasons: dict[str, int] = {}
    for item in json.loads(out)["items"]:
        reasons[item["reason"]] = reasons.get(item["reason"], 0) + int(item.get("count") or 1)
    return dict(sorted(reasons.items()))


def record(figures: dict[str, Any], config: pytest.Config) -> None:
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[figures["fault"]] = figures
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    with uncaptured(config):
        for key, value in figures.items():
            log(f"measured (API server {figures['fault']}): {key}: {value}")
        log(f"written to {RESULTS}")


@pytest.mark.parametrize("fault", FAULTS, ids=[fault.name for fault in FAULTS])
def test_pending_spec_change_is_applied_after_an_apiserver_outage(
    fault: Fault,
    kwok_control_plane: KwokControlPlane,
    operator_process: OperatorProcess,
    kubectl: Kubectl,
    namespace: str,
    pytestconfig: pytest.Config,
) -> None:
    plane = kwok_control_plane
    apply(kubectl, namespace, shard("root", OLD))
    wait_ready(kubectl, namespace, "root", OLD)
    before = owned_uids(kubectl, namespace)
    operator_pid = operator_process.pid
    figures: dict[str, Any] = {"fault": fault.name, "fault_held_s": fault.seconds}
    try:
        operator_process.pause()
        try:
            patch_spec(kubectl, namespace, "root", {"version": NEW})
            pending = get(kubectl, namespace, "shard", "root")
            generation = int(pending["metadata"]["generation"])
            assert pending["status"]["observedGeneration"] == generation - 1
            log_offset = operator_process.log_path.stat().st_size
            started = time.monotonic()
            fault.begin(plane)
        finally:
            operator_process.resume()
        assert not api_serving(kubectl), "the API server still serves"
        time.sleep(max(0.0, fault.seconds - (time.monotonic() - started)))
        figures["stopped_at_recovery"] = stopped_components(plane)
        fault.end(plane)
        recovering = time.monotonic()
        while not api_serving(kubectl):
            assert time.monotonic() - recovering < 120, "the API server is not back after 120s"
            time.sleep(0.2)
        back = time.monotonic()
        figures["outage_s"] = round(back - started, 1)
        timeline = Timeline(since=back, generation=generation)
        timeline.wait(kubectl, namespace, lambda t: None not in (t.applied, t.written))
        figures["stopped_after_status_written"] = stopped_components(plane)
        code, output = plane.script_status()
        figures["cluster_sh_status"] = {"exit_code": code, "output": output.splitlines()}
        exited = sorted(figures["stopped_after_status_written"])
        assert (code != 0) == bool(exited), f"status exited {code} with {exited} stopped"
        for component in exited:
            assert re.search(rf"^{component} +exited", output, re.M), output
        figures["restarted_before_ready"] = restore(plane)
        timeline.wait(kubectl, namespace, lambda t: t.ready is not None)
        figures["back_to_deployment_changed_s"] = timeline.applied
        figures["back_to_status_written_s"] = timeline.written
        figures["back_to_ready_s"] = timeline.ready
        figures["phases_since_back"] = timeline.phases
        figures["shard_events"] = event_reasons(kubectl, namespace, "root")
    finally:
        restore(plane)
    log_bytes = operator_process.log_path.read_bytes()
    log_text = log_bytes.decode(errors="replace")
    figures["operator_log_since_outage"] = failure_lines(
        log_bytes[log_offset:].decode(errors="replace")
    )
    record(figures, pytestconfig)
    assert owned_uids(kubectl, namespace) == before
    assert operator_process.pid == operator_pid, "the operator process is not the one started"
    assert "Traceback" not in log_text
    secrets = credential_strings(operator_process.cluster.kubeconfig)
    assert secrets, "the kubeconfig has no credential to look for"
    assert not [s for s in secrets if s in log_text], "a kubeconfig credential is in the log"


def test_cluster_status_names_a_component_that_exited(
    kwok_control_plane: KwokControlPlane, pytestconfig: pytest.Config
) -> None:
    """A kube-scheduler that ended on its own (its pid file stays, as after a lost leader
    election) makes ``hack/cluster.sh status`` fail naming it; ``kwokctl start cluster`` (what
    ``hack/cluster.sh up`` runs) brings it back and status passes again."""
    plane = kwok_control_plane
    code, output = plane.script_status()
    assert code == 0, output
    pid = plane.pid(KUBE_SCHEDULER)
    assert pid is not None
    assert re.search(rf"^kube-scheduler +running \(pid {pid}\)$", output, re.M), output
    try:
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: plane.pid(KUBE_SCHEDULER) is None, 10, "kube-scheduler to end")
        code, output = plane.script_status()
        with uncaptured(pytestconfig):
            log(f"hack/cluster.sh status with kube-scheduler gone: exit {code}")
        assert code != 0, output
        assert re.search(rf"^kube-scheduler +exited \(pid {pid}\)$", output, re.M), output
        assert "readyz" not in output
    finally:
        restore(plane)

    def passes() -> bool:
        if plane.script_status()[0] == 0:
            return True
        restore(plane)
        return False

    wait_for(passes, 90, "hack/cluster.sh status to pass after kwokctl start cluster")
