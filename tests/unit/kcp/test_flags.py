from __future__ import annotations

import pytest

from kcp_shard_operator.core.kcp.flags import find_flag, retire, without_flag
from kcp_shard_operator.core.kcp.versions import gate_for

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
        # kcp's parser takes the next item as the value, even one starting with '-'
        ([FLAG, "--v=2"], [], [f"{FLAG} --v=2"]),
        ([FLAG, "-", "--v=2"], ["--v=2"], [f"{FLAG} -"]),
        ([FLAG + "-other=1"], [FLAG + "-other=1"], []),
        (["--other", FLAG], ["--other"], [FLAG]),
        # '_' and '-' are the same word separator
        (["--root_shard_kubeconfig_file=/a"], [], ["--root_shard_kubeconfig_file=/a"]),
        (["--root_shard-kubeconfig_file", "/a"], [], ["--root_shard-kubeconfig_file /a"]),
        # after '--' come arguments, not flags
        (["--", f"{FLAG}=/a"], ["--", f"{FLAG}=/a"], []),
    ],
)
def test_without_flag(args: list[str], kept: list[str], dropped: list[str]) -> None:
    assert without_flag(args, FLAG) == (kept, dropped)


def test_items_that_are_not_strings_are_never_values() -> None:
    found = find_flag([FLAG, None, "x"], FLAG)
    assert [(o.index, o.length, o.value) for o in found] == [(0, 1, None)]


@pytest.mark.parametrize(
    ("args", "want", "notes"),
    [
        (
            ["--cache-server-kubeconfig-file=/c", "--v=1"],
            ["--cache-kubeconfig=/c", "--v=1"],
            ["--cache-server-kubeconfig-file=/c (renamed to --cache-kubeconfig)"],
        ),
        (
            ["--cache_server_kubeconfig_file", "/c"],
            ["--cache-kubeconfig", "/c"],
            ["--cache_server_kubeconfig_file /c (renamed to --cache-kubeconfig)"],
        ),
        (["--external-hostname=h:1", "--v=1"], ["--v=1"], ["--external-hostname=h:1"]),
    ],
)
def test_retire_renames_or_removes(args: list[str], want: list[str], notes: list[str]) -> None:
    gates = [gate_for("--cache-server-kubeconfig-file"), gate_for("--external-hostname")]
    assert retire(args, gates) == (want, notes)


def test_retire_leaves_flags_kcp_still_reads() -> None:
    args = ["--root-kubeconfig=/r"]
    assert retire(args, [gate_for("--root-kubeconfig")]) == (args, [])
