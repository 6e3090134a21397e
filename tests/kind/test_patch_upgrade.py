"""A patch upgrade rolls without downtime, and its rollback converges (make e2e-patch-upgrade):
a root shard and shard-1, two kcp replicas each on an external etcd pod, from kcp v0.28.0 to
the patch release v0.28.1 and back to v0.28.0, both built from their Go modules.

Within one minor release the operator rolls one pod at a time with a surge pod
(``maxUnavailable: 0``) under the PodDisruptionBudget: ``/readyz`` through each shard's Service,
read every second, must never fail, and the shards' workspaces and objects
(:mod:`testkit.kcpdata`) must be intact after each step. The figures go to
``bench/results/patch-upgrade.json``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testkit.kcpdata import KcpData
from testkit.kube import Cluster
from testkit.tools import log, pinned_version
from testkit.wait import wait_for
from tests.e2e.pki import Pki

from .durability import RESULTS, DataSteps, pki_kubeconfig, shard_apis
from .kind import (
    bump,
    describe_failure,
    kcp_namespace,
    load_kcp_image,
    shards_on_etcd_pod,
    wait_version,
)
from .timeline import FLAG, REPLICAS, SHARDS, ReadyzProbe, Timeline, converged

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

ROLL_TIMEOUT = 600


@pytest.fixture
def patch_namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    load_kcp_image(kind_cluster, "kcp-upgrade", "KCP_UPGRADE_VERSION")
    load_kcp_image(kind_cluster, "kcp-patch", "KCP_PATCH_VERSION")
    with kcp_namespace(kind_cluster, "kcp-patch") as name:
        yield name


def test_patch_upgrade_and_rollback_never_fail_readyz(
    kind_cluster: Cluster, patch_namespace: str, tmp_path: Path
) -> None:
    base = pinned_version("KCP_UPGRADE_VERSION").removeprefix("v")
    patch = pinned_version("KCP_PATCH_VERSION").removeprefix("v")
    ns = patch_namespace
    pki = Pki.create(tmp_path / "pki")
    shards = shards_on_etcd_pod(kind_cluster, ns, pki, base, REPLICAS)
    kind_cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(shards))
    timeline = Timeline(kind_cluster, ns)
    probe = ReadyzProbe(kind_cluster, ns, timeline.started)
    figures: dict[str, object] = {"from": base, "to": patch, "replicas": REPLICAS}
    try:
        wait_version(kind_cluster, ns, SHARDS, base, ROLL_TIMEOUT)
        with shard_apis(kind_cluster, ns, pki_kubeconfig(pki, tmp_path), SHARDS) as apis:
            data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="patch")
            steps = DataSteps(data, apis, "patch-upgrade-data", "external-etcd")
            timeline.start()
            probe.start()
            timeline.mark(f"both Ready at {base}, {len(data.records)} objects created")
            for step, version in ((f"upgrade to {patch}", patch), (f"rollback to {base}", base)):
                begun = time.monotonic() - timeline.started
                bump(kind_cluster, ns, SHARDS, version)
                timeline.mark(f"both Shards set to {version}")
                wait_for(
                    lambda version=version: (
                        bool(timeline.samples)  # type: ignore[misc]
                        and all(converged(timeline.samples[-1], s, version) for s in SHARDS)
                    ),
                    ROLL_TIMEOUT,
                    f"both shards converged at {version}",
                    interval=2,
                )
                ended = time.monotonic() - timeline.started
                timeline.mark(f"both converged at {version}")
                readings = {s: probe.between(s, begun, ended) for s in SHARDS}
                failed = {s: [r for r in readings[s] if not r.ok] for s in SHARDS}
                figures[step] = {
                    "seconds": round(ended - begun, 1),
                    **{f"{s} readyz reads": len(readings[s]) for s in SHARDS},
                    **{f"{s} readyz failures": len(failed[s]) for s in SHARDS},
                }
                log(f"{step}: {figures[step]}")
                steps.check(step, ended - begun)
                assert not any(failed.values()), f"/readyz failed during the {step}: {failed}"
                for sample in timeline.samples:
                    for shard in SHARDS:
                        allowed = sample.disruptions_allowed[shard]
                        assert allowed is None or allowed >= 0, sample
    except BaseException:
        timeline.stop()
        probe.stop()
        print(timeline.table())
        print(describe_failure(kind_cluster, ns))
        raise
    finally:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "patch-upgrade.json").write_text(json.dumps(figures, indent=2) + "\n")
    timeline.stop()
    probe.stop()
    print(f"\nTimeline (pods: kcp version / R ready / F {FLAG}):\n{timeline.table()}")
