"""Whether kopf's peering has paused this replica, for what the operator runs beside kopf's
watches (the periodic pass, :mod:`periodic`).

kopf keeps its pause to itself (no handler is told), but its peering logs each turn of a
pause: ``Pausing operations in favour of ...`` (a live replica of higher priority) or
``Pausing all operators, including self`` (one of the same priority), and ``Resuming
operations after the pause`` when it ends. Each line comes once per turn of one peering's
pause (one peering object per namespace served, or one for the cluster), so the replica is
paused while more of them paused than resumed. ``tests/unit/controller/test_peering.py`` runs
kopf's own peering to hold this to the kopf in use.
"""

from __future__ import annotations

import logging
import threading

PEERING_LOGGER = "kopf._core.engines.peering"
PAUSING = ("Pausing operations", "Pausing all operators")
RESUMING = "Resuming operations"


class Pause(logging.Handler):
    """Follows kopf's peering log: paused while a peering's pause has not ended."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self._turns = 0
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        with self._guard:
            if message.startswith(PAUSING):
                self._turns += 1
            elif message.startswith(RESUMING):
                self._turns = max(0, self._turns - 1)

    def paused(self) -> bool:
        with self._guard:
            return self._turns > 0


def follow(pause: Pause) -> None:
    """Have ``pause`` read kopf's peering log; its turns are logged at info (so they show at
    any log level: a pause is worth a line)."""
    logger = logging.getLogger(PEERING_LOGGER)
    if pause not in logger.handlers:
        logger.addHandler(pause)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)


def unfollow(pause: Pause) -> None:
    logging.getLogger(PEERING_LOGGER).removeHandler(pause)
