"""The periodic pass: one loop for the operator requests a pass over each object once per
period, spread over it, none while kopf's peering pauses the replica, none once stopped; the
objects it covers; kopf's finalizer only where a deletion handler needs it."""

from __future__ import annotations

import contextvars
import itertools
import threading
import time
from types import SimpleNamespace

import kopf

from kcp_shard_operator.controller.handlers import (
    FINALIZER,
    configure,
    due,
    register,
    stop,
)
from kcp_shard_operator.controller.periodic import Periodic
from testkit.wait import wait_for
from tests.conftest import NO_PKI, shard_object
from tests.fake_kube import FakeKube, context
from tests.watch import Watches, finalized

WAIT = 10.0
CARRIED: contextvars.ContextVar[str] = contextvars.ContextVar("carried")


def test_each_period_runs_its_work_once_spread_over_the_period() -> None:
    interval = 0.4
    runs: list[tuple[str, float]] = []
    work = [lambda name=name: runs.append((name, time.monotonic())) for name in "abcd"]
    periodic = Periodic(interval, lambda: list(work), lambda: False)
    started = time.monotonic()
    periodic.start()
    try:
        wait_for(lambda: len(runs) >= 8, WAIT, "two periods", interval=0.01)
    finally:
        periodic.stop()
    assert [name for name, _ in runs[:8]] == list("abcdabcd")
    gap = interval / len(work)
    times = [started] + [at for _, at in runs[:8]]
    assert all(later - earlier >= gap * 0.9 for earlier, later in itertools.pairwise(times))


def test_no_work_runs_while_paused_and_it_resumes_after() -> None:
    paused = threading.Event()
    paused.set()
    asked = threading.Semaphore(0)
    runs: list[str] = []

    def is_paused() -> bool:
        asked.release()
        return paused.is_set()

    periodic = Periodic(0.05, lambda: [lambda: runs.append("ran")], is_paused)
    periodic.start()
    try:
        for _ in range(3):
            assert asked.acquire(timeout=WAIT), "the loop asks whether it is paused"
        assert runs == []
        paused.clear()
        wait_for(lambda: runs, WAIT, "a run once resumed", interval=0.01)
    finally:
        periodic.stop()


def test_a_stopped_loop_runs_no_more_work_and_its_thread_ends() -> None:
    runs: list[str] = []
    periodic = Periodic(0.02, lambda: [lambda: runs.append("ran")], lambda: False)
    periodic.start()
    wait_for(lambda: runs, WAIT, "a first run", interval=0.01)
    periodic.stop()
    wait_for(
        lambda: not any(t.name == "periodic" and t.is_alive() for t in threading.enumerate()),
        WAIT,
        "the loop's thread to end",
        interval=0.01,
    )
    ran = len(runs)
    periodic.start()
    assert not any(t.name == "periodic" for t in threading.enumerate())
    assert len(runs) == ran


def test_the_work_runs_in_the_context_of_the_thread_that_started_the_loop() -> None:
    """kopf's Event poster is found through context variables of its handlers' threads."""
    seen: list[str] = []
    periodic = Periodic(0.02, lambda: [lambda: seen.append(CARRIED.get("none"))], lambda: False)

    def start() -> None:
        CARRIED.set("kopf's")
        periodic.start()

    starter = threading.Thread(target=start)
    starter.start()
    starter.join(WAIT)
    try:
        wait_for(lambda: seen, WAIT, "a run", interval=0.01)
    finally:
        periodic.stop()
    assert seen[0] == "kopf's"


def test_a_failing_work_item_does_not_stop_the_period() -> None:
    runs: list[str] = []

    def fail() -> None:
        raise RuntimeError("boom")

    periodic = Periodic(0.05, lambda: [fail, lambda: runs.append("after")], lambda: False)
    periodic.start()
    try:
        wait_for(lambda: runs, WAIT, "the item after the failing one", interval=0.01)
    finally:
        periodic.stop()


def kubeconfig(name: str) -> dict[str, object]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "Kubeconfig",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {},
    }


def test_a_period_covers_the_shards_and_finalized_objects_of_kinds_with_deletion_handlers() -> None:
    kube = FakeKube(
        shard_object(**NO_PKI),
        shard_object("shard-1", **NO_PKI),
        finalized(kubeconfig("alice")),
        kubeconfig("bob"),
    )
    ctx = context(kube)
    work = due(ctx, kopf.OperatorSettings())
    passes = [(item.args[1], item.args[2], item.func.__name__) for item in work[1:]]  # type: ignore[attr-defined]
    assert passes == [
        ("ns", "root", "reconcile"),
        ("ns", "shard-1", "reconcile"),
        ("ns", "alice", "reconcile_kubeconfig"),
    ], "bob waits for kopf's finalizer"
    assert work[0].func.__name__ == "resync"  # type: ignore[attr-defined]
    for item in work:
        item()
    assert ("Deployment", "ns", "root-kcp") in kube.objects, "the periodic pass made the children"


def test_kopf_puts_its_finalizer_only_on_kinds_with_a_deletion_handler() -> None:
    registry = kopf.OperatorRegistry()
    register(registry)
    assert FINALIZER
    assert not registry._spawning.get_all_handlers(), "no kopf timer or daemon"
    finalized_plurals = {
        handler.selector.any_name
        for handler in registry._changing.get_all_handlers()
        if handler.requires_finalizer and handler.selector is not None
    }
    assert finalized_plurals == {"kubeconfigs", "virtualworkspaceservers"}


def test_the_operator_starts_the_loop_with_its_first_event_and_stops_it_with_kopf() -> None:
    kube = FakeKube(shard_object(**NO_PKI))
    ctx = context(kube)
    memo = SimpleNamespace(context=ctx)
    configure(settings=kopf.OperatorSettings(), memo=memo)
    try:
        assert not ctx.periodic.running()
        Watches(ctx, kube).listing()
        assert ctx.periodic.running()
    finally:
        stop(memo=memo)
    assert not ctx.periodic.running()
