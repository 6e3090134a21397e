from __future__ import annotations

import ctypes.util

from kcp_shard_operator.cli.arenas import bound_malloc_arenas


def test_the_arenas_are_bounded_on_glibc() -> None:
    assert ctypes.util.find_library("c") is not None
    assert bound_malloc_arenas({}) is True


def test_a_users_malloc_arena_max_is_left_as_it_is() -> None:
    assert bound_malloc_arenas({"MALLOC_ARENA_MAX": "8"}) is False
