"""The operator's metrics: what passes against an in-memory API server count, and what a
scrape of the watch store shows."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from kcp_shard_operator.controller.context import Context
from kcp_shard_operator.controller.metered import MeteredKube
from kcp_shard_operator.controller.metrics import StoreCollector
from kcp_shard_operator.controller.store import Store
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.installation.census import Backups, census, rollout_seconds, timestamp
from kcp_shard_operator.identitycache.policy import Outcome, Result
from tests.conftest import non_root_object, shard_object
from tests.fake_kube import (
    SECRETS,
    Effects,
    FakeKube,
    context,
    refused,
    rolled_out,
    run,
    secret,
    settle,
)

ADMIN: dict[str, Any] = {"adminKubeconfigSecretRef": {"name": "admin"}}


def metered(kube: FakeKube, effects: Effects | None = None) -> Context:
    """The operator's context over ``kube``, its API calls counted as in ``run``."""
    ctx = context(kube, effects)
    ctx.kube = MeteredKube(kube, ctx.metrics)
    return ctx


def value(ctx: Context, name: str, **labels: str) -> float:
    found = ctx.metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def total(ctx: Context, name: str) -> float:
    """The sum of a counter over all its labels."""
    return sum(
        sample.value
        for family in ctx.metrics.registry.collect()
        for sample in family.samples
        if sample.name == name
    )


def test_writes_and_reads_are_counted_as_the_api_server_sees_them() -> None:
    kube = FakeKube(shard_object())
    ctx = metered(kube)
    settle(ctx, kube, "root")
    writes = total(ctx, "kcp_shard_operator_api_writes_total")
    assert writes == len(kube.writes) > 0
    assert value(ctx, "kcp_shard_operator_api_writes_total", kind="Deployment", verb="apply") == 1
    issued = [call for call in kube.writes if call[:2] == ("create", "Secret")]
    assert value(ctx, "kcp_shard_operator_api_writes_total", kind="Secret", verb="create") == len(
        issued
    )
    reads = [call for call in kube.calls if call[0] in ("get", "list", "dry-run")]
    assert total(ctx, "kcp_shard_operator_api_reads_total") == len(reads)
    assert value(ctx, "kcp_shard_operator_reconcile_passes_total", kind="Shard") == 2
    assert value(ctx, "kcp_shard_operator_reconcile_duration_seconds_count", kind="Shard") == 2


def test_events_are_counted_by_type_and_reason() -> None:
    kube = FakeKube(shard_object())
    effects = Effects()
    ctx = metered(kube, effects)
    settle(ctx, kube, "root")
    posted = [(event.type, event.reason) for _, event in effects.events]
    assert posted
    for type_, reason in set(posted):
        counted = value(ctx, "kcp_shard_operator_events_total", type=type_, reason=reason)
        assert counted == posted.count((type_, reason))


def test_a_steady_pass_counts_no_read_and_no_write() -> None:
    kube = FakeKube(shard_object())
    ctx = metered(kube)
    settle(ctx, kube, "root")
    before = [total(ctx, f"kcp_shard_operator_api_{what}_total") for what in ("writes", "reads")]
    run(ctx, "root")
    after = [total(ctx, f"kcp_shard_operator_api_{what}_total") for what in ("writes", "reads")]
    assert after == before
    assert value(ctx, "kcp_shard_operator_reconcile_passes_total", kind="Shard") == 3


def test_a_refused_write_is_counted_as_failed_and_the_pass_by_its_reason() -> None:
    kube = FakeKube(shard_object())
    kube.fail("apply", "Deployment", refused(), refused())
    ctx = metered(kube)
    run(ctx, "root")
    failed = value(
        ctx, "kcp_shard_operator_api_write_failures_total", kind="Deployment", verb="apply"
    )
    assert failed == 2
    assert value(
        ctx, "kcp_shard_operator_reconcile_errors_total", kind="Shard", reason="ApplyFailed"
    )


def test_an_invalid_spec_and_an_unreachable_api_count_as_errors_by_reason() -> None:
    kube = FakeKube(shard_object(version="not-a-version"), shard_object("other"))
    ctx = metered(kube)
    run(ctx, "root")
    assert value(
        ctx, "kcp_shard_operator_reconcile_errors_total", kind="Shard", reason="InvalidSpec"
    )
    kube.fail("create", "Secret", refused(503, "Service Unavailable"))
    run(ctx, "other")
    reasons = {
        sample.labels["reason"]
        for family in ctx.metrics.registry.collect()
        for sample in family.samples
        if sample.name == "kcp_shard_operator_reconcile_errors_total"
    }
    assert reasons == {"InvalidSpec", "IssueFailed"}


def test_a_finished_rollout_is_observed_once_by_role() -> None:
    kube = FakeKube(shard_object(), non_root_object())
    ctx = metered(kube)
    settle(ctx, kube, "root", "shard-1")
    run(ctx, "root", "shard-1")
    for role in ("root", "non-root"):
        count = value(ctx, "kcp_shard_operator_rollout_duration_seconds_count", role=role)
        assert count == 1, role


def test_a_rollout_is_measured_from_the_start_its_status_records() -> None:
    kube = FakeKube(shard_object())
    ctx = metered(kube)
    run(ctx, "root")
    ctx.epoch_clock = lambda: 10_000_000_000.0
    settle(ctx, kube, "root")
    started = timestamp(
        next(
            cond["lastTransitionTime"]
            for cond in kube.objects[("Shard", "ns", "root")]["status"]["conditions"]
            if cond["type"] == "Progressing"
        )
    )
    assert started is not None
    took = value(ctx, "kcp_shard_operator_rollout_duration_seconds_sum", role="root")
    assert took == 10_000_000_000.0 - started


def test_cleanups_are_counted_by_outcome() -> None:
    admin = secret("admin", kubeconfig="a3ViZWNvbmZpZw==")
    kube = FakeKube(rolled_out(shard_object()), non_root_object(**ADMIN), *SECRETS, admin)
    effects = Effects(outcome=Outcome(Result.SHARD_UNREACHABLE, "cannot reach the shard"))
    ctx = metered(kube, effects)
    settle(ctx, kube, "shard-1")
    assert value(
        ctx, "kcp_shard_operator_identity_cache_cleanups_total", outcome="ShardUnreachable"
    )
    assert value(ctx, "kcp_shard_operator_identity_cache_cleanups_total", outcome="Deleted") == 0


def test_a_scrape_shows_the_shards_by_phase_version_rollout_and_expiry() -> None:
    kube = FakeKube(shard_object(), non_root_object(), *SECRETS)
    ctx = metered(kube)
    settle(ctx, kube, "root")
    run(ctx, "shard-1")
    reads = total(ctx, "kcp_shard_operator_api_reads_total")
    text = generate_latest(ctx.metrics.registry).decode()
    assert total(ctx, "kcp_shard_operator_api_reads_total") == reads
    assert 'kcp_shard_operator_shards{phase="Ready"} 1.0' in text
    assert 'kcp_shard_operator_shards{phase="Progressing"} 1.0' in text
    assert 'kcp_shard_operator_shards_running_version{version="0.34.0"} 1.0' in text
    assert 'kcp_shard_operator_shards_running_version{version="unknown"} 1.0' in text
    assert "kcp_shard_operator_rollouts_in_progress 1.0" in text
    expiry = 'kcp_shard_operator_certificate_expiry_timestamp_seconds{namespace="ns",'
    assert f'{expiry}secret="root-kcp-serving",shard="root"}}' in text
    assert 'kcp_shard_operator_store_objects{kind="Shard"} 2.0' in text
    assert 'kcp_shard_operator_store_bytes{kind="Shard"}' in text


def test_census_counts_what_statuses_say() -> None:
    rolling = {
        "phase": "Progressing",
        "conditions": [
            {
                "type": "Progressing",
                "status": "True",
                "reason": "RollingOut",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "certificates": [{"secret": "a", "notAfter": "2027-01-01T00:00:00Z"}, {"secret": "b"}],
    }
    shards: list[JSON] = [
        {"metadata": {"name": "x", "namespace": "n"}, "status": rolling},
        {
            "metadata": {"name": "y", "namespace": "n"},
            "status": {"phase": "Ready", "version": "1.0.0"},
        },
        {"metadata": {"name": "z", "namespace": "n"}},
        {
            "metadata": {"name": "b", "namespace": "n"},
            "status": {
                "backup": {"lastSuccessTime": "2026-01-02T00:00:00Z"},
                "backups": [{"size": 2048}, {"size": 1024}],
            },
        },
    ]
    counted = census(iter(copy.deepcopy(shards)))
    assert counted.phases == {"Progressing": 1, "Ready": 1, "unknown": 2}
    assert counted.versions == {"1.0.0": 1, "unknown": 3}
    assert counted.backups == [Backups("n", "b", timestamp("2026-01-02T00:00:00Z"), 2048.0, 2)]
    assert counted.rolling_out == 1
    assert [(e.shard, e.secret) for e in counted.expiries] == [("x", "a")]
    assert counted.expiries[0].not_after == timestamp("2027-01-01T00:00:00Z")
    start = timestamp("2026-01-01T00:00:00Z")
    assert start is not None
    assert rollout_seconds(rolling, start + 42) == 42
    assert rollout_seconds({"phase": "Ready"}, start + 42) is None
    assert timestamp("yesterday") is None
    assert timestamp(None) is None


class CountingStore(Store):
    """A store that counts the listings of Shards it parses for a caller."""

    def __init__(self) -> None:
        super().__init__()
        self.parsed: list[str] = []

    def each(self, kind: str, namespace: str | None = None) -> Iterator[JSON]:
        self.parsed.append(kind)
        return super().each(kind, namespace)


def test_a_scrape_parses_the_shards_again_only_after_one_changed() -> None:
    store = CountingStore()
    shard: JSON = {"metadata": {"name": "a", "namespace": "n", "resourceVersion": "1"}}
    store.put("Shard", {**shard, "status": {"phase": "Progressing"}})
    registry = CollectorRegistry()
    registry.register(StoreCollector(store))
    first = generate_latest(registry).decode()
    assert generate_latest(registry).decode() == first
    assert store.parsed == ["Shard"]
    assert 'kcp_shard_operator_shards{phase="Progressing"} 1.0' in first
    changed = {**shard, "metadata": {**shard["metadata"], "resourceVersion": "2"}}
    store.put("Shard", {**changed, "status": {"phase": "Ready"}})
    assert 'kcp_shard_operator_shards{phase="Ready"} 1.0' in generate_latest(registry).decode()
    assert store.parsed == ["Shard", "Shard"]
