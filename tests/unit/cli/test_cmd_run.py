from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from kcp_shard_operator.cli.main import main
from kcp_shard_operator.cli.run import CHATTY_LOGGERS, configure_logging


def test_peering_lifetime_below_ten_seconds_is_refused() -> None:
    with pytest.raises(SystemExit, match="--peering-lifetime must be at least 10 seconds"):
        main(["run", "--peering-lifetime", "5"])


@pytest.mark.parametrize("port", ["8080", "70000", "-1"])
def test_a_metrics_port_that_cannot_work_is_refused(port: str) -> None:
    with pytest.raises(SystemExit, match=f"--metrics-port {port} must be 0 \\(off\\)"):
        main(["run", "--metrics-port", port])


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The root logger's handlers and the levels configure_logging sets, put back after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    names = [*CHATTY_LOGGERS, "asyncio"]
    saved = {
        name: (logging.getLogger(name).level, logging.getLogger(name).propagate) for name in names
    }
    yield
    root.handlers[:], root.level = handlers, level
    for name, (old_level, propagate) in saved.items():
        logging.getLogger(name).setLevel(old_level)
        logging.getLogger(name).propagate = propagate


@pytest.mark.usefixtures("restored_logging")
@pytest.mark.parametrize("level", ["info", "warning", "debug"])
def test_request_and_probe_lines_are_logged_at_debug_only(level: str) -> None:
    configure_logging(level, "text")
    debug = level == "debug"
    request_line = logging.getLogger("urllib3.connectionpool").isEnabledFor(logging.DEBUG)
    access_line = logging.getLogger("aiohttp.access").isEnabledFor(logging.INFO)
    assert (request_line, access_line) == (debug, debug)
    assert logging.getLogger("urllib3").isEnabledFor(logging.WARNING)


def test_a_kcp_checks_setting_that_is_not_a_boolean_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KCP_SHARD_KCP_CHECKS", "sometimes")
    with pytest.raises(SystemExit, match=r"KCP_SHARD_KCP_CHECKS='sometimes' is not a boolean"):
        main(["run"])
