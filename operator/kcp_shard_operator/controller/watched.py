"""The kinds the operator watches, and which of their objects a watch delivers: what kopf's
handlers are registered for, and what a listing of the operator's own keeps."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from kcp_shard_operator.constants import (
    CACHE_SERVER_API_VERSION,
    CACHE_SERVER_KIND,
    FIELD_MANAGER,
    FRONT_PROXY_API_VERSION,
    FRONT_PROXY_KIND,
    KUBECONFIG_API_VERSION,
    KUBECONFIG_KIND,
    SHARD_API_VERSION,
    SHARD_KIND,
    VIRTUAL_WORKSPACES_API_VERSION,
    VIRTUAL_WORKSPACES_KIND,
)
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.kube.client import PLURALS

MANAGED = {"app.kubernetes.io/managed-by": FIELD_MANAGER}
"""The label of every object the operator writes: its children and its pods are watched by it."""


@dataclass(frozen=True)
class Watched:
    """One watched kind: its API version and, where the watch selects, the labels."""

    api_version: str
    kind: str
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def plural(self) -> str:
        return PLURALS[self.kind]

    def delivers(self, body: JSON) -> bool:
        """Whether the watch delivers ``body`` (it carries the labels the watch selects)."""
        labels = (body.get("metadata") or {}).get("labels") or {}
        return all(labels.get(key) == value for key, value in self.labels.items())


OWNERS = (
    Watched(SHARD_API_VERSION, SHARD_KIND),
    Watched(CACHE_SERVER_API_VERSION, CACHE_SERVER_KIND),
    Watched(FRONT_PROXY_API_VERSION, FRONT_PROXY_KIND),
    Watched(VIRTUAL_WORKSPACES_API_VERSION, VIRTUAL_WORKSPACES_KIND),
    Watched(KUBECONFIG_API_VERSION, KUBECONFIG_KIND),
)
"""The operator's own kinds, whose objects own the rest."""
CHILDREN = (
    Watched("v1", "Service", MANAGED),
    Watched("v1", "PersistentVolumeClaim", MANAGED),
    Watched("apps/v1", "Deployment", MANAGED),
    Watched("policy/v1", "PodDisruptionBudget", MANAGED),
    Watched("v1", "ConfigMap", MANAGED),
    Watched("networking.k8s.io/v1", "NetworkPolicy", MANAGED),
    Watched("batch/v1", "Job", MANAGED),
)
"""What the operator writes for them (and, below, their pods and the Secrets they mount)."""
PODS = Watched("v1", "Pod", MANAGED)
SECRETS = Watched("v1", "Secret")
WATCHED = {watched.kind: watched for watched in (*OWNERS, *CHILDREN, PODS, SECRETS)}
OWNER_KINDS = frozenset(watched.kind for watched in OWNERS)
RELIST_GAP_SECONDS = 5.0
"""A listing's objects arrive together; one coming this long after the last is a new one."""


class Relists:
    """Tells a watch that lists again from its first listing, by the events kopf delivers.

    kopf delivers a listing's objects as events of type None and the end of a listing not at
    all. A watch lists again after a gap (kopf restarts it on a 410 Gone, or when a listing
    or a connection fails), re-sending what exists: a listing event of a kind that comes
    after a quiet gap since the kind's last listing event, or after the kind's watch
    delivered changes while its first listing had delivered nothing, is a listing again.
    """

    def __init__(self) -> None:
        self._listed: dict[str, float] = {}
        self._changed: set[str] = set()
        self._guard = threading.Lock()

    def changed(self, kind: str) -> None:
        """The watch of ``kind`` delivered a change (an event of type ADDED, MODIFIED or
        DELETED)."""
        with self._guard:
            self._changed.add(kind)

    def listed(self, kind: str, now: float) -> bool:
        """The watch of ``kind`` delivered an object of a listing at monotonic time ``now``;
        whether that starts a listing again."""
        with self._guard:
            last = self._listed.get(kind)
            self._listed[kind] = now
            changed = kind in self._changed
            self._changed.discard(kind)
        return now - last > RELIST_GAP_SECONDS if last is not None else changed
