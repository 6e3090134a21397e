"""How a live child differs from its rendering, and how to write it (pure): drift, its
cause, fields other managers own, and the replacement of an object that cannot be patched."""

from __future__ import annotations

from enum import Enum
from typing import Any

from kcp_shard_operator.constants import FIELD_MANAGER
from kcp_shard_operator.core.api.meta import HASH_ANNOTATION
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.api.quantity import quantity


def drifted_from(live: JSON | None, desired: JSON) -> bool:
    """Whether ``live`` needs a write to become ``desired``.

    A claim is only compared by value: the volume binder sets its ``volumeName`` (another
    field manager), which is no hand edit to put back. Nor is a change of the update
    strategy alone (:func:`strategy_write_deferred`).
    """
    if not contains(live, desired):
        return not strategy_write_deferred(live, desired)
    return desired["kind"] in REPLACEABLE_KINDS and bool(foreign_fields(live or {}, FIELD_MANAGER))


def strategy_write_deferred(live: JSON | None, desired: JSON) -> bool:
    """Whether the one change ``desired`` brings to ``live`` is the update strategy going back
    from ``Recreate`` to rolling updates after a move to another kcp minor.

    That write waits for the next one the Deployment needs (a spec change, a rotated
    Secret, a hand edit put back), which carries the rolling strategy to the rollout it
    starts: a Deployment rolls out only when its pod template changes, so until then the
    strategy decides nothing. It saves a write and a Deployment revision per upgrade.
    """
    if live is None or desired["kind"] != "Deployment":
        return False
    kinds = [(obj.get("spec") or {}).get("strategy", {}).get("type") for obj in (live, desired)]
    return (
        kinds == ["Recreate", "RollingUpdate"]
        and cause_of(live, desired) is Cause.STRATEGY
        and not foreign_fields(live, FIELD_MANAGER)
    )


QUANTITY_MAPS = frozenset({"limits", "requests"})
"""Keys whose values are quantities, which the server stores canonically (2Gi, 500m)."""


def contains(actual: Any, desired: Any) -> bool:
    """Whether ``actual`` already holds every value of ``desired``.

    Lists must match item by item; fields only the server sets are ignored; quantities
    match by value (the server stores ``1.5Gi`` as ``1536Mi``).
    """
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(
            _same_quantity(actual.get(key), value)
            if isinstance(value, dict) and key in QUANTITY_MAPS
            else contains(actual.get(key), value)
            for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(desired)
            and all(contains(a, d) for a, d in zip(actual, desired, strict=True))
        )
    return bool(actual == desired)


def _same_quantity(actual: Any, desired: JSON) -> bool:
    """Whether the quantities in ``actual`` equal those of ``desired`` by value."""
    if not isinstance(actual, dict) or set(actual) != set(desired):
        return False
    return all(
        actual[name] == value
        or (quantity(value) is not None and quantity(value) == quantity(actual[name]))
        for name, value in desired.items()
    )


class Cause(Enum):
    """Why a child is written or differs: it is new, the rendering changed, someone edited
    it, or only the update strategy follows the Shard's status (back from ``Recreate`` after
    a move to another kcp minor: no change of the Shard's spec, no new pods; see
    ``strategy_write_deferred``)."""

    CREATED = "Created"
    SPEC_CHANGED = "SpecChanged"
    DRIFT = "Drift"
    STRATEGY = "StrategyChanged"


def cause_of(live: JSON | None, desired: JSON) -> Cause:
    """Drift when the live child carries the hash of this very rendering; else a change of
    the update strategy alone, or of the spec."""
    if live is None:
        return Cause.CREATED
    hashes = [
        (obj.get("metadata", {}).get("annotations") or {}).get(HASH_ANNOTATION)
        for obj in (live, desired)
    ]
    if hashes[0] == hashes[1]:
        return Cause.DRIFT
    spec = dict(desired.get("spec") or {})
    if spec.pop("strategy", None) is None:
        return Cause.SPEC_CHANGED
    meta = desired["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != HASH_ANNOTATION}
    rest = {**desired, "metadata": {**meta, "annotations": annotations}, "spec": spec}
    return Cause.STRATEGY if contains(live, rest) else Cause.SPEC_CHANGED


TEMPLATE_ANNOTATIONS = ("f:spec", "f:template", "f:metadata", "f:annotations")
"""Left to others: ``kubectl rollout restart`` marks the pod template there."""


def _field_paths(fields: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The leaf paths of a managedFields ``fieldsV1`` set."""
    if not isinstance(fields, dict) or not fields:
        return {prefix}
    paths: set[tuple[str, ...]] = set()
    for key, sub in fields.items():
        paths |= _field_paths(sub, (*prefix, key))
    return paths


def foreign_fields(live: JSON, manager: str) -> list[str]:
    """Spec fields of ``live`` that another field manager set and ``manager`` does not own.

    Server-side apply never removes what another manager added (a sidecar, an env var, a
    port from ``kubectl edit``); only a full replace does.
    """
    ours: set[tuple[str, ...]] = set()
    theirs: set[tuple[str, ...]] = set()
    for entry in live.get("metadata", {}).get("managedFields") or []:
        if entry.get("subresource"):
            continue
        paths = _field_paths(entry.get("fieldsV1") or {})
        if entry.get("manager") == manager:
            ours |= paths
        else:
            theirs |= paths
    return sorted(
        ".".join(path)
        for path in theirs - ours
        if path[:1] == ("f:spec",) and path[:4] != TEMPLATE_ANNOTATIONS
    )


def spec_field_managers(live: JSON, manager: str) -> list[JSON]:
    """The part of ``live``'s managedFields that :func:`foreign_fields` reads: the entries on
    the object itself (no subresource) that set spec fields, each with its ``f:spec`` set
    alone; none when ``manager`` is the only one left, since no field is foreign then.

    A Deployment's managedFields (the operator's whole pod template, the controller's status)
    are over 40% of its body; the watch store keeps only this of them.
    """
    entries = [
        {"manager": entry.get("manager"), "fieldsV1": {"f:spec": spec}}
        for entry in live.get("metadata", {}).get("managedFields") or []
        if not entry.get("subresource") and (spec := (entry.get("fieldsV1") or {}).get("f:spec"))
    ]
    return entries if any(entry["manager"] != manager for entry in entries) else []


# Allocated by the API server and immutable: a replace must carry them over.
_ALLOCATED_SPEC_FIELDS = {"Service": ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy")}
REPLACEABLE_KINDS = frozenset({"Deployment", "Service", "PodDisruptionBudget"})
"""Kinds the operator may replace (PUT) with its rendering. Never a claim: most of its spec
is fixed once it exists, and its binding is another controller's."""
RECREATABLE_KINDS = frozenset({"Service", "PodDisruptionBudget"})
"""Kinds the operator may delete and create again when neither apply nor replace works."""


def replacement(desired: JSON, live: JSON) -> JSON:
    """The body of a full replace (PUT) of ``live`` with ``desired``.

    The spec is exactly the rendering; metadata keeps what others put there (the
    Deployment controller's revision annotation, finalizers) and the resourceVersion
    guards against a concurrent change.
    """
    old = live.get("metadata", {})
    new = desired["metadata"]
    metadata: JSON = {
        **new,
        "resourceVersion": old.get("resourceVersion"),
        "labels": {**(old.get("labels") or {}), **(new.get("labels") or {})},
        "annotations": {**(old.get("annotations") or {}), **(new.get("annotations") or {})},
    }
    if old.get("finalizers"):
        metadata["finalizers"] = old["finalizers"]
    spec = dict(desired.get("spec") or {})
    for key in _ALLOCATED_SPEC_FIELDS.get(desired["kind"], ()):
        if (live.get("spec") or {}).get(key) is not None:
            spec[key] = live["spec"][key]
    return {**desired, "metadata": metadata, "spec": spec}
