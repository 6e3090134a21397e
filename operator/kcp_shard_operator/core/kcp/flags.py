"""Finding, removing and renaming flags in a list of command-line arguments.

One rule, the one kcp's flag parser (pflag) applies, serves the renderer, the
shard-chart conversion and ``migrate-values``:

- ``--flag=VALUE`` is one item; ``_`` and ``-`` in the name are the same
  (``--root_shard_kubeconfig_file`` is ``--root-shard-kubeconfig-file``);
- a bare ``--flag`` takes the next item as its value, even one that starts
  with ``-``; a bare flag ending the list spans one item;
- items after ``--`` are arguments, not flags.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kcp_shard_operator.core.api.model import SpecError
from kcp_shard_operator.core.kcp.versions import FlagGate, normalize_flag

END_OF_FLAGS = "--"


@dataclass(frozen=True)
class FlagOccurrence:
    """Where a flag stands in an argument list: ``index`` and how many items it spans."""

    index: int
    length: int
    text: str
    value: str | None


def flag_name(arg: str | None) -> str | None:
    """The normalised name of a ``--flag`` or ``--flag=VALUE`` item, else None."""
    if arg is None or not arg.startswith("--") or arg == END_OF_FLAGS:
        return None
    return normalize_flag(arg.split("=", 1)[0])


def find_flag(args: Sequence[str | None], flag: str) -> list[FlagOccurrence]:
    """Occurrences of ``flag`` in ``args``; ``None`` stands for an item that is not a string."""
    wanted = normalize_flag(flag)
    found: list[FlagOccurrence] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == END_OF_FLAGS:
            break
        if arg is not None and flag_name(arg) == wanted:
            if "=" in arg:
                found.append(FlagOccurrence(i, 1, arg, arg.split("=", 1)[1]))
            else:
                value = args[i + 1] if i + 1 < len(args) else None
                length = 2 if value is not None else 1
                text = f"{arg} {value}" if value is not None else arg
                found.append(FlagOccurrence(i, length, text, value))
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


def renamed(arg: str, replacement: str) -> str:
    """``--old=VALUE`` -> ``--new=VALUE``; ``--old`` -> ``--new``."""
    _, sep, value = arg.partition("=")
    return replacement + sep + value


def retire(args: Sequence[str], gates: Iterable[FlagGate]) -> tuple[list[str], list[str]]:
    """``args`` with each gate's flag renamed (same-value replacement) or removed.

    Rows kcp still reads (``still_read``) are left alone.

    Returns the new list and one line per occurrence, e.g. ``--a=/x`` or
    ``--a=/x (renamed to --b)``.
    """
    out = list(args)
    notes: list[str] = []
    for gate in gates:
        if gate.still_read:
            continue
        found = find_flag(out, gate.flag)
        if gate.same_value and gate.replacement:
            for occ in found:
                out[occ.index] = renamed(out[occ.index], gate.replacement)
                notes.append(f"{occ.text} (renamed to {gate.replacement})")
        else:
            out, texts = without_flag(out, gate.flag)
            notes += texts
    return out, notes


def refuse_overrides(rendered: list[str], extra: list[str], spec_fields: Mapping[str, str]) -> None:
    """kcp would see both values of a flag given twice: name every such item of extraArgs,
    and the spec field to set instead where there is one.

    Names are compared as kcp's parser compares them (``_`` equals ``-``).
    """
    owned = {flag_name(arg) for arg in rendered}
    refused = []
    for index, arg in enumerate(extra):
        name = flag_name(arg)
        if name is None or name not in owned:
            continue
        where = spec_fields.get(name)
        advice = (
            f"the operator renders it from {where}; set it there instead"
            if where
            else "the operator sets this flag; remove it"
        )
        refused.append(f"[{index}] {name}: {advice}")
    if refused:
        raise SpecError("spec.extraArgs", "; ".join(refused))
