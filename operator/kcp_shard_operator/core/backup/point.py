"""The backups that take a whole installation back to one point in time (pure).

The root shard records which shard holds each workspace, and each shard holds the logical
clusters the root points at: restored from backups of different moments, a workspace could be
listed on the root and missing on its shard, or the other way round. The backups the operator
takes before a minor upgrade (trigger ``BeforeUpgrade``) are such a point: every shard takes
one from its running pod while the root waits for all of them, before the first pod of the new
release starts. A point is named by the root's backup; each other shard's is its
``BeforeUpgrade`` backup for the same move taken nearest to it (and nearer to it than to any
other ``BeforeUpgrade`` backup of the root), or one the user names.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.record import Trigger, entries, parse_time


class PointError(ValueError):
    """Why no set of backups of one point in time can be chosen (one line)."""


@dataclass(frozen=True)
class Member:
    """A Shard of the installation: its name, whether it is the root, its status."""

    name: str
    is_root: bool
    status: JSON | None


@dataclass(frozen=True)
class Point:
    """The backup each shard of the installation is restored from (root first)."""

    root: str
    backups: dict[str, JSON]

    @property
    def description(self) -> str:
        entry = self.backups[self.root]
        move = f", before the move to kcp {entry['upgradeTo']}" if entry.get("upgradeTo") else ""
        return f"{entry.get('time')} (kcp {entry.get('kcpVersion')}{move})"


def _before_upgrade(status: JSON | None) -> list[JSON]:
    return [e for e in entries(status) if e.get("trigger") == Trigger.BEFORE_UPGRADE]


def _time(entry: JSON) -> datetime.datetime:
    return parse_time(str(entry.get("time")))


def _distance(a: JSON, b: JSON) -> float:
    return abs((_time(a) - _time(b)).total_seconds())


def _owner(members: Sequence[Member], name: str) -> Member | None:
    """The member that lists backup ``name``."""
    for member in members:
        if any(entry.get("name") == name for entry in entries(member.status)):
            return member
    return None


def _root_backup(root: Member, named: str | None) -> JSON:
    found = _before_upgrade(root.status) if named is None else entries(root.status)
    if named is not None:
        found = [entry for entry in found if entry.get("name") == named]
    if not found:
        if named is not None:
            raise PointError(f"backup {named} is not one of the root shard {root.name}'s backups")
        raise PointError(
            f"the root shard {root.name} lists no backup taken before a minor upgrade "
            "(trigger BeforeUpgrade): name the backups of one point with --backup "
            "(kcp-shard-operator backups lists them)"
        )
    return found[0]


def _matching(root_entry: JSON, root: Member, member: Member) -> JSON | None:
    """``member``'s ``BeforeUpgrade`` backup of the point of ``root_entry``: for the same move,
    taken with the same kcp, nearest to it and to no other of the root's."""
    others = [e for e in _before_upgrade(root.status) if e.get("name") != root_entry.get("name")]
    candidates = [
        entry
        for entry in _before_upgrade(member.status)
        if entry.get("upgradeTo") == root_entry.get("upgradeTo")
        and entry.get("kcpVersion") == root_entry.get("kcpVersion")
        and all(_distance(entry, root_entry) <= _distance(entry, other) for other in others)
    ]
    return min(candidates, key=lambda entry: _distance(entry, root_entry), default=None)


def choose(members: Sequence[Member], named: Sequence[str] = ()) -> Point:
    """The backups of one point for every member (the root among them): the root's newest
    ``BeforeUpgrade`` backup, or the root's backup among ``named``, and the matching one of
    each other shard unless ``named`` names one of its own."""
    roots = [member for member in members if member.is_root]
    if len(roots) != 1:
        raise PointError("the installation has no root shard")
    (root,) = roots
    by_member: dict[str, str] = {}
    for name in named:
        owner = _owner(members, name)
        if owner is None:
            raise PointError(
                f"backup {name} is not listed by any shard of the installation of {root.name} "
                "(kcp-shard-operator backups lists them)"
            )
        if owner.name in by_member:
            raise PointError(f"two backups named for {owner.name}: {by_member[owner.name]}, {name}")
        by_member[owner.name] = name
    root_entry = _root_backup(root, by_member.get(root.name))
    chosen = {root.name: root_entry}
    for member in members:
        if member.is_root:
            continue
        if member.name in by_member:
            chosen[member.name] = next(
                e for e in entries(member.status) if e.get("name") == by_member[member.name]
            )
            continue
        found = (
            _matching(root_entry, root, member)
            if root_entry.get("trigger") == Trigger.BEFORE_UPGRADE
            else None
        )
        if found is None:
            raise PointError(_missing(member, root_entry))
        chosen[member.name] = found
    return Point(root.name, chosen)


def _missing(member: Member, root_entry: JSON) -> str:
    if root_entry.get("trigger") != Trigger.BEFORE_UPGRADE:
        return (
            f"backup {root_entry.get('name')} was not taken before an upgrade: name a backup of "
            f"{member.name} of the same moment too (--backup)"
        )
    return (
        f"shard {member.name} has no backup of this point (the root's {root_entry.get('name')}, "
        f"{root_entry.get('time')}, before the move to kcp {root_entry.get('upgradeTo')}): "
        "nothing done; name one with --backup if another backup of it is of that moment"
    )


def version_changes(point: Point, specs: Mapping[str, JSON]) -> dict[str, tuple[str, str | None]]:
    """Per shard whose ``spec.version`` is not its backup's ``kcpVersion``: the version and
    image tag to set (None: the spec sets no tag). ``specs`` are the Shards' specs by name."""
    changes: dict[str, tuple[str, str | None]] = {}
    for name, entry in point.backups.items():
        spec = specs[name]
        version, wanted = str(spec.get("version")), str(entry.get("kcpVersion"))
        tag = (spec.get("image") or {}).get("tag")
        if version == wanted and (tag is None or version in str(tag)):
            continue
        changes[name] = (wanted, None if tag is None else _tag(name, str(tag), version, wanted))
    return changes


def _tag(shard: str, tag: str, version: str, wanted: str) -> str:
    """``tag`` naming ``wanted`` where it named ``version`` (``v0.30.0`` -> ``v0.28.0``)."""
    if version in tag:
        return tag.replace(version, wanted)
    if wanted in tag:
        return tag
    raise PointError(
        f"spec.image.tag {tag!r} of {shard} does not name its spec.version {version}: set "
        f"spec.version and spec.image.tag of {shard} to kcp {wanted} by hand"
    )
