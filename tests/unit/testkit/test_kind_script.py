"""hack/kind.sh's host checks: one line saying what to do, exit 2, nothing created."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from testkit.tools import HACK

KIND = HACK / "kind.sh"


def check(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    cache = tmp_path / "cache"
    proc = subprocess.run(
        ["bash", str(KIND), "check"],
        env={**os.environ, "KCP_SHARD_CACHE": str(cache), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, cache


def assert_refused(proc: subprocess.CompletedProcess[str], cache: Path, words: str) -> None:
    assert proc.returncode == 2, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("hack/kind.sh: "), lines[0]
    assert words in lines[0], lines[0]
    assert not cache.exists(), "a refused check must not create anything"


def test_not_root(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        tmp_path.chmod(0o777)
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", str(KIND)]
        proc = subprocess.run(
            [*cmd, "check"],
            env={**os.environ, "KCP_SHARD_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        cache = tmp_path / "cache"
    else:
        proc, cache = check(tmp_path)
    assert_refused(proc, cache, "not root")
    assert "sudo" in proc.stderr


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the other checks come after 'not root'")


@root_only
def test_disk_too_small(tmp_path: Path) -> None:
    proc, cache = check(tmp_path, KIND_MIN_FREE_GIB="1000000")
    assert_refused(proc, cache, "disk too small: 1000000 GiB must be free")


@root_only
def test_no_docker_engine(tmp_path: Path) -> None:
    proc, cache = check(tmp_path, KCP_SHARD_APT_INSTALL="0", DOCKERD=str(tmp_path / "no-dockerd"))
    assert_refused(proc, cache, "no Docker engine: install one (Debian: apt-get install docker.io")


@root_only
def test_dockerd_not_running(tmp_path: Path) -> None:
    proc, cache = check(
        tmp_path,
        KCP_SHARD_APT_INSTALL="0",
        DOCKERD=shutil.which("true") or "true",
        DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock",
    )
    assert_refused(proc, cache, "dockerd is not running: start it")
