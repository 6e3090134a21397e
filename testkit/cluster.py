"""Local clusters of hack/cluster.sh: one per test session, orphans found and deleted."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from .kube import Cluster
from .tools import HACK, REPO, run_visible

E2E_CLUSTER_PREFIX = "kcp-shard-operator-e2e-"


def cluster_script_env(base: Mapping[str, str], name: str) -> dict[str, str]:
    """Environment for hack/cluster.sh managing the cluster ``name``."""
    return {
        **base,
        "CLUSTER_NAME": name,
        "CLUSTER_KUBECONFIG": str(REPO / ".cluster" / f"{name}.kubeconfig"),
    }


def cluster_up(script_env: Mapping[str, str]) -> Cluster:
    """``hack/cluster.sh up`` with ``script_env``; the cluster it started (or found)."""
    run_visible([str(HACK / "cluster.sh"), "up"], env=script_env)
    return Cluster.at(Path(script_env["CLUSTER_KUBECONFIG"]))


def cluster_down(script_env: Mapping[str, str]) -> None:
    """``hack/cluster.sh down`` with ``script_env``."""
    run_visible([str(HACK / "cluster.sh"), "down"], env=script_env)


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


def kwok_workdir(base: Mapping[str, str]) -> Path:
    """The kwok workdir of hack/cluster.sh (``KWOK_WORKDIR``): clusters/<name>/ in it."""
    cache = base.get("KCP_SHARD_CACHE") or Path.home() / ".cache" / "kcp-shard-operator"
    return Path(cache) / "kwok"


def kwok_clusters(base: Mapping[str, str]) -> list[str]:
    """Names of the kwok clusters in the project's kwok workdir."""
    clusters = kwok_workdir(base) / "clusters"
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
