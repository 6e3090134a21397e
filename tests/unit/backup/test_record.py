"""The status of a shard's backups: what is due, what an outcome records, what retention drops."""

from __future__ import annotations

import datetime

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.api.refs import LocalObjectRef
from kcp_shard_operator.core.backup.record import (
    Outcome,
    Request,
    Trigger,
    bookkeeping,
    condition_of,
    expired,
    recorded,
    wanted,
)
from kcp_shard_operator.core.backup.snapshot import VOLUME_FULL, Failure
from kcp_shard_operator.core.backup.spec import BACKUP_ANNOTATION, BackupSpec, RetentionSpec

NOW = datetime.datetime(2026, 12, 7, 11, 7, tzinfo=datetime.UTC)
HOURLY = BackupSpec(LocalObjectRef("backups"), schedule="0 * * * *")
ON_DEMAND = BackupSpec(LocalObjectRef("backups"))


def entry(name: str, time: str) -> JSON:
    return {"name": name, "time": time, "path": f"root/{name}.db", "size": 10}


def test_a_new_annotation_value_asks_for_one_backup() -> None:
    ask = {BACKUP_ANNOTATION: "t1"}
    assert wanted(ON_DEMAND, None, ask, NOW) == Request(Trigger.ON_DEMAND, "t1")
    handled = {"backup": {"lastRequest": "t1"}}
    assert wanted(ON_DEMAND, handled, ask, NOW) is None
    assert wanted(ON_DEMAND, handled, {}, NOW) is None


def test_the_schedule_is_due_at_the_time_the_status_names() -> None:
    status = bookkeeping(HOURLY, {}, None, "2026-12-07T11:07:00Z")
    assert status["backup"] == {
        "schedule": "0 * * * *",
        "nextScheduledTime": "2026-12-07T12:00:00Z",
    }
    assert wanted(HOURLY, status, {}, NOW) is None
    later = NOW.replace(hour=12)
    assert wanted(HOURLY, status, {}, later) == Request(Trigger.SCHEDULED)
    # Another schedule: the next time is computed again from now.
    daily = BackupSpec(LocalObjectRef("backups"), schedule="@daily")
    again = bookkeeping(daily, {}, status, "2026-12-07T11:07:00Z")
    assert again["backup"]["nextScheduledTime"] == "2026-12-08T00:00:00Z"


def test_bookkeeping_carries_the_list_over_unchanged() -> None:
    previous = {
        "backups": [entry("root-1", "2026-12-07T10:00:00Z")],
        "backup": {"lastRequest": "t"},
    }
    status = bookkeeping(ON_DEMAND, {"phase": "Running"}, previous, "2026-12-07T11:07:00Z")
    assert status == {"phase": "Running", **previous}
    assert bookkeeping(None, {}, None, "2026-12-07T11:07:00Z") == {}


def test_a_success_is_listed_first_and_retention_removes_what_it_deleted() -> None:
    status: JSON = {
        "backups": [entry("old", "2026-12-06T00:00:00Z"), entry("older", "2026-12-05T00:00:00Z")]
    }
    new = entry("new", "2026-12-07T12:00:00Z")
    outcome = Outcome(Request(Trigger.SCHEDULED), "2026-12-07T12:00:05Z", new, None, ["older"])
    out = recorded(HOURLY, status, outcome)
    assert [e["name"] for e in out["backups"]] == ["new", "old"]
    assert out["backup"]["lastSuccessTime"] == "2026-12-07T12:00:05Z"
    assert out["backup"]["nextScheduledTime"] == "2026-12-07T13:00:00Z"
    cond = condition_of(outcome)
    assert (cond.type, cond.status, cond.reason) == ("BackedUp", True, "Succeeded")
    assert "retention removed older" in cond.message


def test_a_failure_deletes_nothing_and_answers_the_request() -> None:
    status: JSON = {"backups": [entry("old", "2026-12-06T00:00:00Z")]}
    failure = Failure(VOLUME_FULL, "full")
    outcome = Outcome(Request(Trigger.ON_DEMAND, "t2"), "2026-12-07T12:00:05Z", None, failure)
    out = recorded(ON_DEMAND, status, outcome)
    assert [e["name"] for e in out["backups"]] == ["old"]
    assert out["backup"] == {"lastRequest": "t2", "lastFailureTime": "2026-12-07T12:00:05Z"}
    cond = condition_of(outcome)
    assert (cond.status, cond.reason, cond.message) == (False, VOLUME_FULL, "full")


def test_retention_by_count_and_age_keeps_the_newest() -> None:
    backups = [entry(f"b{day}", f"2026-12-0{day}T00:00:00Z") for day in range(1, 8)]
    by_count = expired(backups, RetentionSpec(keep=3), NOW)
    assert sorted(e["name"] for e in by_count) == ["b1", "b2", "b3", "b4"]
    # b5 is 2 days and 11 hours old.
    by_age = expired(backups, RetentionSpec(keep=100, max_age_days=2), NOW)
    assert sorted(e["name"] for e in by_age) == ["b1", "b2", "b3", "b4", "b5"]
    lone = [entry("b1", "2026-01-01T00:00:00Z")]
    assert expired(lone, RetentionSpec(keep=1, max_age_days=1), NOW) == []
