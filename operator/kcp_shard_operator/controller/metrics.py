"""The operator's Prometheus metrics: what passes, writes and rollouts did, and what the
watched objects say now.

Counters and histograms carry bounded labels only (kind, verb, reason, outcome, role); the
gauges are computed at scrape time from the watch store, so a scrape reads no API object.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kcp_shard_operator.constants import SHARD_KIND
from kcp_shard_operator.controller.store import Store
from kcp_shard_operator.core.installation.census import Backups, Census, census

PREFIX = "kcp_shard_operator"
PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BACKUP_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
ROLLOUT_BUCKETS = (5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)


class Metrics:
    """The metrics of one operator, in their own registry (one per Context)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.passes = Counter(
            f"{PREFIX}_reconcile_passes",
            "Reconcile passes, by kind of object.",
            ["kind"],
            registry=registry,
        )
        self.pass_seconds = Histogram(
            f"{PREFIX}_reconcile_duration_seconds",
            "Seconds a reconcile pass took, by kind of object.",
            ["kind"],
            buckets=PASS_BUCKETS,
            registry=registry,
        )
        self.pass_errors = Counter(
            f"{PREFIX}_reconcile_errors",
            "Passes that ended with a problem (the Degraded reason, or APIError when the pass "
            "stopped), by kind of object and reason.",
            ["kind", "reason"],
            registry=registry,
        )
        self.writes = Counter(
            f"{PREFIX}_api_writes",
            "API writes, by kind of object and verb (apply, create, replace, delete, "
            "patch-status).",
            ["kind", "verb"],
            registry=registry,
        )
        self.failed_writes = Counter(
            f"{PREFIX}_api_write_failures",
            "API writes the server refused or that did not reach it, by kind and verb.",
            ["kind", "verb"],
            registry=registry,
        )
        self.reads = Counter(
            f"{PREFIX}_api_reads",
            "API reads (a watch store miss, a Secret's content, StorageClasses), by kind.",
            ["kind"],
            registry=registry,
        )
        self.events = Counter(
            f"{PREFIX}_events",
            "Events posted about Shards, by type (Normal, Warning) and reason.",
            ["type", "reason"],
            registry=registry,
        )
        self.rollout_seconds = Histogram(
            f"{PREFIX}_rollout_duration_seconds",
            "Seconds from the start of a rollout to every replica running it, by role (root, "
            "non-root, cache-server, virtual-workspaces, front-proxy).",
            ["role"],
            buckets=ROLLOUT_BUCKETS,
            registry=registry,
        )
        self.cleanups = Counter(
            f"{PREFIX}_identity_cache_cleanups",
            "Attempts to delete the stale apiexport-identity-cache ConfigMap, by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.backups = Counter(
            f"{PREFIX}_backups",
            "Backups attempted, by trigger (OnDemand, Scheduled) and outcome (Succeeded, or "
            "the reason of the failure: VolumeFull, VerificationFailed, SnapshotFailed, DataLost; "
            "with a bucket TargetNotFound, AccessDenied, CredentialsNotFound, UploadFailed).",
            ["trigger", "outcome"],
            registry=registry,
        )
        self.backup_seconds = Histogram(
            f"{PREFIX}_backup_duration_seconds",
            "Seconds an etcd snapshot of a shard took to stream to its backup claim.",
            buckets=BACKUP_BUCKETS,
            registry=registry,
        )
        self.backup_upload_seconds = Histogram(
            f"{PREFIX}_backup_upload_duration_seconds",
            "Seconds a verified snapshot took to upload to its bucket (spec.backup.s3).",
            buckets=BACKUP_BUCKETS,
            registry=registry,
        )
        self.relists = Counter(
            f"{PREFIX}_watch_relists",
            "Watches that listed their objects again after their first listing (a restarted "
            "watch), by kind.",
            ["kind"],
            registry=registry,
        )

    def watch(self, store: Store) -> None:
        """Export what ``store`` holds at every scrape."""
        self.registry.register(StoreCollector(store))


class StoreCollector(Collector):
    """Gauges of the watch store: its size, and the Shards by phase, version, rollout and
    certificate expiry."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._counted: tuple[int, list[Metric]] | None = None
        self._lock = threading.Lock()

    def _shard_gauges(self) -> list[Metric]:
        """The gauges of the Shards' census, made again only when a Shard changed in the
        store: a scrape of a quiet operator parses no Shard and builds no sample again."""
        with self._lock:
            changes = self.store.changes(SHARD_KIND)
            if self._counted is None or self._counted[0] != changes:
                self._counted = (changes, list(_census_gauges(census(self.store.each(SHARD_KIND)))))
            return self._counted[1]

    def collect(self) -> Iterator[Metric]:
        sizes = GaugeMetricFamily(
            f"{PREFIX}_store_objects",
            "Objects the watch store holds, by kind (known absent ones included).",
            labels=["kind"],
        )
        held = GaugeMetricFamily(
            f"{PREFIX}_store_bytes",
            "Bytes of the bodies the watch store keeps (compact JSON), by kind.",
            labels=["kind"],
        )
        for kind, (count, kept) in sorted(self.store.sizes().items()):
            sizes.add_metric([kind], count)
            held.add_metric([kind], kept)
        yield sizes
        yield held
        yield from self._shard_gauges()


def _census_gauges(counted: Census) -> Iterator[Metric]:
    """The Shards by phase, version and rollout, their certificates' expiry, their backups."""
    yield _by_label(
        "shards", "Shards by the phase of their status.", "phase", counted.phases.items()
    )
    yield _by_label(
        "shards_running_version",
        "Shards by the kcp version rolled out on every replica (status.version).",
        "version",
        counted.versions.items(),
    )
    yield GaugeMetricFamily(
        f"{PREFIX}_rollouts_in_progress",
        "Shards whose rollout is going on (Progressing RollingOut).",
        value=counted.rolling_out,
    )
    expiry = GaugeMetricFamily(
        f"{PREFIX}_certificate_expiry_timestamp_seconds",
        "When each certificate the operator issued for a Shard expires (status.certificates).",
        labels=["namespace", "shard", "secret"],
    )
    for entry in counted.expiries:
        expiry.add_metric([entry.namespace, entry.shard, entry.secret], entry.not_after)
    yield expiry
    yield from _backup_gauges(counted.backups)


def _backup_gauges(backups: Iterable[Backups]) -> Iterator[Metric]:
    """The last verified backup of each Shard."""
    last = GaugeMetricFamily(
        f"{PREFIX}_backup_last_success_timestamp_seconds",
        "When the last verified backup of a Shard finished.",
        labels=["namespace", "shard"],
    )
    size = GaugeMetricFamily(
        f"{PREFIX}_backup_last_size_bytes",
        "Size of the newest verified backup of a Shard.",
        labels=["namespace", "shard"],
    )
    kept = GaugeMetricFamily(
        f"{PREFIX}_backups_kept",
        "Verified backups of a Shard its status lists (after retention).",
        labels=["namespace", "shard"],
    )
    for shard in backups:
        labels = [shard.namespace, shard.shard]
        if shard.last_success is not None:
            last.add_metric(labels, shard.last_success)
        if shard.newest_size is not None:
            size.add_metric(labels, shard.newest_size)
            kept.add_metric(labels, shard.kept)
    yield from (last, size, kept)


def _by_label(
    name: str, documentation: str, label: str, counts: Iterable[tuple[str, int]]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(f"{PREFIX}_{name}", documentation, labels=[label])
    for value, count in sorted(counts):
        family.add_metric([value], count)
    return family
