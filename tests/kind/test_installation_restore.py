"""The way back from a minor upgrade, on real pods (make e2e-upgrade, make e2e-backup): a root
and shard-1 on embedded etcd (one replica each, ``spec.backup`` on one claim, the operator's
own PKI, the root's embedded cache) and a FrontProxy at kcp v0.28.0, with workspaces and
objects on both shards, made directly and through the front-proxy.

The installation is bumped to v0.30.0: the root waits (``WaitingForBackups``) until both shards
list a verified ``BeforeUpgrade`` backup taken from their running pods, then rolls first; the
timeline shows the backups and their duration, and a pod reads through the front-proxy every
second (the outage is compared with the upgrade without backups in docs/upgrades.md). After
the upgrade, one more workspace with its objects on each shard. Then
``kcp-shard-operator restore --installation root --set-version``: both Shards set back to
v0.28.0 and restored from the backups of that upgrade, the root started first. Every object
made before the backups is back with its UID and content, those made after them are gone, both
shards Ready and ``DataVerified=True`` at v0.28.0, and reads through the front-proxy work.
The restore's timeline (each Shard's phase as the CLI prints it, the Jobs' times) and the
figures go to ``bench/results/installation-restore.json``.

Embedded etcd and one replica: ``spec.backup`` needs the shard's etcd in its pod, which
test_upgrade.py's shards (two replicas each on an etcd pod) do not have.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.kcpdata import KcpData
from testkit.kube import Cluster, shard_ready
from testkit.tools import log, pinned_version
from testkit.wait import wait_for

from .backups import namespace_with_backup_image, restore_printed
from .durability import RESULTS, admin_kubeconfig, front_proxy_kubeconfig, shard_apis
from .kind import (
    NEW,
    condition_of,
    describe_failure,
    kcp_image,
    kcp_object,
    load_kcp_image,
    shard_object,
)
from .reader import FrontProxyReader, Read, failures, longest_failure
from .timeline import FRONT_PROXY, SHARDS, Timeline, longest_outage

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

NEXT = pinned_version("KCP_NEXT_VERSION").removeprefix("v")
CLAIM = "kcp-backups"
PROXY = "kcp"
COMPONENTS = (*SHARDS, FRONT_PROXY)
ROLL_TIMEOUT = 900


@pytest.fixture
def restore_namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    assert load_kcp_image(kind_cluster, "kcp-upgrade", "KCP_UPGRADE_VERSION") == NEW
    assert load_kcp_image(kind_cluster, "kcp-next", "KCP_NEXT_VERSION") == NEXT
    with namespace_with_backup_image(kind_cluster, "kcp-restore") as namespace:
        yield namespace


def installation(namespace: str, version: str) -> list[dict[str, Any]]:
    """The backup claim, root and shard-1 with spec.backup, and the FrontProxy."""
    repository, _ = kcp_image()
    image = {"repository": repository, "tag": f"v{version}", "pullPolicy": "Never"}
    backup = {"claimRef": {"name": CLAIM}}
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }

    def kcp(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "kcpshard.dev/v1alpha1",
            "kind": kind,
            "metadata": {"name": name},
            "spec": {"version": version, "image": image, **spec},
        }

    return [
        claim,
        kcp("Shard", "root", {"backup": backup}),
        kcp("Shard", "shard-1", {"backup": backup, "rootShardRef": {"name": "root"}}),
        kcp("FrontProxy", PROXY, {"rootShardRef": {"name": "root"}}),
    ]


def ready_at(cluster: Cluster, namespace: str, version: str) -> bool:
    """Both Shards and the FrontProxy Ready at kcp ``version``."""
    return all(
        shard_ready(kcp_object(cluster, namespace, kind, name), version)
        for kind, name in (("shard", "root"), ("shard", "shard-1"), ("frontproxy", PROXY))
    )


def upgrade_backups(cluster: Cluster, namespace: str, minor: str) -> dict[str, dict[str, Any]]:
    """Per shard, its BeforeUpgrade backup for the move to ``minor`` (those listed so far)."""
    found = {}
    for shard in SHARDS:
        for entry in (shard_object(cluster, namespace, shard).get("status") or {}).get(
            "backups"
        ) or []:
            if entry.get("trigger") == "BeforeUpgrade" and entry.get("upgradeTo") == minor:
                found[shard] = entry
                break
    return found


def both_backups(cluster: Cluster, namespace: str, minor: str) -> dict[str, dict[str, Any]] | None:
    found = upgrade_backups(cluster, namespace, minor)
    return found if len(found) == len(SHARDS) else None


def bump(cluster: Cluster, namespace: str, version: str) -> None:
    patch = json.dumps({"spec": {"version": version, "image": {"tag": f"v{version}"}}})
    for kind, name in (("shard", "root"), ("shard", "shard-1"), ("frontproxy", PROXY)):
        cluster.kubectl("patch", kind, name, "-n", namespace, "--type=merge", "-p", patch)


def wait_ready(cluster: Cluster, namespace: str, version: str, timeline: Timeline) -> None:
    wait_for(
        partial(ready_at, cluster, namespace, version), ROLL_TIMEOUT,
        f"root, shard-1 and the front-proxy Ready at kcp {version}", interval=3,
    )  # fmt: skip
    timeline.mark(f"root, shard-1 and the front-proxy Ready at {version}")


def restore_installation(cluster: Cluster, namespace: str, timeline: Timeline) -> list[str]:
    """``kcp-shard-operator restore --installation root --set-version``, each printed line
    marked on the timeline as it comes; the lines."""
    args = ["--installation", "root", "-n", namespace, "--set-version"]
    return restore_printed(cluster, args, timeline, ROLL_TIMEOUT)


def seconds(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def restore_figures(cluster: Cluster, namespace: str) -> dict[str, Any]:
    """Per shard: the restore's phases as its status recorded them, and its Job's run."""
    figures: dict[str, Any] = {}
    for shard in SHARDS:
        record = shard_object(cluster, namespace, shard)["status"]["restore"]
        job = json.loads(
            cluster.kubectl("get", "job", record["job"], "-n", namespace, "-o", "json")
        )["status"]
        figures[shard] = {
            "backup": record["backup"],
            "request to done seconds": round(
                seconds(record["finished"]) - seconds(record["started"]), 1
            ),
            "job seconds": round(seconds(job["completionTime"]) - seconds(job["startTime"]), 1),
            "job started after the request seconds": round(
                seconds(job["startTime"]) - seconds(record["started"]), 1
            ),
        }
    return figures


def data_verified(cluster: Cluster, namespace: str, shard: str) -> bool:
    return condition_of(cluster, namespace, shard, "DataVerified").get("status") == "True"


def reads_good_since(reader: FrontProxyReader, keys: list[str], since: float) -> bool:
    """At least three reads of each key since ``since``, the last three good."""
    reads = reader.reads()
    for key in keys:
        recent = [r for r in reads if r.key == key and r.at > since]
        if len(recent) < 3 or not all(r.ok for r in recent[-3:]):
            return False
    return True


def read_outages(reads: list[Read], keys: list[str], start: float, end: float) -> dict[str, Any]:
    return {
        key: {
            "reads": len([r for r in reads if r.key == key and start <= r.at <= end]),
            "failed": len(failures(reads, key, start, end)),
            "longest_failure_seconds": round(longest_failure(reads, key, start, end), 1),
        }
        for key in keys
    }


def test_a_whole_installation_goes_back_to_the_backups_taken_before_its_upgrade(
    kind_cluster: Cluster, restore_namespace: str, tmp_path: Path
) -> None:
    ns, kubectl = restore_namespace, kind_cluster.kubectl
    timeline = Timeline(kind_cluster, ns, COMPONENTS)
    stack = ExitStack()
    reader: FrontProxyReader | None = None
    keys: list[str] = []
    figures: dict[str, Any] = {}
    try:
        kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(installation(ns, NEW)))
        timeline.start()
        timeline.mark(f"applied root, shard-1 (spec.backup) and the front-proxy at {NEW}")
        wait_ready(kind_cluster, ns, NEW, timeline)
        front = ("kcp-front-proxy", front_proxy_kubeconfig(kind_cluster, ns, tmp_path))
        root_admin = admin_kubeconfig(kind_cluster, ns, "root", tmp_path)
        apis = stack.enter_context(shard_apis(kind_cluster, ns, root_admin, SHARDS, front))
        data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="before")
        timeline.mark(f"data created: {len(data.records)} objects, through the front-proxy too")
        data_uids = {s: shard_object(kind_cluster, ns, s)["status"]["dataUID"] for s in SHARDS}
        paths = data.through_front_proxy()
        keys = sorted(paths)
        reader = FrontProxyReader(kind_cluster, ns, "kcp-front-proxy-admin-kubeconfig", paths)
        reader.start()
        stack.callback(reader.stop)
        wait_for(
            lambda: {r.key for r in reader.reads() if r.ok} == set(keys) if reader else False,
            60, f"a good read of each of {keys}", interval=2,
        )  # fmt: skip
        timeline.mark(f"reading {keys} through the front-proxy every second, from a pod")

        # The upgrade: the installation snapshot first, from the running shards.
        minor = ".".join(NEXT.split(".")[:2])
        began = time.time()
        bump(kind_cluster, ns, NEXT)
        timeline.mark(f"root, shard-1 and the front-proxy bumped to {NEXT}")
        backups = wait_for(
            partial(both_backups, kind_cluster, ns, minor), ROLL_TIMEOUT,
            "a BeforeUpgrade backup of each shard", interval=1,
        )  # fmt: skip
        listed = time.time() - began
        for shard, entry in backups.items():
            timeline.mark(
                f"BeforeUpgrade backup {entry['name']} of {shard} listed: kcp "
                f"{entry['kcpVersion']}, {entry['durationSeconds']} s, {entry['size']} bytes, "
                f"{entry['keys']} keys"
            )
        wait_ready(kind_cluster, ns, NEXT, timeline)
        upgraded = time.time()
        figures["upgrade with the installation snapshot"] = {
            "bump to both backups listed seconds": round(listed, 1),
            "bump to all Ready seconds": round(upgraded - began, 1),
            "backups": {
                shard: {k: entry[k] for k in ("name", "time", "durationSeconds", "size", "keys")}
                for shard, entry in backups.items()
            },
            "front-proxy reads": read_outages(reader.reads(), keys, began, upgraded),
        }
        first_new = min(
            s.at for s in timeline.samples if any(p.version == NEXT for p in s.pods["root"])
        )
        log(f"first root pod at {NEXT}: {first_new:.0f}s on the timeline")
        for shard in SHARDS:
            assert backups[shard]["kcpVersion"] == NEW
            # Each names the installation: the root's data UID.
            assert backups[shard]["installation"] == data_uids["root"], backups[shard]
            # Taken before the first pod of the new minor started.
            taken = timeline.at(seconds(backups[shard]["time"]))
            assert taken < first_new, (shard, taken, first_new)
        data.assert_intact(apis, f"the upgrade to {NEXT} with its backups")

        # After the snapshot: one more workspace with its objects on each shard.
        after = KcpData.create(
            {s: apis[s] for s in SHARDS}, tmp_path / "after-checks.txt", prefix="after"
        )
        timeline.mark(f"after the upgrade: {len(after.records)} more objects")

        # The way back: the whole installation from the backups of that upgrade.
        began = time.time()
        printed = restore_installation(kind_cluster, ns, timeline)
        restored = time.time()
        log("kcp-shard-operator restore --installation root:\n" + "\n".join(printed))
        assert any("root from " + backups["root"]["name"] in line for line in printed), printed
        assert any("shard-1 from " + backups["shard-1"]["name"] in line for line in printed)
        for shard in SHARDS:
            obj = shard_object(kind_cluster, ns, shard)
            assert obj["spec"]["version"] == NEW
            assert obj["spec"]["image"]["tag"] == f"v{NEW}"
            assert obj["status"]["restore"]["phase"] == "Done"
            assert condition_of(kind_cluster, ns, shard, "Restored")["status"] == "True"
            assert condition_of(kind_cluster, ns, shard, "Ready")["status"] == "True"
            assert obj["status"]["version"] == NEW
        figures["restore"] = restore_figures(kind_cluster, ns)
        figures["restore"]["command seconds"] = round(restored - began, 1)
        root_done = seconds(shard_object(kind_cluster, ns, "root")["status"]["restore"]["finished"])
        log(f"restore figures: {json.dumps(figures['restore'], indent=1)}")
        # The root started first: shard-1's pod started only once the root's restore was done.
        starts = [
            s.at for s in timeline.samples
            if s.at > timeline.at(began) and any(p.version == NEW for p in s.pods["shard-1"])
        ]  # fmt: skip
        assert starts, "shard-1 never ran again"
        assert min(starts) >= timeline.at(root_done) - 2.0, (min(starts), timeline.at(root_done))

        data.assert_intact(apis, "the installation restored to its backups before the upgrade")
        gone = [f for f in after.verify(apis, "made after the backups") if f.record.kind != "Shard"]
        assert gone
        assert {f.state for f in gone} == {"missing"}, [(f.record.name, f.state) for f in gone]
        assert len(gone) == len([r for r in after.records if r.kind != "Shard"])
        for shard in SHARDS:
            wait_for(
                partial(data_verified, kind_cluster, ns, shard), 180,
                f"{shard} DataVerified after the restore", interval=3,
            )  # fmt: skip
            assert shard_object(kind_cluster, ns, shard)["status"]["dataUID"] == data_uids[shard]
        wait_for(
            partial(reads_good_since, reader, keys, restored), 120,
            "three good reads of each through the front-proxy after the restore", interval=2,
        )  # fmt: skip
        timeline.mark("reads through the front-proxy good again")
        reads = reader.reads()
        figures["restore"]["front-proxy reads"] = read_outages(reads, keys, began, time.time())
    except BaseException:
        timeline.stop()
        stack.close()
        print(timeline.table())
        print(describe_failure(kind_cluster, ns))
        raise
    timeline.stop()
    stack.close()
    print(f"\nTimeline (pods: kcp version / R ready / F flag):\n{timeline.table()}")
    for shard in SHARDS:
        log(f"{shard}: longest /readyz failure {longest_outage(timeline.samples, shard):.0f}s")
    log(f"installation restore figures: {json.dumps(figures, indent=1)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "installation-restore.json").write_text(json.dumps(figures, indent=1) + "\n")
