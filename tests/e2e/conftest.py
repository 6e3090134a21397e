"""Fixtures for the end-to-end tests: a real local cluster, the CRDs, namespaces, the operator.

By default each session starts its own kwok cluster (``hack/cluster.sh``, name
``kcp-shard-operator-e2e-<pid>`` or ``E2E_CLUSTER_NAME``, kubeconfig ``.cluster/<name>.kubeconfig``)
and deletes it at the end, also after failures and SIGTERM; clusters of sessions that died are
deleted at the next start. ``E2E_USE_EXISTING_CLUSTER=1`` uses the cluster in ``KUBECONFIG``
instead and leaves it running; ``E2E_KEEP_CLUSTER=1`` keeps the started cluster for debugging.

Under pytest-xdist (``-n N --dist loadgroup``, as hack/run-tests.sh runs them) each worker is a
session of its own with a cluster of its own (named after the worker's process id), whose tests
run one after the other, each in a namespace of its own with an operator process watching only
that namespace, as in a session without xdist. Tests that share a module or session fixture too
costly to start on every worker (local kcp processes) are in an ``xdist_group``: one worker runs
all of them. xdist hands out such groups before single tests (it orders the work by its number
of tests), so these, the longest, start first.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from types import FrameType

import pytest

from testkit.cluster import (
    cluster_down,
    cluster_script_env,
    cluster_up,
    kwok_clusters,
    orphaned_clusters,
    process_alive,
    session_cluster_name,
)
from testkit.kube import (
    Cluster,
    apply_crds,
    create_namespace,
    delete_namespace,
    delete_shards,
    release_finalized,
)
from testkit.kwok import KwokControlPlane
from testkit.operator_process import OperatorProcess
from testkit.tools import CLUSTER_TOOLS, CRD_FILE, build_tools, log

from .capture import uncaptured

CALL_REPORT = pytest.StashKey[pytest.TestReport]()
SHARED_KCP_GROUP = pytest.mark.xdist_group("sharded-kcp")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the session's sharded kcp (``tests.e2e.kcp_fixture``), whatever its
    module, joins one ``xdist_group``: one worker starts that kcp and runs them all."""
    for item in items:
        if isinstance(item, pytest.Function) and "sharded_kcp" in item.fixturenames:
            item.add_marker(SHARED_KCP_GROUP)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember each test's call-phase report so fixtures can tell whether it failed."""
    report: pytest.TestReport = yield
    if report.when == "call":
        item.stash[CALL_REPORT] = report
    return report


def _failed(request: pytest.FixtureRequest) -> bool:
    report = request.node.stash.get(CALL_REPORT, None)
    return report is None or report.failed


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _existing_cluster() -> Cluster:
    kubeconfig = os.environ.get("KUBECONFIG", "")
    assert kubeconfig, "E2E_USE_EXISTING_CLUSTER=1 needs KUBECONFIG"
    cluster = Cluster.at(Path(kubeconfig))
    cluster.kubectl("get", "--raw", "/readyz")
    log(f"using the existing cluster in {kubeconfig}")
    return cluster


def _start_cluster(script_env: dict[str, str]) -> Cluster:
    start = time.monotonic()
    build_tools(*CLUSTER_TOOLS)
    log(f"starting cluster {script_env['CLUSTER_NAME']}")
    cluster = cluster_up(script_env)
    log(f"cluster ready in {time.monotonic() - start:.1f}s (tools check and cluster start)")
    return cluster


def _stop_cluster(script_env: dict[str, str]) -> None:
    if os.environ.get("E2E_KEEP_CLUSTER") == "1":
        log(f"keeping cluster {script_env['CLUSTER_NAME']} (E2E_KEEP_CLUSTER=1)")
        return
    start = time.monotonic()
    cluster_down(script_env)
    log(f"cluster deleted in {time.monotonic() - start:.1f}s")


@pytest.fixture(scope="session")
def cluster(pytestconfig: pytest.Config) -> Iterator[Cluster]:
    """A running cluster with kubectl and helm on the PATH of ``cluster.env``."""
    existing = os.environ.get("E2E_USE_EXISTING_CLUSTER") == "1"
    xdist_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if (existing or os.environ.get("E2E_CLUSTER_NAME")) and xdist_workers > 1:
        pytest.fail(
            "E2E_USE_EXISTING_CLUSTER=1 or E2E_CLUSTER_NAME names one cluster, which every "
            "xdist worker would then use (and start, stop, count requests of): run without -n"
        )
    if existing:
        with uncaptured(pytestconfig):
            found = _existing_cluster()
        yield found
        return
    for orphan in orphaned_clusters(kwok_clusters(os.environ), process_alive):
        with uncaptured(pytestconfig):
            log(f"deleting {orphan}, left behind by an ended test session")
            cluster_down(cluster_script_env(os.environ, orphan))
    script_env = cluster_script_env(os.environ, session_cluster_name(os.environ, os.getpid()))
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with uncaptured(pytestconfig):
            started = _start_cluster(script_env)
        yield started
    finally:
        with uncaptured(pytestconfig):
            _stop_cluster(script_env)
        signal.signal(signal.SIGTERM, previous_sigterm)


@pytest.fixture(scope="session")
def kwok_control_plane(cluster: Cluster) -> KwokControlPlane:
    """The components of the session's kwok cluster, as local processes to stop and pause.

    With ``E2E_USE_EXISTING_CLUSTER=1`` that is the kwok cluster ``E2E_CLUSTER_NAME`` of the
    project's kwok workdir; a test needing it is skipped when there is none (another kind of
    cluster, or a kwok cluster elsewhere).
    """
    script_env = cluster_script_env(os.environ, session_cluster_name(os.environ, os.getpid()))
    script_env["CLUSTER_KUBECONFIG"] = str(cluster.kubeconfig)
    plane = KwokControlPlane.of(script_env)
    if not plane.exists():
        pytest.skip(f"no kwok cluster {plane.name} in {plane.workdir.parent} to stop and start")
    return plane


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> list[str]:
    """The project's CRDs applied and Established; returns their names."""
    assert CRD_FILE.exists(), f"{CRD_FILE} missing: generate the CRD first"
    return apply_crds(cluster, CRD_FILE)


@pytest.fixture
def kubectl(cluster: Cluster) -> Callable[..., str]:
    """``kubectl(*args, stdin=None)`` against the test cluster, returning stdout."""
    return cluster.kubectl


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, deleted afterwards."""
    name = create_namespace(cluster, f"e2e-{request.node.name}")
    yield name
    left = release_finalized(cluster, name)
    delete_namespace(cluster, name)
    assert not left, f"left with the operator's finalizer after the test: {left}"


@pytest.fixture
def operator_process(
    cluster: Cluster,
    crds: list[str],
    namespace: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[OperatorProcess]:
    """The operator as a local process watching ``namespace``; prints its log tail on failure.

    The test's Shards are deleted while the operator still runs, so it removes their finalizer
    and the namespace can finish deleting (else its controller retries for the whole session).
    """
    # kwok pods run no kcp: only tests marked kcp_checks (which run kcp as local processes
    # and name its admin kubeconfig) let the operator ask kcp.
    checks = request.node.get_closest_marker("kcp_checks") is not None
    operator = OperatorProcess(
        cluster=cluster,
        args=["--namespace", namespace, "--standalone", *([] if checks else ["--no-kcp-checks"])],
        log_path=tmp_path / "operator.log",
    )
    try:
        operator.start()
        yield operator
    finally:
        if operator.running():
            delete_shards(cluster, namespace, timeout=30)
        code = operator.stop()
        if _failed(request):
            print(f"operator exit code: {code}\n{operator.log_tail()}")
