"""API request counters for absence checks: ``apiserver_request_total`` from the /metrics of a
kube-apiserver (or of kcp, the same server library).

"Nothing wrote X over a window" read from an object alone misses writes that change nothing (a
server-side apply of what is there leaves the resourceVersion as it was); the API server counts
every request. The counters carry no user and no namespace: a window is only attributable to the
client under test when nothing else writes that resource meanwhile. The namespace controller does,
again and again, for namespaces that cannot finish terminating (Shards whose finalizer no operator
removes any more): it deletes whole collections, which is why collection deletes are not counted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .kube import Cluster

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE"})
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Totals = dict[tuple[str, str, str, str], float]
"""Requests by (verb, resource, subresource, scope), summed over response codes; dry runs apart."""


def request_totals(metrics: str) -> Totals:
    """The ``apiserver_request_total`` counters of a /metrics text (dry runs left out)."""
    totals: Totals = {}
    for line in metrics.splitlines():
        sample = _SAMPLE.match(line)
        if sample is None:
            continue
        labels = dict(_LABEL.findall(sample["labels"]))
        if labels.get("dry_run"):
            continue
        get = labels.get
        key = (get("verb", ""), get("resource", ""), get("subresource", ""), get("scope", ""))
        totals[key] = totals.get(key, 0.0) + float(sample["value"])
    return totals


def writes_between(before: Totals, after: Totals, resources: Iterable[str]) -> dict[str, int]:
    """The writes of ``resources`` (the objects, not a subresource such as status) from the
    reading ``before`` to ``after``, as ``{"VERB resource": count}``; ``{}`` when none.
    A DELETE of a whole collection is not counted (see the module's docstring)."""
    wanted = set(resources)
    found: dict[str, int] = {}
    for (verb, resource, subresource, scope), value in after.items():
        if verb not in WRITE_VERBS or resource not in wanted or subresource:
            continue
        if verb == "DELETE" and scope != "resource":
            continue
        count = round(value - before.get((verb, resource, subresource, scope), 0.0))
        if count:
            key = f"{verb} {resource}"
            found[key] = found.get(key, 0) + count
    return dict(sorted(found.items()))


def api_request_totals(cluster: Cluster) -> Totals:
    """The request counters of ``cluster``'s API server now."""
    return request_totals(cluster.kubectl("get", "--raw", "/metrics"))
