"""Backups before a minor upgrade: the root waits for a verified backup of every shard of its
installation, each shard takes one from its running pod, and plan says so."""

from __future__ import annotations

import datetime
from typing import Any

from kcp_shard_operator.core.api.meta import VERSION_ANNOTATION
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.record import Request, Trigger, wanted
from kcp_shard_operator.core.installation.steps import plan_upgrade
from kcp_shard_operator.core.shard.plan import plan
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.shard.upgradebackup import (
    WAITING_FOR_BACKUPS,
    minor_upgrade_target,
    waiting_for_backups,
)
from tests.conftest import RELEASE, make, non_root_object, shard_object

BACKUP: dict[str, Any] = {"claimRef": {"name": "backups"}}
NOW = datetime.datetime(2026, 12, 7, 11, 7, tzinfo=datetime.UTC)


def before_upgrade(to: str) -> JSON:
    return {
        "name": "b",
        "time": "2026-12-07T11:00:00Z",
        "trigger": "BeforeUpgrade",
        "upgradeTo": to,
    }


def shard(obj: JSON, running: str, *backups: JSON) -> Shard:
    return make({**obj, "status": {"version": running, "backups": list(backups)}})


def root(spec: str = "0.28.0", running: str = "0.27.1", *backups: JSON, **extra: Any) -> Shard:
    backup = {**BACKUP, **extra}
    return shard(shard_object(version=spec, backup=backup), running, *backups)


def test_only_a_move_to_a_newer_minor_with_backups_asks_for_them() -> None:
    assert minor_upgrade_target(root()) == "0.28"
    assert minor_upgrade_target(root("0.27.2")) is None  # a patch release
    assert minor_upgrade_target(root("0.27.1", "0.28.0")) is None  # a (refused) downgrade
    assert minor_upgrade_target(root(beforeMinorUpgrade=False)) is None
    assert minor_upgrade_target(make(shard_object(version="0.28.0"))) is None


def test_the_root_waits_for_every_shard_of_its_installation() -> None:
    shard_1 = shard(non_root_object(version="0.28.0", backup=BACKUP), "0.27.1")
    bare = shard(non_root_object("shard-2", version="0.28.0"), "0.27.1")
    waiting = waiting_for_backups(root(), [root(), shard_1, bare])
    assert waiting is not None
    assert "a verified backup of root, shard-1" in waiting
    assert "spec.backup on shard-2 (or spec.backup.beforeMinorUpgrade: false on root" in waiting
    done = root("0.28.0", "0.27.1", before_upgrade("0.28"))
    shard_1 = shard(
        non_root_object(version="0.28.0", backup=BACKUP), "0.27.1", before_upgrade("0.28")
    )
    assert waiting_for_backups(done, [done, shard_1]) is None
    # A backup taken before another move does not count.
    old = root("0.28.0", "0.27.1", before_upgrade("0.27"))
    assert waiting_for_backups(old, [old]) is not None


def test_a_waiting_root_stays_at_its_running_version() -> None:
    running = render_shard(root("0.27.1", "0.27.1"), None, RELEASE)
    observed: dict[str, JSON | None] = {o["kind"]: o for o in running.objects}
    decision = plan(root(), None, observed, RELEASE, waiting_for_backups="backups first")
    assert (decision.waiting, decision.waiting_reason) == ("backups first", WAITING_FOR_BACKUPS)
    deployments = [o for o in decision.apply if o["kind"] == "Deployment"]
    for deployment in deployments:
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations[VERSION_ANNOTATION] == "0.27.1"


def test_each_shard_takes_its_backup_before_the_move_and_retries_after_a_failure() -> None:
    spec = root().spec.backup
    assert spec is not None
    assert wanted(spec, {}, {}, NOW, "0.28") == Request(Trigger.BEFORE_UPGRADE, upgrade_to="0.28")
    assert wanted(spec, {"backups": [before_upgrade("0.28")]}, {}, NOW, "0.28") is None
    failed = {"backup": {"lastUpgradeFailureTime": "2026-12-07T11:05:00Z"}}
    assert wanted(spec, failed, {}, NOW, "0.28") is None
    later = NOW + datetime.timedelta(minutes=4)
    assert wanted(spec, failed, {}, later, "0.28") == Request(
        Trigger.BEFORE_UPGRADE, upgrade_to="0.28"
    )


def test_plan_shows_the_snapshot_step_before_the_root_rolls() -> None:
    obj = {**shard_object(version="0.27.1", backup=BACKUP), "status": {"version": "0.27.1"}}
    live = render_shard(make(obj), None, RELEASE).deployment
    steps = plan_upgrade([obj], {"ns/root": live}, "0.28.0", RELEASE, lambda _: "-")
    (step,) = steps
    assert step.outcome == "Rolls"
    assert any(
        note.startswith("snapshot first: before the first pod of kcp 0.28") for note in step.notes
    )


def test_a_refused_downgrade_names_the_backup_taken_before_the_upgrade() -> None:
    running = render_shard(root("0.28.0", "0.28.0"), None, RELEASE)
    observed: dict[str, JSON | None] = {o["kind"]: o for o in running.objects}
    entry = {**before_upgrade("0.28"), "kcpVersion": "0.27.1", "claim": "backups", "path": "p"}
    decision = plan(root("0.27.1", "0.28.0", entry), None, observed, RELEASE)
    assert decision.error_reason == "DowngradeRefused"
    assert "Backup b (BeforeUpgrade, 2026-12-07T11:00:00Z, kcp 0.27.1)" in (decision.error or "")
    error = decision.error or ""
    assert "kcp-shard-operator restore --installation root -n ns --set-version restores" in error
    assert "this shard alone: with spec.version at 0.27.1, kcp-shard-operator restore root" in error
    bare = plan(root("0.27.1", "0.28.0"), None, observed, RELEASE)
    assert bare.error_reason == "DowngradeRefused"
    assert "Backup" not in (bare.error or "")
