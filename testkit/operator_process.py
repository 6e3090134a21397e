"""The operator as a local process against a cluster (``kcp-shard-operator run``)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from kcp_shard_operator.controller.handlers import RESYNC_SECONDS
from kcp_shard_operator.controller.shard import CHILD_KINDS

from .kube import Cluster
from .process import LoggedProcess, free_ports, http_ok, on_free_ports
from .wait import WaitTimeoutError, wait_for

RESYNC_WINDOW = RESYNC_SECONDS + 10
"""Seconds an absence check watches the operator: its periodic loop requests a pass over each
Shard once every RESYNC_SECONDS, so at least one resync pass of every Shard falls in the window
(10 s for the pass itself on a busy machine)."""
CHILD_RESOURCES = tuple(plural for _, _, plural in CHILD_KINDS)
"""The API resources of the objects the operator makes for a Shard."""


class OperatorProcess:
    """``kcp-shard-operator run <args>`` with ``cluster``'s environment, logging to a file."""

    def __init__(self, cluster: Cluster, args: list[str], log_path: Path) -> None:
        self.cluster = cluster
        self.args = args
        self.port, self.metrics_port = free_ports(2)
        self.process = LoggedProcess(log_path)

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    @property
    def pid(self) -> int | None:
        """The process id of the running operator, None when it is not running."""
        popen = self.process.popen
        return popen.pid if popen is not None and popen.poll() is None else None

    @property
    def healthz(self) -> str:
        return f"http://127.0.0.1:{self.port}/healthz"

    @property
    def metrics(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self, timeout: float = 60) -> None:
        """Start the operator and wait for its liveness endpoint; when its liveness port was
        taken meanwhile, start it again on another."""
        on_free_ports(lambda: self._start(timeout), self._start_over)

    def _start_over(self) -> None:
        self.process.stop(0)
        self.port, self.metrics_port = free_ports(2)

    def _start(self, timeout: float) -> None:
        exe = Path(sys.executable).parent / "kcp-shard-operator"
        assert exe.exists(), f"{exe} missing: run `make install`"
        ports = ["--liveness-port", str(self.port), "--metrics-port", str(self.metrics_port)]
        cmd = [str(exe), "run", *self.args, *ports]
        self.process.start(cmd, env={**self.cluster.env, "PYTHONUNBUFFERED": "1"})

        def healthy() -> bool:
            self.process.check_running("the operator, before becoming healthy")
            return http_ok(self.healthz)

        try:
            wait_for(healthy, timeout, f"operator liveness at {self.healthz}")
        except WaitTimeoutError as err:
            raise WaitTimeoutError(f"{err}\n{self.log_tail()}") from None

    def running(self) -> bool:
        return self.process.running()

    def pause(self) -> None:
        """SIGSTOP the operator: it reads and writes nothing until :meth:`resume`."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self, grace: float = 15) -> int | None:
        """SIGTERM the operator, SIGKILL it after ``grace`` seconds; return its exit code."""
        return self.process.stop(grace)

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the operator log."""
        return self.process.log_tail(lines)
