"""The manifest beside each backup: written by the sidecar after the snapshot is verified, the
status entry and the Shard it was taken of; retention removes it with the snapshot; a failed
write leaves the verified backup listed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kcp_shard_operator.core.backup.manifest import manifest_path, write
from kcp_shard_operator.kube.client import Ran
from tests.fake_kube import run
from tests.unit.backup.test_pass_backup import Sidecar, annotate, running
from tests.unit.controller.test_pass import condition, status


def test_the_manifest_holds_the_listed_entry_and_the_shard() -> None:
    sidecar = Sidecar()
    ctx, kube, _ = running(sidecar)
    annotate(ctx, kube, "first")
    run(ctx, "root")
    run(ctx, "root")
    (entry,) = status(kube, "root")["backups"]
    command = sidecar.ran[-1]
    assert command[-1] == "/backups/root/root-20261207T110700Z.json"
    assert json.loads(command[-2]) == {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "BackupManifest",
        "shard": {"name": "root", "namespace": "ns", "uid": "uid-root"},
        "backup": entry,
    }


def test_a_failed_manifest_write_leaves_the_backup_listed() -> None:
    sidecar = Sidecar({"sh": Ran(1, "", "No space left on device")})
    ctx, kube, _ = running(sidecar)
    annotate(ctx, kube, "first")
    run(ctx, "root")
    run(ctx, "root")
    assert condition(kube, "root", "BackedUp") == ("True", "Succeeded")
    assert len(status(kube, "root")["backups"]) == 1


def test_the_script_writes_the_json_whole_whatever_it_holds(tmp_path: Path) -> None:
    """The command run by a shell (busybox's applets stood in for by the host's): the JSON is
    an argument, so quotes and ``$`` in it are written as they are."""
    content = {"backup": {"name": "a'b\"c $(touch x) `y`"}}
    command = write("root/b.json", content)
    script = command[3].replace("/busybox ", "")
    target = tmp_path / "b.json"
    subprocess.run(
        ["sh", "-c", script, *command[4:6], str(target)], check=True, cwd=tmp_path, timeout=10
    )
    assert json.loads(target.read_text()) == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]


def test_a_manifest_lies_beside_its_snapshot() -> None:
    assert manifest_path("root/root-20261207T110700Z.db") == "root/root-20261207T110700Z.json"
