"""The operator as a local process: it becomes live against the cluster and stops cleanly."""

from __future__ import annotations

import pytest

from testkit.operator_process import OperatorProcess
from testkit.process import http_ok

pytestmark = pytest.mark.e2e


def test_operator_process_is_live_and_stops_on_sigterm(operator_process: OperatorProcess) -> None:
    assert http_ok(operator_process.healthz)
    assert operator_process.stop() == 0, operator_process.log_tail()
    assert not http_ok(operator_process.healthz)
    assert operator_process.log_path.read_text().strip(), "operator wrote no log"
