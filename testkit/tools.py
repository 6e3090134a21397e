"""The pinned tools of hack/tools.sh, helm, and progress lines."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HACK = REPO / "hack"
CRD_FILE = REPO / "manifests" / "crds" / "kcpshard.dev.yaml"
CLUSTER_TOOLS = ("kubernetes", "etcd", "kwok", "helm")


def log(message: str) -> None:
    """A progress line on stderr."""
    print(f"[e2e {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_visible(cmd: list[str], env: Mapping[str, str] | None = None) -> None:
    """Run a long command with its output on stderr; raise on failure."""
    subprocess.run(cmd, env=env, check=True, stdout=sys.stderr, stderr=sys.stderr)


def build_tools(*tools: str) -> None:
    """Build the named tools with hack/tools.sh (cached builds return at once)."""
    run_visible([str(HACK / "tools.sh"), "build", *tools])


def tools_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default the process environment) with the exports of ``hack/tools.sh env``
    applied: PATH with kubectl, helm..., KCP_BINARY and the other binaries' paths."""
    script = f'eval "$({HACK / "tools.sh"} env)" && env -0'
    env = dict(os.environ if base is None else base)
    out = subprocess.run(["bash", "-c", script], env=env, check=True, capture_output=True).stdout
    pairs = (item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
    return dict(pairs)


@functools.cache
def helm_env() -> dict[str, str]:
    """The environment with the pinned helm on PATH, built first when it is missing."""
    build_tools("helm")
    return tools_env()


def service_monitor_crd() -> Path:
    """The ServiceMonitor CRD of the pinned prometheus-operator, from its Go module."""
    version = pinned_version("PROMETHEUS_OPERATOR_VERSION")
    module = f"github.com/prometheus-operator/prometheus-operator@{version}"
    proc = subprocess.run(
        ["go", "mod", "download", "-json", module],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    found = json.loads(proc.stdout or "{}")
    assert "Dir" in found, f"go mod download {module}: {found.get('Error') or proc.stderr}"
    return (
        Path(found["Dir"])
        / "example"
        / "prometheus-operator-crd"
        / ("monitoring.coreos.com_servicemonitors.yaml")
    )


def pinned_version(name: str) -> str:
    """A version from hack/versions.env, e.g. ``pinned_version("KUBERNETES_VERSION")``."""
    for line in (HACK / "versions.env").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == name:
            return value.strip()
    raise KeyError(name)


class HelmError(RuntimeError):
    """A helm call that exited non-zero."""


def helm(
    env: Mapping[str, str], *args: str, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the pinned helm (on ``env``'s PATH); with ``check``, raise HelmError on failure."""
    proc = subprocess.run(
        ["helm", *args], env=dict(env), capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise HelmError(f"helm {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc
