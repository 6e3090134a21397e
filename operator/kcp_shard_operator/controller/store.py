"""Objects seen on the operator's watch streams, so a reconcile pass reads no API.

kopf's event handlers put every Shard, child, Secret and shard Pod they see here; a pass reads from
here and asks the API server only for what the watches have not delivered yet (a miss).
An object known to be absent (deleted on a watch, or a 404 after a miss) is remembered as
``None``, so a Shard without a PodDisruptionBudget costs no read either. Secrets are kept
as metadata only: their content never enters the operator's memory through the store;
Pods as the little that tells why one does not run.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from kcp_shard_operator.constants import API_GROUP
from kcp_shard_operator.core.api.model import JSON

Entry = tuple[int | None, str] | None
"""(resourceVersion when an integer, compact JSON body); None: known to be absent."""


def _resource_version(body: JSON) -> int | None:
    text = str((body.get("metadata") or {}).get("resourceVersion", ""))
    return int(text) if text.isdigit() else None


def trimmed(kind: str, body: JSON) -> JSON:
    """What the cache keeps of ``body``: all of it, but of a Secret its metadata
    (:func:`_secret_metadata`) and the names of its keys, and of a Pod what tells why it
    does not run (its labels, conditions and container states).

    managedFields stay: they tell which fields another manager added by hand.
    """
    meta = body.get("metadata") or {}
    if kind == "Secret":
        return {"metadata": _secret_metadata(meta), "keys": sorted(body.get("data") or {})}
    if kind == "Pod":
        status = body.get("status") or {}
        return {
            "metadata": {
                k: meta[k] for k in ("name", "namespace", "resourceVersion", "labels") if k in meta
            },
            "status": {
                "conditions": status.get("conditions") or [],
                "containerStatuses": [
                    {"name": c.get("name"), "state": c.get("state") or {}}
                    for c in status.get("containerStatuses") or []
                ],
            },
        }
    return body


def _secret_metadata(meta: JSON) -> JSON:
    """A Secret's identity, labels and the operator's own annotations: never another
    annotation, which may hold the content (kubectl's last-applied-configuration does)."""
    kept: JSON = {
        k: meta[k] for k in ("name", "namespace", "resourceVersion", "uid", "labels") if k in meta
    }
    ours = {
        key: value
        for key, value in (meta.get("annotations") or {}).items()
        if key.startswith(f"{API_GROUP}/")
    }
    if ours:
        kept["annotations"] = ours
    return kept


class Store:
    """A thread-safe map of the newest body seen per object, indexed by kind and namespace
    (a select reads only that namespace's objects of that kind).

    Bodies are kept as compact JSON text (about a tenth of the memory of the parsed
    dicts) and parsed on every read, so a caller may change what it gets.
    """

    def __init__(self) -> None:
        self._objects: dict[tuple[str, str], dict[str, Entry]] = {}
        self._listed: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def put(self, kind: str, body: JSON) -> None:
        """Keep ``body`` unless the store already holds a newer version of the object.

        Watch events and the operator's own write responses race; resourceVersions are
        compared only when both are integers (etcd revisions), else the last one wins.
        """
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        kept = trimmed(kind, body)
        new_rv = _resource_version(kept)
        text = json.dumps(kept, separators=(",", ":"))
        with self._lock:
            objects = self._objects.setdefault((kind, namespace), {})
            old = objects.get(name)
            old_rv = old[0] if old is not None else None
            if old_rv is not None and new_rv is not None and new_rv < old_rv:
                return
            objects[name] = (new_rv, text)

    def fill(self, kind: str, namespace: str, bodies: list[JSON]) -> None:
        """A whole listing of ``kind`` in ``namespace``: every object the store does not know
        yet is kept (what a watch delivered is as new or newer), and from now on the store
        holds all of them (:meth:`listed`)."""
        with self._lock:
            objects = self._objects.setdefault((kind, namespace), {})
            for body in bodies:
                kept = trimmed(kind, body)
                name = str((kept.get("metadata") or {}).get("name", ""))
                if name not in objects:
                    objects[name] = (
                        _resource_version(kept),
                        json.dumps(kept, separators=(",", ":")),
                    )
            self._listed.add((kind, namespace))

    def listed(self, kind: str, namespace: str) -> bool:
        """Whether the store holds every object of ``kind`` in ``namespace`` (:meth:`fill`)."""
        with self._lock:
            return (kind, namespace) in self._listed

    def deleted(self, kind: str, namespace: str, name: str) -> None:
        """The object is gone (a watch said so, or the operator deleted it).

        A Pod is forgotten: pods are never read by name and their names do not come back.
        """
        with self._lock:
            if kind != "Pod":
                self._objects.setdefault((kind, namespace), {})[name] = None
                return
            objects = self._objects.get((kind, namespace))
            if objects is not None:
                objects.pop(name, None)
                if not objects:
                    del self._objects[(kind, namespace)]

    def not_found(self, kind: str, namespace: str, name: str) -> None:
        """A read after a miss found nothing; a body a watch put meanwhile stays."""
        with self._lock:
            self._objects.setdefault((kind, namespace), {}).setdefault(name, None)

    def lookup(self, kind: str, namespace: str, name: str) -> tuple[bool, JSON | None]:
        """Whether the store knows the object, and its body (None: known to be absent)."""
        with self._lock:
            objects = self._objects.get((kind, namespace)) or {}
            known, entry = name in objects, objects.get(name)
        return known, None if entry is None else _parsed(entry[1])

    def select(self, kind: str, namespace: str, keep: Callable[[JSON], bool]) -> list[JSON]:
        """Cached objects of ``kind`` in ``namespace`` for which ``keep`` is true."""
        with self._lock:
            objects = self._objects.get((kind, namespace)) or {}
            found = [entry[1] for entry in objects.values() if entry is not None]
        return [body for body in map(_parsed, found) if keep(body)]

    def every(self, kind: str) -> list[JSON]:
        """Every cached object of ``kind``, in all namespaces."""
        with self._lock:
            found = [
                entry[1]
                for (held, _), objects in self._objects.items()
                if held == kind
                for entry in objects.values()
                if entry is not None
            ]
        return [_parsed(text) for text in found]

    def sizes(self) -> dict[str, int]:
        """How many objects the store holds per kind, those known to be absent included."""
        sizes: dict[str, int] = {}
        with self._lock:
            for (kind, _), objects in self._objects.items():
                sizes[kind] = sizes.get(kind, 0) + len(objects)
        return sizes


def _parsed(text: str) -> JSON:
    body: JSON = json.loads(text)
    return body
