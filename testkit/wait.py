"""Polling until something holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from .kube import KubectlError

T = TypeVar("T")


class WaitTimeoutError(AssertionError):
    """``wait_for`` ran out of time."""


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.5,
) -> T:
    """Poll ``predicate`` until it returns a truthy value and return that value.

    A KubectlError raised by the predicate counts as "not yet". On timeout, raise WaitTimeoutError
    naming ``what`` with the last result and the last kubectl error.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    last_error: KubectlError | None = None
    while True:
        try:
            last = predicate()
            last_error = None
        except KubectlError as err:
            last_error = err
        if last:
            return last
        if time.monotonic() >= deadline:
            detail = f"last error: {last_error}" if last_error else f"last result: {last!r}"
            raise WaitTimeoutError(f"timed out after {timeout:g}s waiting for {what}; {detail}")
        time.sleep(interval)
