"""A local process in its own session with its output in a log file; free ports, liveness."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TypeVar

from .tools import log

T = TypeVar("T")

PORT_TAKEN = "address already in use"


class PortTakenError(AssertionError):
    """A process exited because a port from :func:`free_port` was taken before it bound it:
    the port was free a moment ago, but a connection's ephemeral port can take it since."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (see :class:`PortTakenError`)."""
    [port] = free_ports(1)
    return port


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports on 127.0.0.1 that were free a moment ago: held all at
    once while picked, since a port picked and let go can be picked again at once."""
    with contextlib.ExitStack() as held:
        socks = [
            held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            for _ in range(count)
        ]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def on_free_ports(start: Callable[[], T], start_over: Callable[[], None], attempts: int = 3) -> T:
    """``start()``; after a :class:`PortTakenError`, ``start_over()`` (new ports) and again."""
    for _ in range(attempts - 1):
        try:
            return start()
        except PortTakenError as err:
            log(f"{err}; starting it again on other ports")
            start_over()
    return start()


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


class LoggedProcess:
    """One process at a time, started in a session of its own, appending to ``log_path``."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_start = 0

    def start(
        self, cmd: list[str], cwd: Path | None = None, env: Mapping[str, str] | None = None
    ) -> None:
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._log = self.log_path.open("ab")
        self.popen = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=None if env is None else dict(env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def check_running(self, what: str) -> None:
        """Raise when the process exited: :class:`PortTakenError` when its output since the
        latest start says a port was taken, else an AssertionError with the log's tail."""
        if self.running():
            return
        with self.log_path.open("rb") as log_file:
            log_file.seek(self._log_start)
            output = log_file.read().decode(errors="replace")
        code = None if self.popen is None else self.popen.returncode
        if PORT_TAKEN in output:
            raise PortTakenError(f"{what}: {PORT_TAKEN}")
        raise AssertionError(f"{what} exited with {code}:\n{self.log_tail(60)}")

    def send_signal(self, signum: signal.Signals) -> None:
        """Send ``signum`` to the process group (SIGSTOP pauses it, SIGCONT resumes it)."""
        assert self.popen is not None, "not started"
        os.killpg(self.popen.pid, signum)

    def kill(self) -> None:
        """SIGKILL the process group and reap the process: a crash, no clean shutdown."""
        assert self.popen is not None, "not started"
        os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def stop(self, grace: float) -> int | None:
        """SIGTERM the process group, SIGKILL it after ``grace`` seconds; return the exit code
        (None when nothing was started since the last stop)."""
        code: int | None = None
        if self.popen is not None:
            if self.popen.poll() is None:
                os.killpg(self.popen.pid, signal.SIGTERM)
                try:
                    self.popen.wait(grace)
                except subprocess.TimeoutExpired:
                    self.kill()
            code = self.popen.returncode
            self.popen = None
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def log_tail(self, lines: int) -> str:
        """The last ``lines`` lines of the log."""
        if not self.log_path.exists():
            return f"(no log at {self.log_path})"
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"--- last {len(tail)} lines of {self.log_path} ---\n" + "\n".join(tail)
