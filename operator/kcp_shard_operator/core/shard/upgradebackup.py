"""The backups before a minor upgrade (pure): a root shard whose ``spec.backup`` keeps
``beforeMinorUpgrade`` moves to a new kcp minor release only once every shard of its
installation has a verified backup taken for that move, so that the whole installation can go
back to one point in time. The root moves first (the other shards wait for it), so holding
the root holds the installation: its non-root shards take their backups from their running
pods meanwhile."""

from __future__ import annotations

from collections.abc import Collection

from kcp_shard_operator.core.backup.record import BACKED_UP, entries, upgrade_backup
from kcp_shard_operator.core.kcp.versions import parse_or_none
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.conditions import condition

WAITING_FOR_BACKUPS = "WaitingForBackups"


def minor_upgrade_target(root: Shard) -> str | None:
    """The kcp minor release (``0.28``) the installation of ``root`` is about to move to,
    when backups are to be taken before it; None otherwise."""
    backup, running = root.spec.backup, root.status_version
    if backup is None or not backup.before_minor_upgrade or running is None:
        return None
    wanted = root.spec.kcp_version
    if wanted.minor_release == running.minor_release or wanted < running:
        return None
    return f"{wanted.major}.{wanted.minor}"


def waiting_for_backups(root: Shard, installation: Collection[Shard]) -> str | None:
    """Why ``root`` must not roll to its new minor release yet: the shards of its
    installation (``installation``, the root among them) that have no backup for the move."""
    target = minor_upgrade_target(root)
    if target is None:
        return None
    unconfigured, pending = [], []
    for shard in sorted(installation, key=lambda s: (not s.spec.is_root, s.name)):
        if shard.spec.backup is None:
            unconfigured.append(shard.name)
        elif upgrade_backup(shard.status, target) is None:
            failed = condition(shard.status, BACKED_UP) or {}
            why = (
                f" ({failed.get('reason')}: {failed.get('message')})"
                if failed.get("status") == "False"
                else ""
            )
            pending.append(f"{shard.name}{why}")
    if not unconfigured and not pending:
        return None
    parts = []
    if pending:
        parts.append(f"a verified backup of {', '.join(pending)}")
    if unconfigured:
        parts.append(
            f"spec.backup on {', '.join(unconfigured)} (or spec.backup.beforeMinorUpgrade: "
            f"false on {root.name} to upgrade without backups)"
        )
    return (
        f"kcp {root.spec.version} is a new minor release: before its first pod starts, every "
        f"shard of the installation is backed up; waiting for {' and '.join(parts)}"
    )


def way_back(shard: Shard) -> str | None:
    """The newest verified backup of ``shard`` taken with the kcp minor release its spec asks
    for (the one before the upgrade it would undo), as a sentence for ``DowngradeRefused``."""
    wanted = shard.spec.kcp_version
    for entry in entries(shard.status):
        version = parse_or_none(str(entry.get("kcpVersion", "")))
        if version is None or version.minor_release != wanted.minor_release:
            continue
        root = shard.spec.root_shard_ref.name if shard.spec.root_shard_ref else shard.name
        return (
            f"Backup {entry.get('name')} ({entry.get('trigger')}, {entry.get('time')}, kcp "
            f"{version}) is the way back: kcp-shard-operator restore --installation {root} -n "
            f"{shard.namespace} --set-version restores every shard of the installation from "
            f"its backups of one point (spec.version set to {version}); this shard alone: with "
            f"spec.version at {version}, kcp-shard-operator restore {shard.name} -n "
            f"{shard.namespace} --backup {entry.get('name')}"
        )
    return None
