"""Cron schedules: the fields, the macros, the next time and the refusals."""

from __future__ import annotations

import datetime

import pytest

from kcp_shard_operator.core.backup.schedule import CronError, parse_cron

UTC = datetime.UTC


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/15 * * * *", "2026-12-07 11:07:30", "2026-12-07 11:15"),
        ("0 * * * *", "2026-12-07 11:00:00", "2026-12-07 12:00"),
        ("@daily", "2026-12-07 11:00", "2026-12-08 00:00"),
        ("30 2 * * 0", "2026-12-07 11:00", "2026-12-13 02:30"),  # the next Sunday
        ("30 2 * * 7", "2026-12-07 11:00", "2026-12-13 02:30"),  # 7 is Sunday too
        ("0 0 29 2 *", "2026-03-01 00:00", "2028-02-29 00:00"),
        ("0 0 1,15 * 1", "2026-12-08 00:00", "2026-12-14 00:00"),  # either day rule
        ("5-10/5 9-17 * 1-6 *", "2026-12-07 11:00", "2027-01-01 09:05"),
    ],
)
def test_next_after(expression: str, after: str, expected: str) -> None:
    assert parse_cron(expression).next_after(at(after)) == at(expected)


def test_next_after_is_strictly_later_and_in_utc() -> None:
    cron = parse_cron("* * * * *")
    local = datetime.datetime(
        2026, 12, 7, 12, 0, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
    )
    assert cron.next_after(local) == at("2026-12-07 11:01")


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("* * * *", "4 fields"),
        ("60 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("*/0 * * * *", "positive step"),
        ("a * * * *", "not a number"),
        ("5-1 * * * *", "backwards"),
        ("0 0 31 2 *", "names no time"),
    ],
)
def test_refusals_name_the_part(expression: str, names: str) -> None:
    with pytest.raises(CronError, match=names):
        parse_cron(expression).next_after(at("2026-01-01 00:00"))
