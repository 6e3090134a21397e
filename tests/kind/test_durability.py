"""A kcp shard is a database: a root shard and shard-1 on embedded etcd, each on the
PersistentVolumeClaim the operator renders (kind's default StorageClass), keep every workspace
and object through everything the operator or a user does to their pods.

Workspaces pinned to each shard, with a Namespace, a ConfigMap of known content, an APIExport
and an APIBinding inside (:mod:`testkit.kcpdata`), are read again from the shard that holds
them, UID and content compared, after: a rotation of both serving certificates (the operator
rolls the pods), ``kubectl rollout restart``, the operator pod killed, the upgrade from kcp
v0.27.1 to v0.28.0, and the refused downgrade back. The figures of each check go to
``bench/results/durability.json`` (``embedded-etcd``); the external-etcd twin of these checks
is in the upgrade tests (``test_upgrade.py``, ``test_patch_upgrade.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testkit.kcpdata import KcpData
from testkit.kube import Cluster
from testkit.tools import log
from tests.e2e.pki import Pki, shard_secrets

from .durability import (
    DataSteps,
    pki_kubeconfig,
    replace_all_pods,
    restart_operator,
    rollout_restart,
    rotate_serving_certs,
    shard_apis,
)
from .kind import (
    NEW,
    OLD,
    bump,
    condition_of,
    describe_failure,
    kcp_namespace,
    load_kcp_image,
    shard_spec,
    wait_degraded_cleared,
    wait_refused,
    wait_version,
)

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

SHARDS = ("root", "shard-1")
ROLL_TIMEOUT = 600


@pytest.fixture
def durable_namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    assert load_kcp_image(kind_cluster, "kcp-upgrade", "KCP_UPGRADE_VERSION") == NEW
    with kcp_namespace(kind_cluster, "kcp-durable") as name:
        yield name


def test_embedded_etcd_on_its_claim_keeps_every_object(
    kind_cluster: Cluster, durable_namespace: str, tmp_path: Path
) -> None:
    ns, kubectl = durable_namespace, kind_cluster.kubectl
    pki = Pki.create(tmp_path / "pki")
    secrets = shard_secrets(pki, ns, "root", ["shard-1"])
    kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(secrets))
    shards = [
        shard_spec("root", ns, OLD, f"v{OLD}"),
        shard_spec("shard-1", ns, OLD, f"v{OLD}", "root"),
    ]
    kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(shards))
    try:
        wait_version(kind_cluster, ns, SHARDS, OLD, ROLL_TIMEOUT)
        for shard in SHARDS:
            durable = condition_of(kind_cluster, ns, shard, "DataDurable")
            assert (durable.get("status"), durable.get("reason")) == ("True", "ClaimBound")
        with shard_apis(kind_cluster, ns, pki_kubeconfig(pki, tmp_path), SHARDS) as apis:
            data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="durable")
            steps = DataSteps(data, apis, "durability", "embedded-etcd")

            took = replace_all_pods(
                kind_cluster, ns, SHARDS, 1, ROLL_TIMEOUT,
                lambda: rotate_serving_certs(kind_cluster, ns, pki, SHARDS),
            )  # fmt: skip
            steps.check("a rotation of both serving certificates", took)
            took = replace_all_pods(
                kind_cluster, ns, SHARDS, 1, ROLL_TIMEOUT,
                lambda: rollout_restart(kind_cluster, ns, SHARDS),
            )  # fmt: skip
            steps.check("kubectl rollout restart", took)

            started = time.monotonic()
            restart_operator(kind_cluster)
            wait_version(kind_cluster, ns, SHARDS, OLD, ROLL_TIMEOUT)
            steps.check("the operator pod killed", time.monotonic() - started)

            started = time.monotonic()
            bump(kind_cluster, ns, SHARDS, NEW)
            wait_version(kind_cluster, ns, SHARDS, NEW, ROLL_TIMEOUT)
            steps.check(f"the upgrade to {NEW}", time.monotonic() - started)

            started = time.monotonic()
            bump(kind_cluster, ns, SHARDS, OLD)
            wait_refused(kind_cluster, ns, SHARDS, 120)
            steps.check(f"the refused downgrade to {OLD}", time.monotonic() - started)
            bump(kind_cluster, ns, SHARDS, NEW)
            wait_version(kind_cluster, ns, SHARDS, NEW, 120)
            wait_degraded_cleared(kind_cluster, ns, SHARDS, 120)
        log(f"durability figures (embedded etcd): {steps.figures}")
    except BaseException:
        print(describe_failure(kind_cluster, ns))
        raise
