"""``kcp-shard-operator backups --claim``: the backups a claim holds, without a Shard, from a
short-lived pod that prints their manifests; the pod non-root, the claim read-only, and deleted
whatever happens; a missing claim or one without manifests in one line."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kcp_shard_operator.cli.backup import run_backups
from kcp_shard_operator.cli.backupclaim import CONTAINER, list_claim
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.listing import (
    DEADLINE_SECONDS,
    SCRIPT,
    listing_pod,
    parse_listing,
)
from kcp_shard_operator.core.backup.manifest import manifest, write
from kcp_shard_operator.core.backup.snapshot import BACKUP_MOUNT, BUSYBOX
from kcp_shard_operator.kube.client import RefusedError
from tests.fake_kube import FakeKube
from tests.unit.backup.test_manifest_import import ENTRY, NAME

NEWER = "root-20261207T120000Z"
CLAIM = "kcp-backups"


def entry(name: str, time: str) -> JSON:
    return {**ENTRY, "name": name, "time": time, "path": f"root/{name}.db"}


def on_claim(folder: Path, shard: str, found: JSON) -> None:
    """The manifest of ``found`` written by the sidecar's own command (busybox's applets stood
    in for by the host's)."""
    command = write(f"{shard}/{found['name']}.json", manifest(found, shard, "ns", f"uid-{shard}"))
    (folder / shard).mkdir(exist_ok=True)
    target = str(folder / shard / f"{found['name']}.json")
    script = command[3].replace(f"{BUSYBOX} ", "")
    subprocess.run(["sh", "-c", script, command[4], command[5], target], check=True, timeout=10)


def listed(folder: Path) -> str:
    """What the pod prints of the claim mounted at ``folder``: its script run by the host's
    shell."""
    script = SCRIPT.replace(BACKUP_MOUNT, str(folder)).replace(f"{BUSYBOX} ", "")
    done = subprocess.run(["sh", "-ec", script], check=True, capture_output=True, text=True)
    return done.stdout


def test_the_pods_log_gives_every_manifest_on_the_claim_newest_first(tmp_path: Path) -> None:
    on_claim(tmp_path, "root", entry(NAME, "2026-12-07T11:07:00Z"))
    on_claim(tmp_path, "root", entry(NEWER, "2026-12-07T12:00:00Z"))
    on_claim(tmp_path, "shard-1", entry("shard-1-20261207T110800Z", "2026-12-07T11:08:00Z"))
    (tmp_path / "root" / f"{NAME}.db").write_bytes(b"snapshot")
    (tmp_path / "root" / "root-20261207T130000Z.json.part").write_text("{")
    found = parse_listing(listed(tmp_path), CLAIM)
    assert [(b.shard, b.entry["name"]) for b in found.backups] == [
        ("root", NEWER),
        ("shard-1", "shard-1-20261207T110800Z"),
        ("root", NAME),
    ]
    assert found.backups[2].entry == {**entry(NAME, "2026-12-07T11:07:00Z"), "claim": CLAIM}
    assert found.unusable == []


def test_an_empty_claim_lists_nothing(tmp_path: Path) -> None:
    assert listed(tmp_path) == ""
    found = parse_listing("", CLAIM)
    assert (found.backups, found.unusable) == ([], [])


def test_a_manifest_that_cannot_be_used_is_named_with_its_field(tmp_path: Path) -> None:
    on_claim(tmp_path, "root", {**entry(NAME, "2026-12-07T11:07:00Z"), "sha256": "xyz"})
    on_claim(tmp_path, "root", entry(NEWER, "2026-12-07T12:00:00Z"))
    (tmp_path / "root" / "notes.json").write_text("not json\n")
    found = parse_listing(listed(tmp_path), CLAIM)
    assert [b.entry["name"] for b in found.backups] == [NEWER]
    assert sorted(found.unusable) == [
        "root/notes.json: not JSON (Expecting value: line 1 column 1 (char 0))",
        f"root/{NAME}.json: backup.sha256 'xyz' is not 64 hex digits",
    ]


def test_the_pod_is_non_root_on_a_read_only_filesystem_with_the_claim_read_only() -> None:
    pod = listing_pod(CLAIM, "ns", "kcp-backup-listing-0a1b2c3d", "backup:v1")
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["volumeMounts"] == [
        {"name": "backups", "mountPath": BACKUP_MOUNT, "readOnly": True}
    ]
    assert spec["volumes"][0]["persistentVolumeClaim"] == {"claimName": CLAIM, "readOnly": True}
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == DEADLINE_SECONDS
    assert "ownerReferences" not in pod["metadata"]
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "kcp-backup-listing"
    assert pod["metadata"]["annotations"]["kcpshard.dev/backup-claim"] == CLAIM


class Kubelet(FakeKube):
    """Runs the listing pod at once: it ends in ``phase`` with ``log``."""

    def __init__(self, phase: str, log: str, *objects: JSON) -> None:
        super().__init__(*objects)
        self.phase, self.log = phase, log

    def create(self, obj: JSON) -> JSON:
        made = super().create(obj)
        if obj["kind"] == "Pod":
            name = obj["metadata"]["name"]
            self.logs[(name, CONTAINER)] = self.log
            made = self.put({**made, "status": {"phase": self.phase}})
        return made


def claim() -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "namespace": "ns"},
    }


def pods(kube: FakeKube) -> list[str]:
    return [name for (kind, _, name) in kube.objects if kind == "Pod"]


def made_and_deleted(kube: FakeKube) -> bool:
    made = [name for op, kind, name in kube.calls if (op, kind) == ("create", "Pod")]
    deleted = [name for op, kind, name in kube.calls if (op, kind) == ("delete", "Pod")]
    return len(made) == 1 and deleted == made and pods(kube) == []


def args(**given: Any) -> argparse.Namespace:
    defaults = {"shard": None, "claim": CLAIM, "image": "backup:v1", "timeout": 5.0}
    return argparse.Namespace(**{**defaults, **given})


def test_the_cli_prints_the_claims_backups_and_deletes_its_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    on_claim(tmp_path, "root", entry(NAME, "2026-12-07T11:07:00Z"))
    kube = Kubelet("Succeeded", listed(tmp_path), claim())
    monkeypatch.setattr("kcp_shard_operator.cli.backup._connect", lambda _: (kube, "ns"))
    assert run_backups(args()) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert header.split()[:2] == ["SHARD", "NAME"]
    assert line.split() == [
        "root",
        NAME,
        "2026-12-07T11:07:00Z",
        "Scheduled",
        "0.27.1",
        "1323040",
        "271",
        CLAIM,
        f"root/{NAME}.db",
        "-",
    ]
    assert made_and_deleted(kube)
    (name,) = [name for op, kind, name in kube.calls if (op, kind) == ("log", "Pod")]
    assert name.startswith("kcp-backup-listing-")


def test_a_claim_without_manifests_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kube = Kubelet("Succeeded", "", claim())
    monkeypatch.setattr("kcp_shard_operator.cli.backup._connect", lambda _: (kube, "ns"))
    assert run_backups(args()) == 0
    printed = capsys.readouterr()
    assert printed.out == ""
    assert printed.err == f"no backup manifests on PersistentVolumeClaim {CLAIM} in ns\n"
    assert made_and_deleted(kube)


def test_a_claim_that_does_not_exist_is_one_line_and_no_pod() -> None:
    kube = Kubelet("Succeeded", "")
    with pytest.raises(
        SystemExit, match=f"^error: PersistentVolumeClaim '{CLAIM}' not found in ns$"
    ):
        list_claim(kube, "ns", CLAIM, "backup:v1", 5.0)
    assert not [call for call in kube.calls if call[1] == "Pod"]


def test_a_failed_pod_is_named_with_its_last_line_and_deleted() -> None:
    kube = Kubelet("Failed", "cd: can't cd to /backups: Permission denied\n", claim())
    with pytest.raises(SystemExit, match=r"failed: cd: can.t cd to /backups: Permission denied$"):
        list_claim(kube, "ns", CLAIM, "backup:v1", 5.0)
    assert made_and_deleted(kube)


def test_a_pod_that_does_not_start_in_time_says_why_and_is_deleted() -> None:
    kube = Kubelet("Pending", "", claim())
    waiting = {"waiting": {"reason": "ErrImageNeverPull", "message": "image not present"}}
    original = kube.create

    def stuck(obj: JSON) -> JSON:
        made = original(obj)
        return kube.put({**made, "status": {"containerStatuses": [{"state": waiting}]}})

    kube.create = stuck  # type: ignore[method-assign]
    with pytest.raises(SystemExit, match="within 0 s \\(ErrImageNeverPull: image not present\\)"):
        list_claim(kube, "ns", CLAIM, "backup:v1", 0.0)
    assert made_and_deleted(kube)


def test_the_pod_is_deleted_when_the_command_is_interrupted() -> None:
    kube = Kubelet("Pending", "", claim())
    kube.fail("get", "Pod", KeyboardInterrupt())  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        list_claim(kube, "ns", CLAIM, "backup:v1", 5.0)
    assert made_and_deleted(kube)


def test_a_pod_left_undeleted_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    kube = Kubelet("Succeeded", "", claim())
    kube.fail("delete", "Pod", RefusedError(403, "Forbidden", "pods is forbidden"))
    assert list_claim(kube, "ns", CLAIM, "backup:v1", 5.0).backups == []
    assert "not deleted (403 Forbidden: pods is forbidden): delete it" in capsys.readouterr().err


def test_a_shard_and_a_claim_together_are_refused() -> None:
    with pytest.raises(SystemExit, match="name a Shard or --claim, not both"):
        run_backups(args(shard="root"))
