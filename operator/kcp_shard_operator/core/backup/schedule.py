"""Cron schedules (pure): the five fields of crontab(5) and the @-macros, and the first time
after a given one that a schedule names (UTC, to the minute)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12))
SEARCH_DAYS = 366 * 8
"""How far ahead a schedule is searched: far enough for 29 February on a Monday."""


class CronError(ValueError):
    """A schedule that is not cron syntax; the message names the part."""


@dataclass(frozen=True)
class Cron:
    """A parsed schedule: the values each field allows."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """0 (Sunday) to 6."""
    any_day: bool
    """Day of month is ``*``: only the day of week restricts the day."""
    any_weekday: bool

    def _day_matches(self, day: datetime.date) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        if self.any_day and self.any_weekday:
            return True
        if self.any_day:
            return in_week
        if self.any_weekday:
            return in_month
        # Both restricted: crontab(5) runs on either.
        return in_month or in_week

    def next_after(self, moment: datetime.datetime) -> datetime.datetime:
        """The first minute strictly after ``moment`` the schedule names (UTC)."""
        start = moment.astimezone(datetime.UTC).replace(second=0, microsecond=0)
        start += datetime.timedelta(minutes=1)
        day = start.date()
        for offset in range(SEARCH_DAYS):
            current = day + datetime.timedelta(days=offset)
            if not self._day_matches(current):
                continue
            for hour in sorted(self.hours):
                for minute in sorted(self.minutes):
                    found = datetime.datetime(
                        current.year, current.month, current.day, hour, minute, tzinfo=datetime.UTC
                    )
                    if found >= start:
                        return found
        raise CronError(f"names no time in the next {SEARCH_DAYS} days")


def _values(text: str, name: str, low: int, high: int) -> frozenset[int]:
    found: set[int] = set()
    for part in text.split(","):
        step = 1
        if "/" in part:
            part, _, step_text = part.partition("/")
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"{name}: {step_text!r} is not a positive step")
            step = int(step_text)
        if part == "*":
            first, last = low, high
        elif "-" in part:
            first_text, _, last_text = part.partition("-")
            first, last = _number(first_text, name), _number(last_text, name)
        else:
            first = _number(part, name)
            last = high if step > 1 else first
        if not low <= first <= last <= high:
            raise CronError(f"{name}: {part!r} is outside {low}-{high} or backwards")
        found.update(range(first, last + 1, step))
    return frozenset(found)


def _number(text: str, name: str) -> int:
    if not text.isdigit():
        raise CronError(f"{name}: {text!r} is not a number")
    return int(text)


def parse_cron(expression: str) -> Cron:
    """The schedule of ``expression``: ``minute hour day-of-month month day-of-week`` (numbers,
    ``*``, ranges ``a-b``, steps ``/n``, lists ``a,b``; day of week 0-7, 0 and 7 Sunday) or
    one of the @-macros. Raises :class:`CronError`."""
    text = MACROS.get(expression.strip(), expression.strip())
    parts = text.split()
    if len(parts) != 5:
        raise CronError(f"{expression!r} has {len(parts)} fields, cron syntax has 5")
    minutes, hours, days, months = (
        _values(part, name, low, high)
        for part, (name, low, high) in zip(parts[:4], FIELDS, strict=True)
    )
    weekdays = frozenset(day % 7 for day in _values(parts[4], "day of week", 0, 7))
    return Cron(minutes, hours, days, months, weekdays, parts[2] == "*", parts[4] == "*")
