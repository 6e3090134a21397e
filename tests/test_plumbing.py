"""The test plumbing (testkit) without a cluster: session clusters, names, API request
counters, conditions, local processes."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from testkit.cluster import cluster_script_env, orphaned_clusters, session_cluster_name
from testkit.kube import condition, shard_ready, unique_name
from testkit.metrics import request_totals, writes_between
from testkit.process import LoggedProcess, PortTakenError, on_free_ports
from testkit.tools import REPO
from testkit.wait import wait_for


@pytest.mark.parametrize(
    ("names", "alive", "expected"),
    [
        ([], set(), []),
        (["kcp-shard-operator-e2e-12"], {12}, []),
        (["kcp-shard-operator-e2e-12"], set(), ["kcp-shard-operator-e2e-12"]),
        (["kcp-shard-operator", "chart-dev"], set(), []),
        (["kcp-shard-operator-e2e-debug", "kcp-shard-operator-e2e-"], set(), []),
        (
            ["kcp-shard-operator-e2e-1", "kcp-shard-operator-e2e-2", "kcp-shard-operator-e2e-3"],
            {2},
            ["kcp-shard-operator-e2e-1", "kcp-shard-operator-e2e-3"],
        ),
    ],
)
def test_orphaned_clusters(names: list[str], alive: set[int], expected: list[str]) -> None:
    assert orphaned_clusters(names, lambda pid: pid in alive) == expected


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "kcp-shard-operator-e2e-4242"),
        ({"E2E_CLUSTER_NAME": ""}, "kcp-shard-operator-e2e-4242"),
        ({"E2E_CLUSTER_NAME": "mine"}, "mine"),
    ],
)
def test_session_cluster_name(env: dict[str, str], expected: str) -> None:
    assert session_cluster_name(env, 4242) == expected


def test_cluster_script_env_keeps_base_and_names_kubeconfig_after_cluster() -> None:
    env = cluster_script_env({"PATH": "/bin"}, "c1")
    assert env == {
        "PATH": "/bin",
        "CLUSTER_NAME": "c1",
        "CLUSTER_KUBECONFIG": str(REPO / ".cluster" / "c1.kubeconfig"),
    }


@pytest.mark.parametrize(
    ("prefix", "start"),
    [
        ("e2e-test_a[b]", "e2e-test-a-b-"),
        ("E2E", "e2e-"),
        ("x" * 80, "x" * 52 + "-"),
        ("e2e-" + "y" * 47 + "__z", "e2e-" + "y" * 47 + "-"),
    ],
)
def test_unique_name_is_a_dns_label(prefix: str, start: str) -> None:
    name = unique_name(prefix)
    assert name.startswith(start)
    assert len(name) <= 63
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert unique_name(prefix) != name


METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests ...
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="APPLY",version="v1"} 3
apiserver_request_total{code="409",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="APPLY",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="All",group="apps",resource="deployments",scope="resource",subresource="",verb="PUT",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="status",verb="PUT",version="v1"} 9
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="namespace",subresource="",verb="DELETE",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="namespace",subresource="",verb="LIST",version="v1"} 12
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="services",scope="namespace",subresource="",verb="POST",version="v1"} 2
apiserver_requested_deprecated_apis{group="x",resource="y",verb="PUT"} 1
"""  # noqa: E501


def test_request_totals_sum_over_codes_and_leave_out_dry_runs() -> None:
    assert request_totals(METRICS) == {
        ("APPLY", "deployments", "", "resource"): 4.0,
        ("PUT", "deployments", "status", "resource"): 9.0,
        ("DELETE", "deployments", "", "namespace"): 4.0,
        ("LIST", "deployments", "", "namespace"): 12.0,
        ("POST", "services", "", "namespace"): 2.0,
    }


def sample(verb: str, resource: str, subresource: str, scope: str, count: int) -> str:
    """A counter line of a response code METRICS does not have: ``count`` more requests."""
    labels = f'resource="{resource}",scope="{scope}",subresource="{subresource}",verb="{verb}"'
    return f'apiserver_request_total{{code="500",dry_run="",{labels}}} {count}\n'


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ("", {}),
        (sample("APPLY", "deployments", "", "resource", 2), {"APPLY deployments": 2}),
        (sample("POST", "services", "", "namespace", 1), {"POST services": 1}),
        (sample("PATCH", "services", "", "resource", 1), {"PATCH services": 1}),
        (sample("DELETE", "deployments", "", "resource", 1), {"DELETE deployments": 1}),
        (sample("PATCH", "poddisruptionbudgets", "", "resource", 5), {}),
        # Reads, status writes and collection deletes (the namespace controller's) are no
        # writes of the objects.
        (sample("LIST", "deployments", "", "namespace", 3), {}),
        (sample("PUT", "deployments", "status", "resource", 3), {}),
        (sample("DELETE", "deployments", "", "namespace", 3), {}),
    ],
)
def test_writes_between_two_readings(after: str, expected: dict[str, int]) -> None:
    before = request_totals(METRICS)
    assert (
        writes_between(before, request_totals(METRICS + after), ["deployments", "services"])
        == expected
    )


STATUS = {"type": "Ready", "status": "True", "reason": "RolledOut"}


def shard_obj(generation: int = 2, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"generation": generation},
        "spec": {"version": "0.34.0"},
        "status": {
            "phase": "Ready",
            "version": "0.34.0",
            "observedGeneration": 2,
            "conditions": [STATUS],
            **status,
        },
    }


def test_condition() -> None:
    assert condition(shard_obj(), "Ready") == STATUS
    assert condition(shard_obj(), "Degraded") == {}
    assert condition({}, "Ready") == {}
    assert condition({"status": {"conditions": None}}, "Ready") == {}


@pytest.mark.parametrize(
    ("obj", "version", "ready"),
    [
        (shard_obj(), None, True),
        (shard_obj(), "0.34.0", True),
        (shard_obj(), "0.33.0", False),
        (shard_obj(version="0.33.0"), None, False),
        (shard_obj(generation=3), None, False),
        (shard_obj(phase="Progressing"), None, False),
        (shard_obj(conditions=[{**STATUS, "status": "False"}]), None, False),
        ({"metadata": {"generation": 1}, "spec": {"version": "0.34.0"}}, None, False),
    ],
)
def test_shard_ready(obj: dict[str, Any], version: str | None, ready: bool) -> None:
    assert shard_ready(obj, version) is ready


def test_logged_process_stops_its_session_and_keeps_the_log(tmp_path: Path) -> None:
    script = "import time; print('up', flush=True); time.sleep(60)"
    proc = LoggedProcess(tmp_path / "p.log")
    proc.start([sys.executable, "-c", script], cwd=tmp_path)
    wait_for(lambda: "up" in proc.log_tail(5), 10, "the process to log")
    assert proc.running()
    assert proc.stop(grace=5) == -signal.SIGTERM
    assert not proc.running()
    assert proc.stop(grace=5) is None
    assert proc.log_tail(5).endswith("\nup")


def test_logged_process_is_killed_when_sigterm_is_ignored(tmp_path: Path) -> None:
    script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(60)"
    )
    proc = LoggedProcess(tmp_path / "p.log")
    proc.start([sys.executable, "-c", script])
    wait_for(lambda: "up" in proc.log_tail(5), 10, "the process to log")
    assert proc.stop(grace=0.5) == -signal.SIGKILL
    assert LoggedProcess(tmp_path / "none.log").log_tail(5) == f"(no log at {tmp_path}/none.log)"


def _exits_saying(proc: LoggedProcess, words: str) -> None:
    proc.start([sys.executable, "-c", f"print({words!r}); raise SystemExit(1)"])
    assert proc.popen is not None
    proc.popen.wait(10)


def test_check_running_reads_only_the_output_of_the_latest_start(tmp_path: Path) -> None:
    proc = LoggedProcess(tmp_path / "p.log")
    _exits_saying(proc, "listen tcp 127.0.0.1:1: bind: address already in use")
    with pytest.raises(PortTakenError, match="kcp root: address already in use"):
        proc.check_running("kcp root")
    proc.stop(0)
    _exits_saying(proc, "some other failure")
    with pytest.raises(AssertionError, match="kcp root exited with 1") as raised:
        proc.check_running("kcp root")
    assert not isinstance(raised.value, PortTakenError)
    assert "some other failure" in str(raised.value)


@pytest.mark.parametrize(("taken", "starts", "overs"), [(0, 1, 0), (2, 3, 2)])
def test_on_free_ports_starts_over_after_a_taken_port(taken: int, starts: int, overs: int) -> None:
    calls: list[str] = []

    def start() -> str:
        calls.append("start")
        if calls.count("start") <= taken:
            raise PortTakenError("kcp root: address already in use")
        return "ready"

    assert on_free_ports(start, lambda: calls.append("over")) == "ready"
    assert (calls.count("start"), calls.count("over")) == (starts, overs)


def test_on_free_ports_gives_up_after_its_attempts() -> None:
    def start() -> str:
        raise PortTakenError("kcp root: address already in use")

    with pytest.raises(PortTakenError):
        on_free_ports(start, lambda: None, attempts=2)
