"""Counting requests in an audit log, as the operator benchmark does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from audit import count, parse, percentile, reaction_latencies

OP = "system:serviceaccount:bench:operator"
DRIVER = "system:serviceaccount:bench:driver"


def line(
    user: str,
    verb: str,
    resource: str,
    name: str = "x",
    code: int = 200,
    at: str = "00",
    stage: str = "ResponseComplete",
    subresource: str = "",
) -> str:
    ref = {"resource": resource, "name": name}
    if subresource:
        ref["subresource"] = subresource
    return json.dumps(
        {
            "stage": stage,
            "verb": verb,
            "user": {"username": user},
            "objectRef": ref,
            "responseStatus": {"code": code},
            "requestReceivedTimestamp": f"2026-12-02T10:00:{at}.000000Z",
            "stageTimestamp": f"2026-12-02T10:00:{at}.500000Z",
        }
    )


def test_count_tells_reads_writes_failures_and_events_of_one_user() -> None:
    log = [
        line(OP, "get", "deployments"),
        line(OP, "list", "shards"),
        line(OP, "watch", "shards"),
        line(OP, "patch", "deployments"),
        line(OP, "patch", "shards", subresource="status"),
        line(OP, "patch", "shards", code=422),
        line(OP, "create", "events"),
        line(OP, "get", "secrets", stage="RequestReceived"),
        line(DRIVER, "patch", "shards"),
        "not json",
    ]
    counts = count(parse(log), OP)
    assert (counts.reads, counts.writes, counts.failed_writes, counts.events) == (2, 4, 1, 1)
    assert counts.by_target["patch shards/status"] == 1
    assert "watch shards" not in counts.by_target


def test_reaction_latency_is_measured_to_the_next_write_of_the_child() -> None:
    log = list(
        parse(
            [
                line(OP, "patch", "deployments", name="s1-kcp", at="01"),
                line(DRIVER, "patch", "shards", name="s1", at="02"),
                line(OP, "get", "deployments", name="s1-kcp", at="03"),
                line(OP, "patch", "deployments", name="s1-kcp", at="04"),
                line(OP, "patch", "deployments", name="s1-kcp", at="09"),
                line(DRIVER, "patch", "shards", name="s2", at="05"),
            ]
        )
    )
    assert reaction_latencies(log, DRIVER, OP, "shards", "{}-kcp") == [2.0]


@pytest.mark.parametrize(
    ("values", "pct", "expected"),
    [([], 99, 0.0), ([3.0], 99, 3.0), ([float(i) for i in range(1, 101)], 50, 50.5)],
)
def test_percentile(values: list[float], pct: float, expected: float) -> None:
    assert percentile(values, pct) == pytest.approx(expected, abs=1.0)
