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

The kube-controller-manager and kube-scheduler of kwok hold leader-election leases the outage
outlives; the components kwokctl reports Stopped after the recovery are recorded, and started
again with ``kwokctl start cluster`` (what ``hack/cluster.sh up`` does for an existing cluster)
before the wait for Ready, which needs the Deployment controller and the scheduler.

Prints the figures and writes them to bench/results/apiserver-outage.json, one entry per fault.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from testkit.kube import KubectlError, credential_strings
from testkit.kwok import KUBE_APISERVER, KwokControlPlane
from testkit.operator_process import OperatorProcess
from testkit.tools import REPO, log

from .capture import uncaptured
from .shards import Kubectl, apply, get, patch_spec, shard, wait_ready

pytestmark = pytest.mark.e2e

RESULTS = REPO / "bench" / "results" / "apiserver-outage.json"
OWNED = "shards,deployments,services,poddisruptionbudgets"
OLD, NEW = "0.33.0", "0.34.0"
CONVERGE_TIMEOUT = 180.0
LOG_PREFIX = re.compile(r"^\[[^\]]*\]\s*")


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


def owned_uids(kubectl: Kubectl, ns: str) -> dict[str, str]:
    items = json.loads(kubectl("get", OWNED, "-n", ns, "-o", "json"))["items"]
    return {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["uid"] for o in items}


def convergence(
    kubectl: Kubectl, ns: str, generation: int, since: float
) -> tuple[float, float, str]:
    """Seconds from ``since`` until the Deployment had kcp NEW and until the Shard's status
    observed ``generation``, and the phase that status first had."""
    applied: float | None = None
    written: tuple[float, str] | None = None
    deadline = since + CONVERGE_TIMEOUT
    while applied is None or written is None:
        assert time.monotonic() < deadline, (
            f"after {CONVERGE_TIMEOUT:g}s: Deployment at {NEW}: {applied is not None}, "
            f"status of generation {generation} written: {written is not None}"
        )
        try:
            found = json.loads(
                kubectl("get", "-n", ns, "shard/root", "deployment/root-kcp", "-o", "json")
            )["items"]
        except KubectlError:
            continue
        now = time.monotonic() - since
        status = found[0].get("status") or {}
        image = found[1]["spec"]["template"]["spec"]["containers"][0]["image"]
        if applied is None and image.endswith(f":v{NEW}"):
            applied = now
        if written is None and status.get("observedGeneration") == generation:
            written = (now, str(status.get("phase")))
        time.sleep(0.2)
    return applied, *written


def outage_log(log_text: str) -> list[str]:
    """The distinct warning and error lines of an operator log slice, without timestamps."""
    lines = (LOG_PREFIX.sub("", line) for line in log_text.splitlines())
    return list(dict.fromkeys(line for line in lines if "[ERROR" in line or "[WARNING" in line))


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
        figures["components_at_recovery"] = plane.components()
        fault.end(plane)
        recovering = time.monotonic()
        while not api_serving(kubectl):
            assert time.monotonic() - recovering < 120, "the API server is not back after 120s"
            time.sleep(0.2)
        back = time.monotonic()
        figures["outage_s"] = round(back - started, 1)
        applied, written, phase = convergence(kubectl, namespace, generation, back)
        figures["back_to_deployment_changed_s"] = round(applied, 1)
        figures["back_to_status_written_s"] = round(written, 1)
        figures["phase_first_written"] = phase
        figures["components_after_status_written"] = plane.components()
        code, output = plane.script_status()
        figures["cluster_sh_status"] = {
            "exit_code": code,
            "stopped": [line.split()[0] for line in output.splitlines() if "Stopped" in line],
        }
        figures["restarted_before_ready"] = restore(plane)
        wait_ready(kubectl, namespace, "root", NEW, timeout=CONVERGE_TIMEOUT)
        figures["back_to_ready_s"] = round(time.monotonic() - back, 1)
    finally:
        restore(plane)
    log_bytes = operator_process.log_path.read_bytes()
    log_text = log_bytes.decode(errors="replace")
    figures["operator_log_during_outage"] = outage_log(
        log_bytes[log_offset:].decode(errors="replace")
    )
    record(figures, pytestconfig)
    assert owned_uids(kubectl, namespace) == before
    assert operator_process.pid == operator_pid, "the operator process is not the one started"
    assert "Traceback" not in log_text
    secrets = credential_strings(operator_process.cluster.kubeconfig)
    assert secrets, "the kubeconfig has no credential to look for"
    assert not [s for s in secrets if s in log_text], "a kubeconfig credential is in the log"
