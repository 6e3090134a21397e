"""Plumbing for the end-to-end tests: tools, the local cluster, kubectl, waiting, the operator."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TypeVar

import yaml

REPO = Path(__file__).resolve().parents[2]
HACK = REPO / "hack"
CRD_FILE = REPO / "manifests" / "crds" / "kcpshard.dev_shards.yaml"
E2E_CLUSTER_PREFIX = "kcp-shard-operator-e2e-"
CLUSTER_TOOLS = ("kubernetes", "etcd", "kwok", "helm")

T = TypeVar("T")


class KubectlError(RuntimeError):
    """A kubectl call that exited non-zero."""

    def __init__(self, args: tuple[str, ...], returncode: int, stderr: str) -> None:
        super().__init__(f"kubectl {' '.join(args)} exited {returncode}: {stderr.strip()}")
        self.returncode = returncode
        self.stderr = stderr


class WaitTimeoutError(AssertionError):
    """``wait_for`` ran out of time."""


def log(message: str) -> None:
    """A progress line on stderr."""
    print(f"[e2e {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_visible(cmd: list[str], env: Mapping[str, str] | None = None) -> None:
    """Run a long command with its output on stderr; raise on failure."""
    subprocess.run(cmd, env=env, check=True, stdout=sys.stderr, stderr=sys.stderr)


def build_tools(*tools: str) -> None:
    """Build the named tools with hack/tools.sh (cached builds return at once)."""
    run_visible([str(HACK / "tools.sh"), "build", *tools])


def tools_env(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with the exports of ``hack/tools.sh env`` applied (PATH with kubectl, helm...)."""
    script = f'eval "$({HACK / "tools.sh"} env)" && env -0'
    out = subprocess.run(
        ["bash", "-c", script], env=dict(base), check=True, capture_output=True
    ).stdout
    pairs = (item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
    return dict(pairs)


@dataclass(frozen=True)
class Cluster:
    """A reachable cluster: its kubeconfig and the environment to run tools against it."""

    kubeconfig: Path
    env: Mapping[str, str]

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        """Run kubectl against the cluster and return its stdout; raise KubectlError on failure."""
        proc = subprocess.run(
            ["kubectl", *args],
            env=dict(self.env),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise KubectlError(args, proc.returncode, proc.stderr)
        return proc.stdout


def cluster_script_env(base: Mapping[str, str], name: str) -> dict[str, str]:
    """Environment for hack/cluster.sh managing the e2e cluster ``name``."""
    return {
        **base,
        "CLUSTER_NAME": name,
        "CLUSTER_KUBECONFIG": str(REPO / ".cluster" / f"{name}.kubeconfig"),
    }


def session_cluster_name(base: Mapping[str, str], pid: int) -> str:
    """``E2E_CLUSTER_NAME`` or a name owned by this test session's process id.

    One cluster per session, so that concurrent sessions never delete each other's cluster.
    """
    return base.get("E2E_CLUSTER_NAME") or f"{E2E_CLUSTER_PREFIX}{pid}"


def orphaned_clusters(names: list[str], alive: Callable[[int], bool]) -> list[str]:
    """The session clusters in ``names`` whose owning process is gone."""
    return [
        name
        for name in names
        if name.startswith(E2E_CLUSTER_PREFIX)
        and name.removeprefix(E2E_CLUSTER_PREFIX).isdigit()
        and not alive(int(name.removeprefix(E2E_CLUSTER_PREFIX)))
    ]


def kwok_clusters(base: Mapping[str, str]) -> list[str]:
    """Names of the kwok clusters in the project's kwok workdir."""
    cache = Path(base.get("KCP_SHARD_CACHE") or Path.home() / ".cache" / "kcp-shard-operator")
    clusters = cache / "kwok" / "clusters"
    return sorted(p.name for p in clusters.iterdir()) if clusters.is_dir() else []


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.5,
) -> T:
    """Poll ``predicate`` until it returns a truthy value and return that value.

    A KubectlError raised by the predicate counts as "not yet". On timeout, raise WaitTimeoutError
    naming ``what`` with the last result and the last kubectl error.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    last_error: KubectlError | None = None
    while True:
        try:
            last = predicate()
            last_error = None
        except KubectlError as err:
            last_error = err
        if last:
            return last
        if time.monotonic() >= deadline:
            detail = f"last error: {last_error}" if last_error else f"last result: {last!r}"
            raise WaitTimeoutError(f"timed out after {timeout:g}s waiting for {what}; {detail}")
        time.sleep(interval)


def unique_name(prefix: str) -> str:
    """A DNS-1123 label ``<prefix>-<6 hex>``, at most 63 characters."""
    cleaned = "".join(c if c.isalnum() else "-" for c in prefix.lower()).strip("-")
    return f"{cleaned[:52].rstrip('-')}-{secrets.token_hex(3)}"


def create_namespace(cluster: Cluster, prefix: str) -> str:
    """Create a fresh namespace named after ``prefix`` and return its name."""
    name = unique_name(prefix)
    cluster.kubectl("create", "namespace", name)
    return name


def delete_namespace(cluster: Cluster, name: str) -> None:
    """Delete a namespace without waiting for its finalization."""
    cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


def apply_crds(cluster: Cluster, path: Path, timeout: float = 60) -> list[str]:
    """Apply the CRDs in ``path`` and wait until each is Established; return their names."""
    with path.open() as stream:
        docs = [doc for doc in yaml.safe_load_all(stream) if doc]
    names = [
        str(doc["metadata"]["name"])
        for doc in docs
        if doc.get("kind") == "CustomResourceDefinition"
    ]
    assert names, f"no CustomResourceDefinition in {path}"
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        f"--timeout={timeout:g}s",
        *(f"crd/{name}" for name in names),
    )
    return names


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


@dataclass
class OperatorProcess:
    """The operator running as a local process against a cluster, logging to a file."""

    cluster: Cluster
    args: list[str]
    log_path: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    @property
    def healthz(self) -> str:
        return f"http://127.0.0.1:{self.port}/healthz"

    def start(self, timeout: float = 60) -> None:
        """Start ``kcp-shard-operator run <args>`` and wait for its liveness endpoint."""
        exe = Path(sys.executable).parent / "kcp-shard-operator"
        assert exe.exists(), f"{exe} missing: run `make install`"
        cmd = [str(exe), "run", *self.args, "--liveness-port", str(self.port)]
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            cmd,
            env={**self.cluster.env, "PYTHONUNBUFFERED": "1"},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def healthy() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(
                    f"operator exited with {self.process.returncode} before becoming healthy:\n"
                    + self.log_tail()
                )
            return http_ok(self.healthz)

        try:
            wait_for(healthy, timeout, f"operator liveness at {self.healthz}")
        except WaitTimeoutError as err:
            raise WaitTimeoutError(f"{err}\n{self.log_tail()}") from None

    def stop(self, grace: float = 15) -> int | None:
        """SIGTERM the process, SIGKILL it after ``grace`` seconds; return its exit code."""
        code: int | None = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(grace)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            code = self.process.returncode
        if self._log is not None:
            self._log.close()
        return code

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the operator log."""
        if not self.log_path.exists():
            return f"(no log at {self.log_path})"
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"--- last {len(tail)} lines of {self.log_path} ---\n" + "\n".join(tail)
