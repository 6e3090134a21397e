"""Work per key, coalesced: a burst of requests while one runs brings one more run; different
keys run side by side; a failing run is logged and frees its key."""

from __future__ import annotations

import logging
import threading

import pytest

from kcp_shard_operator.controller.schedule import Runner, pool
from testkit.wait import wait_for

WAIT = 10.0


def test_a_burst_of_requests_while_one_runs_brings_exactly_one_more_run() -> None:
    started, release = threading.Event(), threading.Event()
    runs: list[int] = []

    def work(burst: int) -> None:
        runs.append(burst)
        started.set()
        assert release.wait(WAIT)

    runner = pool("test", 2)
    runner.request("shard", lambda: work(0))
    assert started.wait(WAIT)
    for burst in range(1, 21):
        runner.request("shard", lambda burst=burst: work(burst))  # type: ignore[misc]
    release.set()
    wait_idle(runner)
    assert runs == [0, 20], "the first, then once more with the last request"


def test_different_keys_run_side_by_side() -> None:
    both = threading.Barrier(2, timeout=WAIT)
    runner = pool("test", 2)
    done: list[str] = []

    def work(key: str) -> None:
        both.wait()
        done.append(key)

    for key in ("a", "b"):
        runner.request(key, lambda key=key: work(key))  # type: ignore[misc]
    wait_idle(runner)
    assert sorted(done) == ["a", "b"]


def test_without_an_executor_the_work_ends_before_the_request_returns() -> None:
    runner = Runner("inline")
    runs: list[str] = []

    def work() -> None:
        runs.append("run")
        # A request from the running work's own thread: the work goes on to see the change.
        assert runner.request("k", work)

    runner.request("k", work)
    assert runs == ["run"]
    assert runner.idle()


def test_a_request_that_does_not_queue_again_is_dropped_while_one_runs() -> None:
    started, release = threading.Event(), threading.Event()
    runs: list[str] = []

    def work() -> None:
        runs.append("probe")
        started.set()
        assert release.wait(WAIT)

    runner = pool("test", 1)
    assert runner.request("probe", work, again=False)
    assert started.wait(WAIT)
    assert runner.running("probe")
    assert not runner.request("probe", work, again=False)
    release.set()
    wait_idle(runner)
    assert runs == ["probe"]


def test_a_failing_run_is_logged_and_frees_its_key(caplog: pytest.LogCaptureFixture) -> None:
    runner = Runner("inline")

    def broken() -> None:
        raise RuntimeError("bug")

    with caplog.at_level(logging.ERROR):
        runner.request("k", broken)
    assert "inline for k failed" in caplog.text
    assert runner.idle()


def wait_idle(runner: Runner) -> None:
    wait_for(runner.idle, WAIT, "the runner to be idle", interval=0.01)
