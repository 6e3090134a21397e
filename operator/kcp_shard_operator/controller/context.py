"""What every pass needs: settings, the API calls, the watch-fed store, the runners of the passes
and of what runs beside them, the locks passes share, and the outside effects a unit test
replaces (Events, the shard HTTP cleanup and health probe, the clock)."""

from __future__ import annotations

import contextvars
import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import kopf

from kcp_shard_operator.controller.metrics import Metrics
from kcp_shard_operator.controller.peering import Pause
from kcp_shard_operator.controller.periodic import Periodic, idle
from kcp_shard_operator.controller.schedule import Runner
from kcp_shard_operator.controller.store import Store
from kcp_shard_operator.controller.watched import Relists
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.record import Outcome as BackupOutcome
from kcp_shard_operator.core.frontproxy.status import Route
from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.core.kubeconfig.access import Problem, Target
from kcp_shard_operator.core.shard.health import Probe, ProbeTarget
from kcp_shard_operator.core.status.conditions import Condition
from kcp_shard_operator.core.status.events import Event
from kcp_shard_operator.health.probe import probe_front_proxy, probe_shard
from kcp_shard_operator.identitycache.client import clean_shard
from kcp_shard_operator.identitycache.policy import Outcome
from kcp_shard_operator.issuer.x509 import CA
from kcp_shard_operator.kube.client import Ran
from kcp_shard_operator.useraccess.workspace import WorkspaceCalls, workspaces

PEERING_LIFETIME_SECONDS = 15
"""Keep-alives go out every lifetime minus 5-10 s, so a crashed replica is replaced within it."""
Logger = logging.Logger | logging.LoggerAdapter[Any]


class KubeAPI(Protocol):
    """The calls of :class:`kcp_shard_operator.kube.client.Kube` a pass makes."""

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> JSON | None: ...

    def list(self, api_version: str, kind: str, namespace: str | None) -> list[JSON]: ...

    def apply(self, obj: JSON) -> JSON: ...

    def create(self, obj: JSON) -> JSON: ...

    def replace(self, obj: JSON, dry_run: bool = False) -> JSON: ...

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None: ...

    def storage_classes(self) -> dict[str, JSON]: ...

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: JSON
    ) -> JSON: ...

    def secret_value(self, namespace: str, name: str, key: str) -> bytes | None: ...

    def secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None: ...

    def run_in_container(
        self, namespace: str, pod: str, container: str, command: Sequence[str]
    ) -> Ran: ...


def call_later(seconds: float, work: Callable[[], None]) -> None:
    """Run ``work`` in a thread of its own after ``seconds``, in the caller's context (kopf's
    Event poster goes with it, as with :class:`Runner`)."""
    timer = threading.Timer(seconds, contextvars.copy_context().run, args=(work,))
    timer.daemon = True
    timer.start()


def post_event(obj: JSON, event: Event) -> None:
    """An Event about ``obj`` through kopf's poster (only inside a running operator)."""
    kopf.event(cast(kopf.Body, obj), type=event.type, reason=event.reason, message=event.message)


@dataclass(frozen=True)
class Asked:
    """What kcp last answered about a Shard (None: nothing yet), failed answers in a row,
    when to ask again, and when its last rollout ended (None: it rolls out)."""

    probe: Probe | None
    failures: int
    next_at: float
    rolled_out_at: float | None
    doubted: bool = False
    """An unreachable shard was asked again before it is reported (one miss is no outage)."""


@dataclass(frozen=True)
class Routed:
    """What the last read through a FrontProxy gave (None: nothing yet), when to read again,
    and when its last rollout ended (None: it rolls out)."""

    route: Route | None
    next_at: float
    rolled_out_at: float | None


@dataclass(frozen=True)
class Mounts:
    """The Secrets a Shard's pods mount or whose CA signs its certificates, and the versions
    (store sequence numbers) of the Shard, its installation's root (itself for a root shard)
    and its FrontProxy they were made from."""

    version: int
    root: str
    root_version: int | None
    proxy: tuple[str, int | None] | None
    secrets: frozenset[str]


@dataclass
class _Held:
    """A lock and how many passes hold or wait for it (freed when none does)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0


def _nothing(kind: str, gone: list[JSON]) -> None:
    """What a listing that finds objects gone does where no handler is registered."""


@dataclass
class Settings:
    """Operator settings, fixed at start-up."""

    deprecating_release: Version
    identity_cache_cleanup: bool = True
    kcp_checks: bool = True
    """Ask kcp (health probe, identity-cache cleanup); off where pods run no kcp (kwok)."""
    peering_lifetime: int = PEERING_LIFETIME_SECONDS


@dataclass
class Context:
    """What every pass needs: settings, API access, the watch-fed store, the runners, the
    locks passes share, and what is kept per object between passes."""

    settings: Settings
    kube: KubeAPI
    store: Store = field(default_factory=Store)
    _locks: dict[str, _Held] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)
    cleanup_failures: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Per Shard: failed identity-cache cleanups in a row, and the monotonic time of the next."""
    cleaned: dict[str, Condition] = field(default_factory=dict)
    """Per Shard: the condition an identity-cache cleanup ended with, until a pass records it."""
    passes: Runner = field(default_factory=lambda: Runner("pass"))
    """Where passes run, one at a time per object, coalesced (:mod:`schedule`)."""
    background: Runner = field(default_factory=lambda: Runner("background"))
    """Where the kcp probes and the identity-cache cleanup run, outside the passes."""
    periodic: Periodic = field(default_factory=idle)
    """What requests a pass over every object once per period (:mod:`periodic`)."""
    pause: Pause = field(default_factory=Pause)
    """Whether kopf's peering has paused this replica (:mod:`peering`)."""
    vanished: Callable[[str, list[JSON]], None] = _nothing
    """What to do about objects of a kind a listing found gone (their owners' passes)."""
    mounts: dict[str, Mounts] = field(default_factory=dict)
    """Per Shard: what its pods mount, made again only when it, its root or its FrontProxy
    changed (a Secret's event asks it of every Shard of the namespace)."""
    relists: Relists = field(default_factory=Relists)
    """Which watch events start a listing again (:mod:`resync`)."""
    post: Callable[[JSON, Event], None] = post_event
    clean: Callable[[bytes], Outcome] = clean_shard
    """Delete the stale ConfigMap on the shard a kubeconfig names."""
    probe: Callable[[ProbeTarget], Probe] = probe_shard
    """Ask kcp whether a shard is ready, still holds its data and is registered on its root."""
    probes: dict[str, Asked] = field(default_factory=dict)
    later: Callable[[float, Callable[[], None]], None] = call_later
    """Run work after some seconds (a probe asked again soon brings its own pass)."""
    route: Callable[[bytes, str], Route] = probe_front_proxy
    """Read through a front-proxy (its admin kubeconfig, its Service URL)."""
    routes: dict[str, Routed] = field(default_factory=dict)
    """Per FrontProxy: what it gave last, when to ask through it again."""
    workspaces: Callable[[bytes, Target], WorkspaceCalls | Problem] = workspaces
    """Ask inside kcp for a Kubeconfig (its target's admin kubeconfig, the target)."""
    rolled_out: dict[str, str] = field(default_factory=dict)
    """Per Shard (by uid): the Deployment revision whose finished rollout an Event announced.
    In memory only: after a restart, a rollout may be announced once more."""
    terminating: dict[str, str] = field(default_factory=dict)
    """Shards (by uid) whose namespace is being deleted, with the namespace: nothing more is
    written for them, nor posted about them, until they are deleted too."""
    conflicts: dict[tuple[str, str], int] = field(default_factory=dict)
    """Per owner (by uid) and kind of child: passes in a row whose write of that child kept
    conflicting with another writer's."""
    clock: Callable[[], float] = time.monotonic
    signers: dict[str, tuple[str | None, CA]] = field(default_factory=dict)
    """The last CA read to sign, per namespace/CA Secret, with the Secret's version (name,
    uid, resourceVersion): its key is read once, not once per Shard; a changed CA Secret
    replaces it."""
    wall_clock: Callable[[], datetime.datetime] = field(
        default=lambda: datetime.datetime.now(datetime.UTC)
    )
    """The time certificates are issued at and checked against."""
    storage_classes: tuple[float, dict[str, JSON]] | None = None
    """The last listing of the cluster's StorageClasses, with the monotonic time it was read."""
    metrics: Metrics = field(default_factory=Metrics)
    backup_outcomes: dict[str, BackupOutcome] = field(default_factory=dict)
    """Per Shard (``backup/<namespace>/<name>``): a finished backup, until a pass records it."""
    epoch_clock: Callable[[], float] = time.time
    """Seconds since the epoch, to measure rollouts against the times a status records."""

    def __post_init__(self) -> None:
        self.metrics.watch(self.store)

    def announce(self, obj: JSON, event: Event) -> None:
        """Post ``event`` about ``obj``, counted by type and reason."""
        self.metrics.events.labels(event.type, event.reason).inc()
        self.post(obj, event)

    @contextmanager
    def lock(self, namespace: str, name: str) -> Iterator[None]:
        """Serialise what passes over different objects share (an installation's PKI, a
        listing); the lock is freed once nobody holds or waits for it."""
        key = f"{namespace}/{name}"
        with self._guard:
            held = self._locks.setdefault(key, _Held())
            held.users += 1
        try:
            with held.lock:
                yield
        finally:
            with self._guard:
                held.users -= 1
                if not held.users:
                    del self._locks[key]

    def forget(self, namespace: str, name: str, uid: str) -> None:
        """What the context keeps about the deleted object ``namespace/name`` (``uid``)."""
        key = f"{namespace}/{name}"
        for kept in (self.probes, self.cleanup_failures, self.cleaned, self.routes, self.mounts):
            kept.pop(key, None)
        for by_uid in (self.rolled_out, self.terminating):
            by_uid.pop(uid, None)
        for conflicted in [key for key in self.conflicts if key[0] == uid]:
            del self.conflicts[conflicted]
