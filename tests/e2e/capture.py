"""Progress lines of long fixture steps on the terminal while pytest captures output."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def uncaptured(config: pytest.Config) -> Iterator[None]:
    """Let long setup and teardown steps print progress while pytest captures output."""
    with config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        yield
