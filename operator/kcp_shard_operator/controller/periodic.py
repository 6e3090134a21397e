"""The periodic pass: every period each object the operator owns gets a pass, whatever happened.

One thread for the whole operator rather than a kopf timer per object. A kopf timer puts kopf's
finalizer on its object (one more write per object, and an object no running operator can
let go of keeps its namespace terminating), and costs an asyncio task and kopf's timer state
per object. The thread is started from a kopf handler, so that the passes it requests post
their Events through kopf; it waits while kopf's peering pauses this replica (its watches are
stopped and the store goes stale: another replica works) and ends with the operator.

A period's passes are requested one after another, spread over the period, so that a spec
change waits behind few of them.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable

LOGGER = logging.getLogger(__name__)

Work = Callable[[], None]


class Periodic:
    """Runs the work ``due`` returns, once per ``interval`` seconds, spread over it; none
    while ``paused``."""

    def __init__(
        self, interval: float, due: Callable[[], list[Work]], paused: Callable[[], bool]
    ) -> None:
        self.interval = interval
        self._due = due
        self._paused = paused
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    def start(self) -> None:
        """Start the loop in a thread that carries the caller's context (kopf's Event
        poster); later calls do nothing. The first period begins at once."""
        with self._guard:
            if self._thread is not None or self._stopping.is_set():
                return
            context = contextvars.copy_context()
            self._thread = threading.Thread(
                target=context.run, args=(self._loop,), name="periodic", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Request no more work (the work running ends on its own)."""
        self._stopping.set()

    def running(self) -> bool:
        """Whether the loop has started and not been stopped."""
        return self._thread is not None and not self._stopping.is_set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            work = [] if self._paused() else self._due()
            if not work:
                self._stopping.wait(self.interval)
                continue
            gap = self.interval / len(work)
            for item in work:
                if self._stopping.wait(gap):
                    return
                if self._paused():
                    break
                try:
                    item()
                except Exception:
                    LOGGER.exception("periodic work failed")


def idle() -> Periodic:
    """A loop that never starts (where no operator runs: the unit tests' passes)."""
    periodic = Periodic(0.0, list, lambda: True)
    periodic.stop()
    return periodic
