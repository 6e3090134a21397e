"""``kcp-shard-operator restore --installation``: the Shards of the installation, the writes it
asks for (the restore and, only with --set-version, the version in the same write), and its
refusals in one line before anything is written."""

from __future__ import annotations

import pytest

from kcp_shard_operator.cli.restoreinstallation import (
    chosen,
    finished,
    members_of,
    patches,
    progress,
)
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.point import PointError
from kcp_shard_operator.core.backup.restore import RESTORE_ANNOTATION


def backup(shard: str, time: str) -> JSON:
    return {
        "name": f"{shard}-b",
        "time": f"2026-12-07T{time}Z",
        "trigger": "BeforeUpgrade",
        "upgradeTo": "0.30",
        "kcpVersion": "0.28.0",
    }


def shard(name: str, root: str | None, version: str = "0.30.0", tag: str | None = None) -> JSON:
    spec: JSON = {"version": version}
    if root:
        spec["rootShardRef"] = {"name": root}
    if tag:
        spec["image"] = {"tag": tag}
    return {
        "metadata": {"name": name},
        "spec": spec,
        "status": {"version": version, "backups": [backup(name, "12:00:00")]},
    }


SHARDS = [
    shard("shard-1", "root"),
    shard("other-root", None),
    shard("root", None, tag="v0.30.0"),
    shard("elsewhere", "other-root"),
]


def test_the_installation_is_the_root_and_the_shards_naming_it_root_first() -> None:
    assert [obj["metadata"]["name"] for obj in members_of(SHARDS, "root")] == ["root", "shard-1"]
    with pytest.raises(PointError, match="no root Shard 'shard-1'"):
        members_of(SHARDS, "shard-1")


def test_versions_are_set_only_with_the_flag_and_in_the_same_write_as_the_restore() -> None:
    point = chosen(SHARDS, "root", [])
    with pytest.raises(PointError) as refused:
        patches(point, SHARDS, set_version=False)
    assert "root (0.30.0 -> 0.28.0), shard-1 (0.30.0 -> 0.28.0); pass --set-version" in str(
        refused.value
    )
    asked = patches(point, SHARDS, set_version=True)
    assert asked == {
        "root": {
            "metadata": {"annotations": {RESTORE_ANNOTATION: "root-b"}},
            "spec": {"version": "0.28.0", "image": {"tag": "v0.28.0"}},
        },
        "shard-1": {
            "metadata": {"annotations": {RESTORE_ANNOTATION: "shard-1-b"}},
            "spec": {"version": "0.28.0"},
        },
    }


def test_at_the_backups_version_only_the_restore_is_asked() -> None:
    at = [shard("root", None, "0.28.0"), shard("shard-1", "root", "0.28.0")]
    asked = patches(chosen(at, "root", []), at, set_version=False)
    assert all(set(body) == {"metadata"} for body in asked.values())


def test_finished_once_done_and_ready() -> None:
    obj: JSON = {"status": {"restore": {"request": "b", "phase": "Done"}}}
    assert finished(obj, "b") is None
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert finished(obj, "b") is True
    assert finished(obj, "other") is None
    assert finished({"status": {"restore": {"request": "b", "phase": "Refused"}}}, "b") is False


def test_a_backup_of_another_installation_is_refused_before_anything_is_written() -> None:
    foreign = [shard("root", None), shard("shard-1", "root")]
    foreign[0]["status"]["dataUID"] = "uid-of-this-root"
    foreign[1]["status"]["backups"][0]["installation"] = "uid-of-another-root"
    with pytest.raises(PointError, match="shard-1: backup shard-1-b is of another installation"):
        patches(chosen(foreign, "root", []), foreign, set_version=True)


def test_a_shard_on_an_external_etcd_is_refused_before_anything_is_written() -> None:
    on_etcd = shard("shard-1", "root")
    on_etcd["spec"]["etcd"] = {"endpoints": ["https://etcd:2379"]}
    installation = [shard("root", None), on_etcd]
    with pytest.raises(PointError, match=r"^shard-1: the shard runs on an external etcd"):
        patches(chosen(installation, "root", []), installation, set_version=True)


def test_backups_in_a_bucket_are_asked_for_and_one_on_another_target_is_refused() -> None:
    """Each Shard's backup is read from the target its spec names now."""
    in_bucket = [shard("root", None, "0.28.0"), shard("shard-1", "root", "0.28.0")]
    for obj in in_bucket:
        obj["spec"]["backup"] = {"s3": {"bucket": "kcp-backups"}}
        entry = obj["status"]["backups"][0]
        entry.update(bucket="kcp-backups", key=f"ns/{entry['name']}.db",
                     location=f"s3://kcp-backups/ns/{entry['name']}.db")  # fmt: skip
    asked = patches(chosen(in_bucket, "root", []), in_bucket, set_version=False)
    assert set(asked) == {"root", "shard-1"}
    in_bucket[1]["spec"]["backup"] = {"claimRef": {"name": "kcp-backups"}}
    with pytest.raises(PointError, match=r"^shard-1: backup shard-1-b lies in s3://kcp-backups/"):
        patches(chosen(in_bucket, "root", []), in_bucket, set_version=False)


def test_progress_is_printed_once_the_operator_has_taken_the_restore_up() -> None:
    obj: JSON = {"status": {"restore": {"request": "old", "phase": "Done", "message": "m"}}}
    assert progress(obj, "b") is None
    obj["status"]["restore"] = {"request": "b", "phase": "Stopping", "message": "stopping"}
    obj["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert progress(obj, "b") == ("Stopping: stopping", "False")
