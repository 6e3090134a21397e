"""kopf's watches over a FakeKube, for unit tests of the handlers: each object's changes are
delivered to the operator's handlers as kopf delivers them (ADDED, MODIFIED, DELETED, and a
listing's events of type None), or held back while the watches are broken."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from kcp_shard_operator.controller.context import Context
from kcp_shard_operator.controller.handlers import FINALIZER, REACTIONS, watching
from kcp_shard_operator.controller.watched import WATCHED
from kcp_shard_operator.core.api.model import JSON

from .fake_kube import LOGGER, FakeKube, Key


def finalized(obj: JSON) -> JSON:
    """``obj`` with kopf's finalizer on it, as kopf's first patch leaves it."""
    found = copy.deepcopy(obj)
    found["metadata"]["finalizers"] = [FINALIZER]
    return found


class Watches:
    """What the watches of ``ctx`` have delivered of ``kube``'s objects."""

    def __init__(self, ctx: Context, kube: FakeKube) -> None:
        self.ctx, self.kube = ctx, kube
        self.memo = SimpleNamespace(context=ctx)
        self.seen: dict[Key, JSON] = {}

    def deliver(self, type: str | None, obj: JSON) -> None:
        """One event about ``obj``, to the handler of its kind."""
        kind = obj["kind"]
        handler = watching(kind, REACTIONS[kind])
        handler(type=type, body=copy.deepcopy(obj), memo=self.memo, logger=LOGGER)

    def _watched(self) -> dict[Key, JSON]:
        return {
            key: obj
            for key, obj in self.kube.objects.items()
            if key[0] in WATCHED and WATCHED[key[0]].delivers(obj)
        }

    def listing(self) -> None:
        """A watch's listing: every watched object that exists now, as type None."""
        now = self._watched()
        for obj in now.values():
            self.deliver(None, obj)
        self.seen = copy.deepcopy(now)

    def catch_up(self) -> None:
        """The events of what changed since the last delivery, until nothing changes."""
        while True:
            now = self._watched()
            changes: list[tuple[str, Any]] = [
                ("DELETED", obj) for key, obj in self.seen.items() if key not in now
            ]
            changes += [
                ("ADDED" if key not in self.seen else "MODIFIED", obj)
                for key, obj in now.items()
                if self.seen.get(key, {}).get("metadata", {}).get("resourceVersion")
                != obj["metadata"]["resourceVersion"]
            ]
            if not changes:
                return
            self.seen = copy.deepcopy(now)
            for type_, obj in changes:
                self.deliver(type_, obj)
