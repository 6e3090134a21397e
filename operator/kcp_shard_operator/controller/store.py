"""Objects seen on the operator's watch streams, so a reconcile pass reads no API.

kopf's event handlers put every Shard, child, Secret and shard Pod they see here; a pass reads from
here and asks the API server only for what the store cannot answer. The store answers for a
kind in a namespace once it holds a whole listing of it (:meth:`Store.replace`): an object it
does not hold there does not exist. Elsewhere an object known to be absent (deleted on a watch,
or a 404 after a miss) is remembered as a tombstone, for ``TOMBSTONE_SECONDS``.

A watch that lists again after a gap re-sends what exists and nothing for what vanished
meanwhile: :meth:`Store.doubt` makes the store stop answering from what it held before (a
pass then reads the API server), until a new listing replaces it.

Every change is keyed by resourceVersion (an etcd revision, compared when both are integers)
and a deletion also by uid, so a late event about an object deleted and created again neither
hides the new one nor brings back the old one. Secrets are kept as metadata only: their
content never enters the operator's memory through the store; Pods as the little that tells
why one does not run.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from kcp_shard_operator.constants import (
    API_GROUP,
    CACHE_SERVER_KIND,
    FIELD_MANAGER,
    FRONT_PROXY_KIND,
    KUBECONFIG_KIND,
    SHARD_KIND,
    VIRTUAL_WORKSPACES_KIND,
)
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.rollout.drift import spec_field_managers

TOMBSTONE_SECONDS = 300.0
"""How long an object known to be absent is remembered outside a listing: long enough for any
late event about it to arrive."""

Key = tuple[str, str]
"""(kind, namespace)."""

OWN_KINDS = frozenset(
    {SHARD_KIND, CACHE_SERVER_KIND, FRONT_PROXY_KIND, VIRTUAL_WORKSPACES_KIND, KUBECONFIG_KIND}
)
"""The operator's own kinds: nothing reads who set which of their fields, so their
managedFields (often the larger part of a Shard with a long status) are not kept."""


@dataclass(slots=True)
class _Entry:
    """What the store holds of one object: its body as compact JSON text, or None when it is
    known to be absent (a tombstone); the store's own sequence number of the change."""

    rv: int | None
    uid: str | None
    seq: int
    text: str | None
    at: float


def _resource_version(body: JSON) -> int | None:
    text = str((body.get("metadata") or {}).get("resourceVersion", ""))
    return int(text) if text.isdigit() else None


def trimmed(kind: str, body: JSON) -> JSON:
    """What the cache keeps of ``body``: all of it, but of a Secret its metadata
    (:func:`_secret_metadata`) and the names of its keys, and of a Pod what tells why it
    does not run (its labels, conditions and container states).

    Of a child's managedFields what tells which spec fields another manager added by hand
    (:func:`spec_field_managers`) stays; those of the operator's own kinds
    (:data:`OWN_KINDS`) go.
    """
    meta = body.get("metadata") or {}
    if kind == "Secret":
        return {"metadata": _secret_metadata(meta), "keys": sorted(body.get("data") or {})}
    if kind == "Pod":
        status = body.get("status") or {}
        return {
            "metadata": {
                k: meta[k]
                for k in ("name", "namespace", "resourceVersion", "uid", "labels")
                if k in meta
            },
            "status": {
                "conditions": status.get("conditions") or [],
                "containerStatuses": [
                    {"name": c.get("name"), "state": c.get("state") or {}}
                    for c in status.get("containerStatuses") or []
                ],
            },
        }
    if "managedFields" in meta:
        rest = {k: v for k, v in meta.items() if k != "managedFields"}
        managers = [] if kind in OWN_KINDS else spec_field_managers(body, FIELD_MANAGER)
        return {**body, "metadata": {**rest, "managedFields": managers} if managers else rest}
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


def _newer(rv: int | None, old: _Entry) -> bool:
    """Whether a body at ``rv`` may replace ``old``: not when both versions are integers and
    ``rv`` is older (or, for a tombstone, not newer: the deleted object's last version)."""
    if rv is None or old.rv is None:
        return True
    return rv > old.rv if old.text is None else rv >= old.rv


def _listed_over(rv: int | None, old: _Entry, since: int) -> bool:
    """Whether a listed body at ``rv`` replaces ``old``: what was held before the listing was
    requested, unless newer; a tombstone made after it only by a later version (the object
    made again), since the deletion is newer than the listing."""
    if old.seq <= since:
        return old.text is None or _newer(rv, old)
    if old.text is None:
        return rv is not None and old.rv is not None and rv > old.rv
    return _newer(rv, old)


class Store:
    """A thread-safe map of the newest body seen per object, indexed by kind and namespace
    (a select reads only that namespace's objects of that kind).

    Bodies are kept as compact JSON text (about a tenth of the memory of the parsed
    dicts) and parsed on every read, so a caller may change what it gets.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._objects: dict[Key, dict[str, _Entry]] = {}
        self._listed: set[Key] = set()
        self._doubted: dict[Key, int] = {}
        self._seq = 0
        self._changes: dict[str, int] = {}
        self._clock = clock
        self._pruned_at = clock()
        self._lock = threading.Lock()

    def _write(self, kind: str, namespace: str, name: str, entry: _Entry | None) -> None:
        """Hold ``entry`` for the object (None: forget it); called with the lock held."""
        self._changes[kind] = self._changes.get(kind, 0) + 1
        objects = self._objects.setdefault((kind, namespace), {})
        if entry is None:
            objects.pop(name, None)
        else:
            objects[name] = entry
        if not objects:
            del self._objects[(kind, namespace)]

    def _entry(self, rv: int | None, uid: object, text: str | None) -> _Entry:
        self._seq += 1
        return _Entry(rv, str(uid) if uid else None, self._seq, text, self._clock())

    def _trusted(self, key: Key, entry: _Entry) -> bool:
        return entry.seq > self._doubted.get(key, 0)

    def put(self, kind: str, body: JSON) -> None:
        """Keep ``body`` unless the store already holds a newer version of the object, or
        knows it deleted at this version or later.

        Watch events and the operator's own write responses race; resourceVersions are
        compared only when both are integers (etcd revisions), else the last one wins.
        """
        kept = trimmed(kind, body)
        meta = kept.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        rv = _resource_version(kept)
        text = json.dumps(kept, separators=(",", ":"))
        with self._lock:
            old = (self._objects.get((kind, namespace)) or {}).get(name)
            if old is None or _newer(rv, old):
                self._write(kind, namespace, name, self._entry(rv, meta.get("uid"), text))

    def deleted(
        self, kind: str, namespace: str, name: str, uid: str | None = None, rv: str | None = None
    ) -> None:
        """The object ``uid`` is gone, at resourceVersion ``rv`` (a watch said so, or the
        operator deleted it: then ``rv`` is the last version it saw).

        A deletion of another object of that name (an older one, whose DELETED event comes
        after its successor's ADDED) or of an older version than the one held changes nothing.
        """
        version = int(rv) if rv and rv.isdigit() else None
        with self._lock:
            self._prune()
            old = (self._objects.get((kind, namespace)) or {}).get(name)
            if old is not None and old.text is not None:
                if uid and old.uid and uid != old.uid:
                    return
                if version is not None and old.rv is not None and version < old.rv:
                    return
            self._write(kind, namespace, name, self._entry(version, uid, None))

    def not_found(self, kind: str, namespace: str, name: str) -> None:
        """A read after a miss found nothing; a body a watch put meanwhile stays."""
        with self._lock:
            self._prune()
            key = (kind, namespace)
            old = (self._objects.get(key) or {}).get(name)
            if old is None or not self._trusted(key, old):
                self._write(kind, namespace, name, self._entry(None, None, None))

    def lookup(self, kind: str, namespace: str, name: str) -> tuple[bool, JSON | None]:
        """Whether the store knows the object, and its body (None: known to be absent)."""
        key = (kind, namespace)
        with self._lock:
            entry = (self._objects.get(key) or {}).get(name)
            if entry is not None and self._trusted(key, entry):
                text = entry.text
            elif entry is None and key in self._listed:
                text = None
            else:
                return False, None
        return True, None if text is None else _parsed(text)

    def mark(self) -> int:
        """The store's sequence number now: what :meth:`replace` weighs a listing against."""
        with self._lock:
            return self._seq

    def replace(
        self,
        kind: str,
        namespace: str,
        bodies: Iterable[JSON],
        since: int,
        keep: Callable[[JSON], bool] = lambda _: True,
    ) -> list[JSON]:
        """A whole listing of ``kind`` in ``namespace`` (``bodies`` for which ``keep`` is
        true), requested when the store was at :meth:`mark` ``since``: from now on the store
        holds exactly that, and what a watch or a write delivered after ``since``.

        Returns the objects held before that the listing no longer has (deleted meanwhile).
        """
        listed: dict[str, tuple[int | None, object, str]] = {}
        for body in bodies:
            if keep(body):
                kept = trimmed(kind, body)
                meta = kept.get("metadata") or {}
                text = json.dumps(kept, separators=(",", ":"))
                listed[str(meta.get("name", ""))] = (_resource_version(kept), meta.get("uid"), text)
        key = (kind, namespace)
        dropped: list[str] = []
        with self._lock:
            held = self._objects.get(key) or {}
            for name, entry in list(held.items()):
                if name not in listed and entry.seq <= since:
                    if entry.text is not None:
                        dropped.append(entry.text)
                    self._write(kind, namespace, name, None)
            for name, (rv, uid, text) in listed.items():
                old = (self._objects.get(key) or {}).get(name)
                if old is None or _listed_over(rv, old, since):
                    self._write(kind, namespace, name, self._entry(rv, uid, text))
            self._listed.add(key)
            self._doubted.pop(key, None)
        return [_parsed(text) for text in dropped]

    def listed(self, kind: str, namespace: str) -> bool:
        """Whether the store holds every object of ``kind`` in ``namespace`` (:meth:`replace`)."""
        with self._lock:
            return (kind, namespace) in self._listed

    def doubt(self, namespaces: Iterable[str]) -> list[Key]:
        """A watch listed again after a gap: what the store holds may have been deleted
        meanwhile. In ``namespaces`` it stops answering from what it holds now until a
        listing replaces it; elsewhere it forgets it. Returns the (kind, namespace) pairs to
        list again."""
        keep = set(namespaces)
        with self._lock:
            keys = set(self._objects) | self._listed
            self._listed.clear()
            for kind, namespace in keys:
                if namespace in keep:
                    self._doubted[(kind, namespace)] = self._seq
                else:
                    self._objects.pop((kind, namespace), None)
                    self._doubted.pop((kind, namespace), None)
            return sorted(key for key in keys if key[1] in keep)

    def doubted(self) -> list[Key]:
        """The (kind, namespace) pairs the store does not answer for until listed again."""
        with self._lock:
            return sorted(self._doubted)

    def select(self, kind: str, namespace: str, keep: Callable[[JSON], bool]) -> list[JSON]:
        """Cached objects of ``kind`` in ``namespace`` for which ``keep`` is true."""
        return [body for body in self.each(kind, namespace) if keep(body)]

    def each(self, kind: str, namespace: str | None = None) -> Iterator[JSON]:
        """Every cached object of ``kind`` (in ``namespace``, or in all), parsed one at a time
        as the caller asks for it: a caller that keeps little of each holds one body at a
        time, not a thousand."""
        with self._lock:
            if namespace is None:
                held = [objects for (k, _), objects in self._objects.items() if k == kind]
            else:
                held = [self._objects.get((kind, namespace)) or {}]
            found = [
                entry.text
                for objects in held
                for entry in objects.values()
                if entry.text is not None
            ]
        return map(_parsed, found)

    def versions(self, kind: str, namespace: str) -> dict[str, int]:
        """The objects of ``kind`` in ``namespace`` the store holds, each with the store's
        sequence number of its last change (a cheap version to cache what is made of it)."""
        with self._lock:
            objects = self._objects.get((kind, namespace)) or {}
            return {name: entry.seq for name, entry in objects.items() if entry.text is not None}

    def namespaces(self, kinds: Iterable[str]) -> set[str]:
        """The namespaces in which the store holds an object of one of ``kinds``."""
        wanted = set(kinds)
        with self._lock:
            return {
                namespace
                for (kind, namespace), objects in self._objects.items()
                if kind in wanted and any(entry.text is not None for entry in objects.values())
            }

    def changes(self, kind: str) -> int:
        """How many times what the store holds of ``kind`` changed: the same number twice
        means nothing of that kind changed in between (what is made of them may be kept)."""
        with self._lock:
            return self._changes.get(kind, 0)

    def sizes(self) -> dict[str, tuple[int, int]]:
        """Per kind, how many objects the store holds (those known to be absent included) and
        the bytes of the bodies it keeps."""
        sizes: dict[str, tuple[int, int]] = {}
        with self._lock:
            for (kind, _), objects in self._objects.items():
                count, held = sizes.get(kind, (0, 0))
                kept = sum(len(entry.text or "") for entry in objects.values())
                sizes[kind] = (count + len(objects), held + kept)
        return sizes

    def _prune(self) -> None:
        """Forget the tombstones older than TOMBSTONE_SECONDS, at most once in that time;
        called with the lock held."""
        now = self._clock()
        if now - self._pruned_at < TOMBSTONE_SECONDS:
            return
        self._pruned_at = now
        for (kind, namespace), objects in list(self._objects.items()):
            for name, entry in list(objects.items()):
                if entry.text is None and now - entry.at >= TOMBSTONE_SECONDS:
                    self._write(kind, namespace, name, None)


def _parsed(text: str) -> JSON:
    body: JSON = json.loads(text)
    return body
