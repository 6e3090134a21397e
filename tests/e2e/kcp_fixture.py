"""Session fixtures for a real sharded kcp (see :mod:`tests.e2e.kcp`).

Use them from a test module with ``pytest_plugins = ("tests.e2e.kcp_fixture",)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.tools import log

from .capture import uncaptured
from .kcp import ShardedKcp, kcp_binaries, start_sharded_kcp


@pytest.fixture(scope="session")
def sharded_kcp(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[ShardedKcp]:
    """A running root shard and shard-1 (old kcp), stopped at the end of the session."""
    with uncaptured(pytestconfig):
        binary, _ = kcp_binaries()
        kcp = start_sharded_kcp(tmp_path_factory.mktemp("kcp"), binary)
    try:
        yield kcp
    finally:
        with uncaptured(pytestconfig):
            kcp.stop()
            log("sharded kcp stopped")


@pytest.fixture(scope="session")
def standin_binary() -> Path:
    """kcp built without the identitycache controller: a shard past the deprecating release."""
    return kcp_binaries()[1]
