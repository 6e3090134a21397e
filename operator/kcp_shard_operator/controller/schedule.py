"""Work requested per key, coalesced: one run at a time per key, and the requests that come
while it runs fold into one more run after it.

A burst of watch events for one object thus runs at most one more pass; the passes over
different objects run side by side on a few threads. A :class:`Runner` built without an
executor runs the work in the requesting thread (the unit tests' passes end before the call
returns).
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass

LOGGER = logging.getLogger(__name__)

Work = Callable[[], None]


@dataclass
class _Pending:
    """A key's work to run next (None: none), and the thread running the key's work (None:
    it waits for one)."""

    work: Work | None
    thread: int | None = None


class Runner:
    """Runs work per key on ``executor`` (None: in the requesting thread), coalesced."""

    def __init__(self, name: str, executor: Executor | None = None) -> None:
        self.name = name
        self._executor = executor
        self._running: dict[Hashable, _Pending] = {}
        self._guard = threading.Lock()

    def request(self, key: Hashable, work: Work, *, again: bool = True) -> bool:
        """Run ``work`` for ``key``. While work for ``key`` waits to start, ``work`` replaces
        it; while it runs, ``work`` runs once after it (the last requested), or nothing when
        ``again`` is false or when the request comes from the running work's own thread
        (which goes on to see what it changed). Returns whether ``work`` was taken."""
        with self._guard:
            pending = self._running.get(key)
            if pending is not None:
                if pending.thread == threading.get_ident():
                    return True
                if again:
                    pending.work = work
                return again
            self._running[key] = _Pending(work)
        # kopf's context (its Event poster, its settings) goes with the work to the thread.
        context = contextvars.copy_context()
        if self._executor is None:
            context.run(self._drive, key)
        else:
            self._executor.submit(context.run, self._drive, key)
        return True

    def running(self, key: Hashable) -> bool:
        """Whether work for ``key`` runs or waits to run."""
        with self._guard:
            return key in self._running

    def idle(self) -> bool:
        """Whether no work runs or waits."""
        with self._guard:
            return not self._running

    def _drive(self, key: Hashable) -> None:
        with self._guard:
            pending = self._running[key]
            pending.thread = threading.get_ident()
            work, pending.work = pending.work, None
        while work is not None:
            try:
                work()
            except Exception:
                LOGGER.exception("%s for %s failed", self.name, key)
            with self._guard:
                work, pending.work = pending.work, None
                if work is None:
                    del self._running[key]

    def shutdown(self) -> None:
        """Run no more work: what waits is dropped, what runs ends on its own."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


def pool(name: str, workers: int) -> Runner:
    """A Runner over ``workers`` threads named after ``name``."""
    return Runner(name, ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name))
