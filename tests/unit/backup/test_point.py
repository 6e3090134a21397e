"""The backups that take a whole installation back to one point in time: chosen from the
BeforeUpgrade backups of one upgrade, refused when a shard lacks one, and the versions the
restore sets."""

from __future__ import annotations

import pytest

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.point import Member, PointError, choose, version_changes


def entry(name: str, time: str, upgrade_to: str | None = "0.30", kcp: str = "0.28.0") -> JSON:
    found: JSON = {"name": name, "time": f"2026-12-07T{time}Z", "kcpVersion": kcp}
    if upgrade_to is None:
        found["trigger"] = "Scheduled"
    else:
        found.update(trigger="BeforeUpgrade", upgradeTo=upgrade_to)
    return found


def member(name: str, *backups: JSON) -> Member:
    return Member(name, name == "root", {"backups": list(backups)})


ROOT_FIRST = entry("root-1", "10:00:00", "0.29", kcp="0.28.0")
ROOT_LATEST = entry("root-2", "12:00:05", "0.30", kcp="0.29.0")
SHARD_FIRST = entry("shard-1-1", "10:00:02", "0.29", kcp="0.28.0")
SHARD_LATEST = entry("shard-1-2", "12:00:01", "0.30", kcp="0.29.0")
SCHEDULED = entry("shard-1-s", "12:30:00", None, kcp="0.30.0")


def installation() -> list[Member]:
    return [
        member("root", ROOT_LATEST, entry("root-s", "11:00:00", None), ROOT_FIRST),
        member("shard-1", SCHEDULED, SHARD_LATEST, SHARD_FIRST),
    ]


def test_the_latest_upgrade_is_the_point_by_default() -> None:
    point = choose(installation())
    assert point.root == "root"
    assert {n: e["name"] for n, e in point.backups.items()} == {
        "root": "root-2",
        "shard-1": "shard-1-2",
    }
    assert point.description == "2026-12-07T12:00:05Z (kcp 0.29.0, before the move to kcp 0.30)"


def test_the_root_backup_named_chooses_the_point_and_its_shards_match() -> None:
    point = choose(installation(), ["root-1"])
    assert point.backups["shard-1"]["name"] == "shard-1-1"


def test_a_named_backup_of_another_shard_replaces_the_match() -> None:
    point = choose(installation(), ["root-2", "shard-1-s"])
    assert point.backups["shard-1"]["name"] == "shard-1-s"


def test_a_shard_without_a_backup_of_the_point_is_refused_in_one_line() -> None:
    members = [member("root", ROOT_LATEST, ROOT_FIRST), member("shard-1", SHARD_FIRST)]
    with pytest.raises(PointError) as refused:
        choose(members)
    message = str(refused.value)
    assert "shard shard-1 has no backup of this point (the root's root-2" in message
    assert "before the move to kcp 0.30" in message
    assert "\n" not in message


def test_a_backup_of_the_same_move_nearer_another_root_backup_is_not_the_point() -> None:
    # Upgraded to 0.30 twice (a restore in between): shard-1 has only the first one's.
    again = entry("root-3", "15:00:00", "0.30", kcp="0.29.0")
    members = [member("root", again, ROOT_LATEST), member("shard-1", SHARD_LATEST)]
    with pytest.raises(PointError, match="shard-1 has no backup of this point"):
        choose(members)
    assert choose(members, ["root-2"]).backups["shard-1"]["name"] == "shard-1-2"


@pytest.mark.parametrize(
    ("members", "named", "why"),
    [
        ([member("root", ROOT_FIRST)], ["nope"], "not listed by any shard"),
        (installation(), ["shard-1-1", "shard-1-2"], "two backups named for shard-1"),
        (installation(), ["root-s"], "name a backup of shard-1 of the same moment too"),
        ([member("root"), member("shard-1", SHARD_FIRST)], [], "lists no backup taken before"),
        ([member("shard-1", SHARD_FIRST)], [], "no root shard"),
    ],
)
def test_what_names_no_point_is_refused(members: list[Member], named: list[str], why: str) -> None:
    with pytest.raises(PointError, match=why):
        choose(members, named)


def test_versions_are_set_to_the_backups_kcp_with_the_tag_in_its_style() -> None:
    point = choose(installation())
    specs: dict[str, JSON] = {
        "root": {"version": "0.30.0", "image": {"tag": "v0.30.0"}},
        "shard-1": {"version": "0.30.0"},
    }
    assert version_changes(point, specs) == {
        "root": ("0.29.0", "v0.29.0"),
        "shard-1": ("0.29.0", None),
    }
    assert (
        version_changes(point, {"root": {"version": "0.29.0"}, "shard-1": {"version": "0.29.0"}})
        == {}
    )
    with pytest.raises(PointError, match=r"spec\.image\.tag 'latest' of root does not name"):
        version_changes(point, {**specs, "root": {"version": "0.30.0", "image": {"tag": "latest"}}})
