from __future__ import annotations

import pytest

from kcp_shard_operator.cli.main import main


def test_peering_lifetime_below_ten_seconds_is_refused() -> None:
    with pytest.raises(SystemExit, match="--peering-lifetime must be at least 10 seconds"):
        main(["run", "--peering-lifetime", "5"])
