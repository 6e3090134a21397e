"""Finding and removing a flag in a list of command-line arguments."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FlagOccurrence:
    """Where a flag stands in an argument list: ``index`` and how many items it spans."""

    index: int
    length: int
    text: str


def find_flag(args: Sequence[str], flag: str) -> list[FlagOccurrence]:
    """Occurrences of ``flag`` as ``FLAG=VALUE`` or as the two items ``FLAG``, ``VALUE``.

    A bare ``FLAG`` at the end of the list, or followed by another flag, spans one item.
    """
    found: list[FlagOccurrence] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith(flag + "="):
            found.append(FlagOccurrence(i, 1, arg))
        elif arg == flag:
            has_value = i + 1 < len(args) and not args[i + 1].startswith("-")
            length = 2 if has_value else 1
            found.append(FlagOccurrence(i, length, " ".join(args[i : i + length])))
            i += length
            continue
        i += 1
    return found


def without_flag(args: Sequence[str], flag: str) -> tuple[list[str], list[str]]:
    """``args`` without ``flag`` (both forms), and the texts of what was removed."""
    found = find_flag(args, flag)
    drop = {i for occ in found for i in range(occ.index, occ.index + occ.length)}
    kept = [arg for i, arg in enumerate(args) if i not in drop]
    return kept, [occ.text for occ in found]
