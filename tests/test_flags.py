from __future__ import annotations

import pytest

from kcp_shard_operator.flags import without_flag

FLAG = "--root-shard-kubeconfig-file"


@pytest.mark.parametrize(
    ("args", "kept", "dropped"),
    [
        ([], [], []),
        (["--v=2"], ["--v=2"], []),
        ([f"{FLAG}=/a", "--v=2"], ["--v=2"], [f"{FLAG}=/a"]),
        (["--v=2", FLAG, "/a"], ["--v=2"], [f"{FLAG} /a"]),
        ([FLAG, "/a", "--x", FLAG + "=/b"], ["--x"], [f"{FLAG} /a", f"{FLAG}=/b"]),
        ([FLAG], [], [FLAG]),
        ([FLAG, "--v=2"], ["--v=2"], [FLAG]),
        ([FLAG + "-other=1"], [FLAG + "-other=1"], []),
        (["--other", FLAG], ["--other"], [FLAG]),
    ],
)
def test_without_flag(args: list[str], kept: list[str], dropped: list[str]) -> None:
    assert without_flag(args, FLAG) == (kept, dropped)
