"""The control plane of a kwok cluster of hack/cluster.sh: its components are local processes.

kwokctl's binary runtime starts each component (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok-controller) in a session of its own and keeps its process id in
``clusters/<name>/pids/<component>.pid``. ``kwokctl stop cluster`` SIGKILLs a component and
removes that file; ``kwokctl start cluster`` starts every component whose process is gone with
the command of ``kwok.yaml``. kwokctl has no command for one component, so :meth:`kill` does
for one what ``stop cluster`` does for all, and ``start cluster`` brings it back.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .cluster import kwok_workdir
from .tools import HACK, tools_env
from .wait import wait_for

KUBE_APISERVER = "kube-apiserver"
KUBE_SCHEDULER = "kube-scheduler"


def _process_gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie counts as ended: it serves nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@dataclass(frozen=True)
class KwokControlPlane:
    """The components of the kwok cluster ``name`` (hack/cluster.sh's ``CLUSTER_NAME``)."""

    name: str
    env: Mapping[str, str]

    @classmethod
    def of(cls, script_env: Mapping[str, str]) -> KwokControlPlane:
        """The control plane of the cluster hack/cluster.sh manages with ``script_env``."""
        env = {**tools_env(script_env), "KWOK_WORKDIR": str(kwok_workdir(script_env))}
        return cls(name=script_env["CLUSTER_NAME"], env=env)

    @property
    def workdir(self) -> Path:
        return Path(self.env["KWOK_WORKDIR"]) / "clusters" / self.name

    def exists(self) -> bool:
        return (self.workdir / "kwok.yaml").is_file()

    def pid(self, component: str) -> int | None:
        """The process id of a running ``component``, None when it is not running."""
        try:
            pid = int((self.workdir / "pids" / f"{component}.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return None if _process_gone(pid) else pid

    def kill(self, component: str, timeout: float = 10) -> None:
        """SIGKILL ``component`` and remove its pid file, as ``kwokctl stop cluster`` does."""
        pid = self.pid(component)
        assert pid is not None, f"{component} of {self.name} is not running"
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _process_gone(pid), timeout, f"{component} ({pid}) to end")
        (self.workdir / "pids" / f"{component}.pid").unlink()

    def send_signal(self, component: str, signum: signal.Signals) -> None:
        """Send ``signum`` to the running ``component`` (SIGSTOP pauses it, SIGCONT resumes)."""
        pid = self.pid(component)
        assert pid is not None, f"{component} of {self.name} is not running"
        os.kill(pid, signum)

    def log_tail(self, component: str, lines: int = 1) -> list[str]:
        """The last lines of ``component``'s log (``kwokctl start cluster`` truncates it)."""
        path = self.workdir / "logs" / f"{component}.log"
        return path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []

    def start_stopped(self) -> None:
        """``kwokctl start cluster``: start every component whose process is gone and wait
        until the API server serves ``/version``."""
        self._kwokctl("start", "cluster")

    def etcd_delete(self, key: str) -> int:
        """Delete ``key`` (``/registry/<resource>/<namespace>/<name>``) straight from the
        cluster's etcd, through etcd's own JSON gateway: no API server sees it, so no watch
        delivers a DELETED event for it. Returns how many keys went (0 or 1)."""
        port = self._options()["etcdPort"]
        body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v3/kv/deleterange", data=body, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(json.loads(answer.read()).get("deleted", 0))

    def _options(self) -> dict[str, Any]:
        """The options of the cluster's kwokctl configuration (its ports, its binaries)."""
        with (self.workdir / "kwok.yaml").open(encoding="utf-8") as config:
            for document in yaml.safe_load_all(config):
                if (document or {}).get("kind") == "KwokctlConfiguration":
                    options: dict[str, Any] = document["options"]
                    return options
        raise AssertionError(f"no KwokctlConfiguration in {self.workdir / 'kwok.yaml'}")

    def components(self) -> dict[str, str]:
        """``kwokctl get components``: each component's status (Ready while its process runs,
        also when it is paused, Stopped when it is gone)."""
        rows = self._kwokctl("get", "components", "-o", "wide").splitlines()[1:]
        return {name: status for name, status in (row.split()[:2] for row in rows if row.strip())}

    def script_status(self) -> tuple[int, str]:
        """``hack/cluster.sh status`` of this cluster: its exit code and its output."""
        proc = subprocess.run(
            [str(HACK / "cluster.sh"), "status"],
            env=dict(self.env),
            capture_output=True,
            text=True,
            timeout=120,
        )
        return proc.returncode, proc.stdout + proc.stderr

    def _kwokctl(self, *args: str) -> str:
        proc = subprocess.run(
            ["kwokctl", "--name", self.name, *args],
            env=dict(self.env),
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert proc.returncode == 0, f"kwokctl {' '.join(args)} exited {proc.returncode}: " + (
            proc.stderr.strip()
        )
        return proc.stdout
