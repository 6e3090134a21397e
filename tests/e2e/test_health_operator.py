"""Ready and DataVerified against a real sharded kcp: the operator asks the root and shard-1.

Shard objects live in the kwok cluster (their pods are simulated); the operator reaches the real
root and ``shard-1`` of :mod:`tests.e2e.kcp` through the admin kubeconfigs in
``spec.adminKubeconfigSecretRef``. The tests break that kcp on purpose (a deleted registration,
a root restarted on an empty etcd), so the module starts its own and leaves it whole after each
test. Measured times are printed and written to ``.cluster/health-figures.json``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.kube import condition
from testkit.operator_process import OperatorProcess
from testkit.tools import REPO, log
from testkit.wait import wait_for

from .capture import uncaptured
from .kcp import ShardedKcp, kcp_binaries, start_sharded_kcp
from .shards import Kubectl, apply, events, get, shard

# One worker runs this module under xdist: its tests share the module's kcp.
pytestmark = [pytest.mark.e2e, pytest.mark.kcp_checks, pytest.mark.xdist_group("health-kcp")]

DATA_UID_PATH = "/clusters/system:shard/apis/core.kcp.io/v1alpha1/logicalclusters/cluster"
REGISTRATION_PATH = "/clusters/root/apis/core.kcp.io/v1alpha1/shards/shard-1"
ACCEPT = "kcpshard.dev/accept-data-uid"
FIGURES = REPO / ".cluster" / "health-figures.json"
WAIT = 150.0
"""A probe runs at most every 25 s, and after failures up to 120 s apart."""


@pytest.fixture(scope="module")
def kcp(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[ShardedKcp]:
    """A root and shard-1 of this module's own, which its tests may break and mend."""
    with uncaptured(pytestconfig):
        binary, _ = kcp_binaries()
        started = start_sharded_kcp(tmp_path_factory.mktemp("health-kcp"), binary)
    try:
        yield started
    finally:
        with uncaptured(pytestconfig):
            started.stop()
            log("health kcp stopped")


def measured(name: str, seconds: float) -> None:
    log(f"measured: {name} {seconds:.1f}s")
    FIGURES.parent.mkdir(exist_ok=True)
    figures = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    figures[name] = round(seconds, 1)
    FIGURES.write_text(json.dumps(figures, indent=2) + "\n")


def secret(name: str, text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {"kubeconfig": text},
    }


def deploy(kcp: ShardedKcp, kubectl: Kubectl, ns: str) -> float:
    """Secrets and Shards for the real root and shard-1; the seconds until both are verified."""
    start = time.monotonic()
    apply(
        kubectl,
        ns,
        secret("root-admin", kcp.root.admin_kubeconfig.read_text()),
        secret("shard-1-admin", kcp.shard.admin_kubeconfig.read_text()),
        secret("cache-kubeconfig", "unused: the kwok pods do not run kcp"),
        shard("root", "0.34.0", adminKubeconfigSecretRef={"name": "root-admin"}),
        shard(
            "shard-1",
            "0.34.0",
            rootShardRef={"name": "root"},
            cache={"kubeconfigSecretRef": {"name": "cache-kubeconfig"}},
            adminKubeconfigSecretRef={"name": "shard-1-admin"},
        ),
    )
    for name in ("root", "shard-1"):
        wait_condition(kubectl, ns, name, "DataVerified", "Verified")
    return time.monotonic() - start


def wait_condition(
    kubectl: Kubectl, ns: str, name: str, type_: str, reason: str, timeout: float = WAIT
) -> dict[str, Any]:
    def seen() -> dict[str, Any] | None:
        found = condition(get(kubectl, ns, "shard", name), type_)
        return found if found.get("reason") == reason else None

    found: dict[str, Any] = wait_for(seen, timeout, f"{type_} {reason} on Shard {name}")
    return found


def data_uid(kcp: ShardedKcp, which: str) -> str:
    process = kcp.root if which == "root" else kcp.shard
    status, body = kcp.request(process, "GET", DATA_UID_PATH)
    assert status == 200, body
    return str(body["metadata"]["uid"])


def assert_ready(kubectl: Kubectl, ns: str, name: str) -> None:
    obj = get(kubectl, ns, "shard", name)
    assert (condition(obj, "Ready")["status"], obj["status"]["phase"]) == ("True", "Ready")
    assert condition(obj, "Degraded")["status"] == "False"
    assert condition(obj, "DataVerified")["status"] == "True"


def test_ready_is_verified_by_kcp(
    kcp: ShardedKcp, operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    measured("verified Ready after apply", deploy(kcp, kubectl, namespace))
    for name in ("root", "shard-1"):
        assert_ready(kubectl, namespace, name)
        assert get(kubectl, namespace, "shard", name)["status"]["dataUID"] == data_uid(kcp, name)
    shown = kubectl("get", "shards", "-n", namespace)
    assert "VERIFIED" in shown.splitlines()[0]


def test_a_lost_registration_is_degraded_until_kcp_registers_the_shard_again(
    kcp: ShardedKcp, operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    deploy(kcp, kubectl, namespace)
    status, body = kcp.request(kcp.root, "DELETE", REGISTRATION_PATH)
    assert status == 200, body
    deleted = time.monotonic()
    lost = wait_condition(kubectl, namespace, "shard-1", "Degraded", "ShardNotRegistered")
    measured("ShardNotRegistered after the registration was deleted", time.monotonic() - deleted)
    assert "kubectl rollout restart deployment/shard-1-kcp" in lost["message"]
    obj = get(kubectl, namespace, "shard", "shard-1")
    assert (condition(obj, "Ready")["status"], obj["status"]["phase"]) == ("False", "Degraded")
    assert "ShardNotRegistered" in events(kubectl, namespace, "shard-1")
    assert_ready(kubectl, namespace, "root")

    measured("shard-1 restart (kcp registers it again)", kcp.restart_shard(kcp.shard.binary))
    restarted = time.monotonic()
    wait_condition(kubectl, namespace, "shard-1", "DataVerified", "Verified")
    measured("ShardNotRegistered cleared after shard-1 was ready", time.monotonic() - restarted)
    assert_ready(kubectl, namespace, "shard-1")


def test_a_root_back_on_an_empty_etcd_is_data_lost_until_its_etcd_is_restored(
    kcp: ShardedKcp,
    operator_process: OperatorProcess,
    kubectl: Kubectl,
    namespace: str,
    tmp_path: Path,
) -> None:
    deploy(kcp, kubectl, namespace)
    recorded = data_uid(kcp, "root")
    backup = tmp_path / "root-etcd"
    measured("root restart on an empty etcd", kcp.restart_root_on_empty_etcd(backup))
    restarted = time.monotonic()
    lost = wait_condition(kubectl, namespace, "root", "Degraded", "DataLost")
    measured("DataLost after the root was ready on an empty etcd", time.monotonic() - restarted)
    now = data_uid(kcp, "root")
    assert now != recorded
    assert f"{ACCEPT}={now}" in lost["message"]
    obj = get(kubectl, namespace, "shard", "root")
    assert obj["status"]["dataUID"] == recorded
    assert (condition(obj, "Ready")["status"], obj["status"]["phase"]) == ("False", "Degraded")
    assert "DataLost" in events(kubectl, namespace, "root")
    shard_1 = wait_condition(kubectl, namespace, "shard-1", "Degraded", "RootDataLost")
    assert "does not list shard-1" in shard_1["message"]

    measured("root restart on its restored etcd", kcp.restart_root_on(backup))
    restored = time.monotonic()
    for name in ("root", "shard-1"):
        wait_condition(kubectl, namespace, name, "DataVerified", "Verified")
    measured("DataLost cleared after the restored root was ready", time.monotonic() - restored)
    assert data_uid(kcp, "root") == recorded
    for name in ("root", "shard-1"):
        assert_ready(kubectl, namespace, name)


def test_an_accepted_empty_root_clears_once_the_shard_registers_again(
    kcp: ShardedKcp,
    operator_process: OperatorProcess,
    kubectl: Kubectl,
    namespace: str,
    tmp_path: Path,
) -> None:
    deploy(kcp, kubectl, namespace)
    kcp.restart_root_on_empty_etcd(tmp_path / "root-etcd")
    wait_condition(kubectl, namespace, "root", "Degraded", "DataLost")
    now = data_uid(kcp, "root")
    kubectl("annotate", "shard", "root", "-n", namespace, f"{ACCEPT}={now}")
    accepted = time.monotonic()
    wait_condition(kubectl, namespace, "root", "DataVerified", "Verified")
    measured("DataLost cleared after the annotation", time.monotonic() - accepted)
    assert get(kubectl, namespace, "shard", "root")["status"]["dataUID"] == now
    wait_condition(kubectl, namespace, "shard-1", "Degraded", "ShardNotRegistered")
    # The root answers /readyz (and the operator finds shard-1 unregistered: the 404 of a
    # resource not served yet looks the same) before it serves what shard-1 reads when it
    # starts; restarted earlier, shard-1 has been seen never to answer /readyz.
    measured(
        "root serving what shard-1 needs after ShardNotRegistered", kcp.wait_root_serves_shards()
    )
    # A shard kept on its data cannot start against a root made again empty: its bindings name
    # the old root's exports (kcp answers "migration has to happen first" and never gets
    # ready), so shard-1 comes back empty too, and its loss is accepted like the root's.
    measured(
        "shard-1 restart on an empty etcd against the accepted root",
        kcp.restart_shard_on_empty_etcd(tmp_path / "shard-1-etcd"),
    )
    wait_condition(kubectl, namespace, "shard-1", "Degraded", "DataLost")
    kubectl("annotate", "shard", "shard-1", "-n", namespace, f"{ACCEPT}={data_uid(kcp, 'shard-1')}")
    wait_condition(kubectl, namespace, "shard-1", "DataVerified", "Verified")
    assert_ready(kubectl, namespace, "shard-1")
