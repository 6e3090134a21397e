"""The pure parts of the test plumbing (testkit): session clusters, names (no cluster)."""

from __future__ import annotations

import re

import pytest

from testkit.cluster import cluster_script_env, orphaned_clusters, session_cluster_name
from testkit.kube import unique_name
from testkit.tools import REPO


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
