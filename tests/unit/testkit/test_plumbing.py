"""The test plumbing (testkit) without a cluster: session clusters, names, API request
counters, conditions, local processes."""

from __future__ import annotations

import base64
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.cluster import cluster_script_env, orphaned_clusters, session_cluster_name
from testkit.kube import condition, credential_strings, shard_ready, unique_name
from testkit.kwok import KwokControlPlane
from testkit.metrics import request_totals, writes_between
from testkit.process import LoggedProcess, PortTakenError, free_ports, on_free_ports
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


def _process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_logged_process_is_paused_and_resumed(tmp_path: Path) -> None:
    proc = LoggedProcess(tmp_path / "p.log")
    proc.start([sys.executable, "-c", "import time; time.sleep(60)"])
    assert proc.popen is not None
    pid = proc.popen.pid
    proc.send_signal(signal.SIGSTOP)
    wait_for(lambda: _process_state(pid) == "T", 10, "the process to stop")
    proc.send_signal(signal.SIGCONT)
    wait_for(lambda: _process_state(pid) != "T", 10, "the process to resume")
    assert proc.stop(grace=5) == -signal.SIGTERM


def test_kwok_component_is_found_paused_and_killed_by_its_pid_file(tmp_path: Path) -> None:
    plane = KwokControlPlane(name="c", env={"KWOK_WORKDIR": str(tmp_path)})
    pids = tmp_path / "clusters" / "c" / "pids"
    pids.mkdir(parents=True)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as component:
        (pids / "kube-apiserver.pid").write_text(str(component.pid))
        (pids / "etcd.pid").write_text("not a pid")
        assert plane.pid("kube-apiserver") == component.pid
        assert plane.pid("etcd") is None
        assert plane.pid("kube-scheduler") is None
        plane.send_signal("kube-apiserver", signal.SIGSTOP)
        wait_for(lambda: _process_state(component.pid) == "T", 10, "the component to stop")
        plane.kill("kube-apiserver")  # leaves a zombie until reaped: it counts as ended
        assert plane.pid("kube-apiserver") is None
        assert not (pids / "kube-apiserver.pid").exists()
        assert component.wait(10) == -signal.SIGKILL


def test_credential_strings_of_inline_and_file_credentials(tmp_path: Path) -> None:
    key_pem = "-----BEGIN KEY-----\nAAAkeyline1\nBBBkeyline2\n-----END KEY-----\n"
    (tmp_path / "client.key").write_text(key_pem)
    key_data = base64.b64encode(key_pem.encode()).decode()
    users = [
        {"name": "t", "user": {"token": "tok-123"}},
        {"name": "p", "user": {"username": "u", "password": "pw-456"}},
        {"name": "d", "user": {"client-certificate-data": "Y2VydA==", "client-key-data": key_data}},
        {"name": "f", "user": {"client-certificate": "client.crt", "client-key": "client.key"}},
    ]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({"users": users}))
    found = credential_strings(kubeconfig)
    assert found == [
        "tok-123", "pw-456", key_data, "AAAkeyline1", "BBBkeyline2", "AAAkeyline1", "BBBkeyline2"
    ]  # fmt: skip
    kubeconfig.write_text("apiVersion: v1\n")
    assert credential_strings(kubeconfig) == []


def test_free_ports_are_all_different() -> None:
    """Two ports picked one after the other can be the same one (an operator's metrics and
    liveness ports were, in a CI run); picked together they cannot."""
    for _ in range(20):
        ports = free_ports(3)
        assert len(set(ports)) == 3, ports
