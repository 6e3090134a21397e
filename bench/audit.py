"""Counting one client's API requests in a kube-apiserver audit log (JSON lines).

The benchmark cluster logs, at level Metadata, every request of the operator's and the
benchmark driver's ServiceAccounts; everything else is left out by the audit policy.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
READ_VERBS = frozenset({"get", "list"})

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: [{users}]
- level: None
"""


@dataclass(frozen=True)
class Request:
    user: str
    verb: str
    resource: str
    subresource: str
    name: str
    code: int
    received: float
    completed: float

    @property
    def target(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def parse(lines: Iterable[str]) -> Iterator[Request]:
    """The completed requests in audit log ``lines``; other stages and junk are skipped."""
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("stage") != "ResponseComplete":
            continue
        ref = event.get("objectRef") or {}
        yield Request(
            user=str((event.get("user") or {}).get("username", "")),
            verb=str(event.get("verb", "")),
            resource=str(ref.get("resource", "")),
            subresource=str(ref.get("subresource", "")),
            name=str(ref.get("name", "")),
            code=int((event.get("responseStatus") or {}).get("code", 0)),
            received=_seconds(event["requestReceivedTimestamp"]),
            completed=_seconds(event["stageTimestamp"]),
        )


@dataclass(frozen=True)
class Counts:
    reads: int
    writes: int
    failed_writes: int
    events: int
    by_target: dict[str, int]


def count(requests: Iterable[Request], user: str) -> Counts:
    """Reads and writes of ``user``; watches are neither. Events are writes, counted apart too."""
    reads = writes = failed = events = 0
    by_target: dict[str, int] = {}
    for req in requests:
        if req.user != user:
            continue
        if req.verb in READ_VERBS:
            reads += 1
        elif req.verb in WRITE_VERBS:
            writes += 1
            failed += req.code >= 400
            events += req.resource == "events"
        else:
            continue
        key = f"{req.verb} {req.target}"
        by_target[key] = by_target.get(key, 0) + 1
    return Counts(reads, writes, failed, events, dict(sorted(by_target.items())))


def reaction_latencies(
    requests: list[Request], driver: str, operator: str, resource: str, child: str
) -> list[float]:
    """Seconds from each ``driver`` patch of a ``resource`` to the operator's next write of
    its child (``child`` formats the child's name from the object's name)."""
    writes: dict[str, list[float]] = {}
    for req in requests:
        if req.user == operator and req.verb in WRITE_VERBS:
            writes.setdefault(req.name, []).append(req.completed)
    latencies = []
    for req in requests:
        if req.user != driver or req.verb != "patch" or req.resource != resource:
            continue
        after = [t for t in writes.get(child.format(req.name), []) if t >= req.completed]
        if after:
            latencies.append(min(after) - req.completed)
    return latencies


def status_write_gaps(requests: Iterable[Request], user: str, resource: str) -> list[float]:
    """Seconds from each of ``user``'s status writes of a ``resource`` object to its next one
    (how close the states written on the way follow each other)."""
    times: dict[str, list[float]] = {}
    for req in requests:
        status = req.resource == resource and req.subresource == "status"
        if req.user == user and status and req.verb in WRITE_VERBS:
            times.setdefault(req.name, []).append(req.completed)
    return [
        later - earlier
        for stamps in times.values()
        for earlier, later in zip(sorted(stamps), sorted(stamps)[1:], strict=False)
    ]


def percentile(values: list[float], pct: float) -> float:
    """The ``pct`` percentile (nearest rank), 0.0 for no values."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(pct) - 1]
