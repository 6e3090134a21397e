"""A pass over a Shard asked to restore a backup: refused without harm when it may not be done;
else stopped, restored by a Job, started at the backup's version, DataVerified on its UID."""

from __future__ import annotations

from typing import Any

from kcp_shard_operator.core.api.meta import VERSION_ANNOTATION
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.restore import RESTORE_ANNOTATION
from tests.conftest import NO_PKI, non_root_object, shard_object
from tests.fake_kube import SECRETS, Effects, FakeKube, context, respec, run, settle, watched
from tests.unit.backup.test_pass_backup import BACKUP, CLAIM
from tests.unit.controller.test_pass import condition, status
from tests.watch import Watches

ENTRY: JSON = {
    "name": "root-20261207T110700Z",
    "time": "2026-12-07T11:07:00Z",
    "trigger": "BeforeUpgrade",
    "kcpVersion": "0.27.1",
    "claim": "backups",
    "path": "root/root-20261207T110700Z.db",
    "sha256": "ab" * 32,
    "dataUID": "uid-of-the-backup",
    "size": 10,
}


def deployment(kube: FakeKube) -> JSON:
    found: JSON = kube.objects[("Deployment", "ns", "root-kcp")]
    return found


def ask(ctx: Any, kube: FakeKube, name: str) -> None:
    obj = kube.objects[("Shard", "ns", "root")]
    obj["metadata"]["annotations"] = {RESTORE_ANNOTATION: name}
    watched(ctx, kube.put(obj))


def up_to_the_job(ctx: Any, kube: FakeKube) -> JSON:
    """Ask for the restore of ENTRY and run the passes up to its Job (recorded, the shard
    stopped, the Job made); the Job."""
    ask(ctx, kube, ENTRY["name"])
    run(ctx, "root")
    run(ctx, "root")
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    run(ctx, "root")
    (job_key,) = [key for key in kube.objects if key[0] == "Job"]
    return kube.objects[job_key]


def upgraded() -> tuple[Any, FakeKube, Effects]:
    """root at kcp 0.28.0 with the backup taken before its upgrade from 0.27.1."""
    obj = shard_object(**NO_PKI, backup=BACKUP, version="0.28.0")
    kube = FakeKube({**obj, "status": {"backups": [ENTRY], "dataUID": "uid-now"}}, CLAIM)
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    return ctx, kube, effects


def test_an_unknown_backup_or_another_version_is_refused_and_nothing_is_touched() -> None:
    ctx, kube, _ = upgraded()
    before = dict(deployment(kube))
    ask(ctx, kube, "no-such-backup")
    run(ctx, "root")
    assert condition(kube, "root", "Restored") == ("False", "RestoreRefused")
    assert "not one of this shard's verified backups" in status(kube, "root")["restore"]["message"]
    ask(ctx, kube, ENTRY["name"])
    run(ctx, "root")
    assert condition(kube, "root", "Restored") == ("False", "RestoreRefused")
    assert (
        "set spec.version (and spec.image.tag, if set) to 0.27.1"
        in (status(kube, "root")["restore"]["message"])
    )
    assert deployment(kube) == before
    assert not [key for key in kube.objects if key[0] == "Job"]


def test_a_restore_stops_restores_and_starts_the_backups_version() -> None:
    ctx, kube, effects = upgraded()
    respec(ctx, kube, "root", version="0.27.1")
    ask(ctx, kube, ENTRY["name"])
    run(ctx, "root")
    # Recorded first, nothing stopped yet: the status must keep the record.
    assert status(kube, "root")["restore"]["phase"] == "Stopping"
    assert (
        "everything the shard stored after it is replaced"
        in (status(kube, "root")["restore"]["message"])
    )
    assert deployment(kube)["spec"]["replicas"] == 1
    run(ctx, "root")
    # Stopping: zero replicas, no refusal of the downgrade.
    assert deployment(kube)["spec"]["replicas"] == 0
    assert status(kube, "root")["restore"]["phase"] == "Stopping"
    assert condition(kube, "root", "Restored") == ("Unknown", "Stopping")
    assert condition(kube, "root", "Degraded")[1] != "DowngradeRefused"
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    run(ctx, "root")
    # Restoring: the Job, the shard still stopped.
    (job_key,) = [key for key in kube.objects if key[0] == "Job"]
    job = kube.objects[job_key]
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert f"{'ab' * 32}  /backups/root/root-20261207T110700Z.db" in script
    assert "--name default --initial-cluster default=https://localhost:2380" in script
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert [v["persistentVolumeClaim"]["claimName"] for v in volumes] == [
        "root-kcp-data",
        "backups",
    ]
    assert job["metadata"]["ownerReferences"][0]["name"] == "root"
    assert status(kube, "root")["restore"]["phase"] == "Restoring"
    assert deployment(kube)["spec"]["replicas"] == 0
    kube.put({**job, "status": {"succeeded": 1}})
    run(ctx, "root")
    # Starting: the backup's version, its data UID recorded.
    assert status(kube, "root")["restore"]["phase"] == "Starting"
    assert status(kube, "root")["dataUID"] == "uid-of-the-backup"
    run(ctx, "root")  # the pass its status write brings
    assert deployment(kube)["spec"]["replicas"] == 1
    template = deployment(kube)["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "0.27.1"
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    run(ctx, "root")
    assert status(kube, "root")["restore"]["phase"] == "Done"
    assert condition(kube, "root", "Restored") == ("True", "Done")
    assert "Restored" in [event.reason for _, event in effects.events]
    # Answered once: the annotation left in place starts nothing again.
    run(ctx, "root")
    assert status(kube, "root")["restore"]["phase"] == "Done"
    assert len([key for key in kube.objects if key[0] == "Job"]) == 1


def test_a_failed_job_leaves_the_data_and_starts_the_shard_again() -> None:
    ctx, kube, effects = upgraded()
    respec(ctx, kube, "root", version="0.27.1")
    kube.put({**up_to_the_job(ctx, kube), "status": {"failed": 1}})
    run(ctx, "root")
    assert condition(kube, "root", "Restored") == ("False", "RestoreFailed")
    assert "RestoreFailed" in [event.reason for _, event in effects.events]
    run(ctx, "root")
    # Back at its running version (the downgrade refused again), one replica, same data UID.
    assert deployment(kube)["spec"]["replicas"] == 1
    template = deployment(kube)["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "0.28.0"
    assert condition(kube, "root", "Degraded") == ("True", "DowngradeRefused")
    assert status(kube, "root")["dataUID"] == "uid-now"


def test_a_restore_at_the_running_version_is_done_once_its_pod_is_ready() -> None:
    obj = shard_object(**NO_PKI, backup=BACKUP, version="0.27.1")
    kube = FakeKube({**obj, "status": {"backups": [ENTRY], "dataUID": "uid-now"}}, CLAIM)
    ctx = context(kube)
    settle(ctx, kube, "root")
    kube.put({**up_to_the_job(ctx, kube), "status": {"succeeded": 1}})
    run(ctx, "root")
    run(ctx, "root")
    # The stopped Deployment has rolled out at zero replicas, at the same version: not done.
    assert status(kube, "root")["restore"]["phase"] == "Starting"
    assert deployment(kube)["spec"]["replicas"] == 1
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    run(ctx, "root")
    assert status(kube, "root")["restore"]["phase"] == "Done"


def test_a_restore_the_status_does_not_keep_stops_nothing() -> None:
    """A CRD older than the operator prunes status.restore: nothing is stopped, no Job made."""
    ctx, kube, _ = upgraded()
    respec(ctx, kube, "root", version="0.27.1")
    ask(ctx, kube, ENTRY["name"])
    for _ in range(3):
        run(ctx, "root")
        kept = kube.objects[("Shard", "ns", "root")]
        kept["status"].pop("restore", None)
        watched(ctx, kube.put(kept))
    assert deployment(kube)["spec"]["replicas"] == 1
    assert not [key for key in kube.objects if key[0] == "Job"]


SHARD_ENTRY: JSON = {
    **ENTRY,
    "name": "shard-1-20261207T110701Z",
    "path": "shard-1/shard-1-20261207T110701Z.db",
    "dataUID": "uid-of-shard-1",
}


def installation_asked() -> tuple[Any, FakeKube]:
    """root and shard-1 at kcp 0.28.0 with their backups from before the upgrade, both set
    back to 0.27.1 and asked to restore (the root first, as restore --installation does)."""
    root = shard_object(**NO_PKI, backup=BACKUP, version="0.28.0")
    shard = non_root_object(**NO_PKI, backup=BACKUP, version="0.28.0")
    kube = FakeKube(
        {**root, "status": {"backups": [ENTRY], "dataUID": "uid-now"}},
        {**shard, "status": {"backups": [SHARD_ENTRY], "dataUID": "uid-1-now"}},
        CLAIM,
        *SECRETS,
    )
    ctx = context(kube)
    settle(ctx, kube, "root", "shard-1")
    for name, entry in (("root", ENTRY), ("shard-1", SHARD_ENTRY)):
        respec(ctx, kube, name, version="0.27.1")
        obj = kube.objects[("Shard", "ns", name)]
        obj["metadata"]["annotations"] = {RESTORE_ANNOTATION: entry["name"]}
        watched(ctx, kube.put(obj))
        run(ctx, name)
    return ctx, kube


def jobs(kube: FakeKube) -> list[str]:
    return sorted(key[2] for key in kube.objects if key[0] == "Job")


def test_a_whole_installation_stops_before_the_root_restores_and_the_root_starts_first() -> None:
    ctx, kube = installation_asked()
    run(ctx, "root", "shard-1")
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    run(ctx, "root")
    # The root has stopped, shard-1 not yet: no Job for the root.
    assert jobs(kube) == []
    assert (
        "waits until shard-1, restored with it, has stopped"
        in (status(kube, "root")["restore"]["message"])
    )
    watched(ctx, kube.roll_out("ns", "shard-1-kcp"))
    run(ctx, "shard-1", "root")
    root_job, shard_job = jobs(kube)
    assert root_job.startswith("root-")
    assert shard_job.startswith("shard-1-")
    kube.put({**kube.objects[("Job", "ns", shard_job)], "status": {"succeeded": 1}})
    run(ctx, "shard-1", "shard-1")
    # shard-1's data is back, but it starts only once the root runs on its own.
    assert status(kube, "shard-1")["restore"]["phase"] == "Restoring"
    assert (
        "starts once root shard root runs on its restored data (its restore: Restoring)"
        in (status(kube, "shard-1")["restore"]["message"])
    )
    assert kube.objects[("Deployment", "ns", "shard-1-kcp")]["spec"]["replicas"] == 0
    kube.put({**kube.objects[("Job", "ns", root_job)], "status": {"succeeded": 1}})
    run(ctx, "root", "root")
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    run(ctx, "root")
    assert status(kube, "root")["restore"]["phase"] == "Done"
    run(ctx, "shard-1", "shard-1")
    assert status(kube, "shard-1")["restore"]["phase"] == "Starting"
    assert kube.objects[("Deployment", "ns", "shard-1-kcp")]["spec"]["replicas"] == 1
    watched(ctx, kube.roll_out("ns", "shard-1-kcp"))
    run(ctx, "shard-1")
    assert status(kube, "shard-1")["restore"]["phase"] == "Done"
    assert status(kube, "shard-1")["dataUID"] == "uid-of-shard-1"


def test_a_backup_of_another_installation_is_refused_and_nothing_is_touched() -> None:
    obj = shard_object(**NO_PKI, backup=BACKUP, version="0.27.1")
    other = {**ENTRY, "installation": "uid-of-another-root"}
    kube = FakeKube({**obj, "status": {"backups": [other], "dataUID": "uid-now"}}, CLAIM)
    ctx = context(kube)
    settle(ctx, kube, "root")
    before = dict(deployment(kube))
    ask(ctx, kube, ENTRY["name"])
    run(ctx, "root")
    run(ctx, "root")
    assert condition(kube, "root", "Restored") == ("False", "RestoreRefused")
    message = status(kube, "root")["restore"]["message"]
    assert (
        "is of another installation (its root shard's data UID was uid-of-another-root" in message
    )
    assert deployment(kube) == before
    assert not [key for key in kube.objects if key[0] == "Job"]


def test_the_end_of_the_restore_job_brings_the_pass_that_starts_the_shard() -> None:
    """Jobs are watched: the shard starts when its Job ends, not at the next resync."""
    ctx, kube, _ = upgraded()
    respec(ctx, kube, "root", version="0.27.1")
    job = up_to_the_job(ctx, kube)
    assert status(kube, "root")["restore"]["phase"] == "Restoring"
    Watches(ctx, kube).deliver("MODIFIED", kube.put({**job, "status": {"succeeded": 1}}))
    assert status(kube, "root")["restore"]["phase"] == "Starting"
