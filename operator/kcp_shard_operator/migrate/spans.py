"""Span safety: where the parsed nodes are written in the original text, and editing it there.

Line arithmetic that matches the YAML reader's, where each list item and alias
use is written, the check that the parser's offsets point at the text each scalar
was read from, and applying edits that copy every byte outside their spans.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from ruamel.yaml import YAML
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.nodes import Node, ScalarNode, SequenceNode

from kcp_shard_operator.migrate.nodes import content_end, subtree

LINE_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")
BREAK_CHARS = "\r\n\x85\u2028\u2029"
_PROPERTIES = re.compile(r"^(?:[&!]\S*\s*)+")
"""Anchors and tags in front of a node's content."""


class RefuseError(Exception):
    """The file has a layout this tool will not edit."""


class Source:
    """The original text with line arithmetic that matches the YAML reader's."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.line_starts = [0] + [m.end() for m in LINE_BREAK.finditer(text)]

    def line_no(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)

    def line_start(self, offset: int) -> int:
        return self.line_starts[self.line_no(offset) - 1]

    def next_line_start(self, offset: int) -> int:
        """Offset just after the line break ending the line that holds ``offset``."""
        n = self.line_no(offset)
        return self.line_starts[n] if n < len(self.line_starts) else len(self.text)

    def line_content_end(self, offset: int) -> int:
        end = self.next_line_start(offset)
        while end > offset and self.text[end - 1] in BREAK_CHARS:
            end -= 1
        return end

    def previous_line_start(self, line_start: int) -> int | None:
        n = self.line_no(line_start)
        return self.line_starts[n - 2] if n >= 2 else None


@dataclass(frozen=True)
class Edit:
    start: int
    end: int
    insert: str = ""


def apply_edits(text: str, edits: list[Edit]) -> str:
    """Apply deletions/insertions; overlapping deletions are merged."""
    ordered = sorted(edits, key=lambda e: (e.start, e.end))
    merged: list[Edit] = []
    for edit in ordered:
        if merged and edit.start < merged[-1].end and not edit.insert and not merged[-1].insert:
            last = merged.pop()
            merged.append(Edit(last.start, max(last.end, edit.end)))
        elif merged and edit.start < merged[-1].end:
            raise RefuseError("overlapping edits")
        else:
            merged.append(edit)
    out: list[str] = []
    pos = 0
    for edit in merged:
        out.append(text[pos : edit.start])
        out.append(edit.insert)
        pos = edit.end
    out.append(text[pos:])
    return "".join(out)


def alias_uses(text: str) -> list[tuple[int, int, str]]:
    """Start, end and anchor of every alias use (``*name``), in text order."""
    if "*" not in text:
        return []
    return [
        (event.start_mark.index, event.end_mark.index, event.anchor)
        for event in YAML(typ="safe", pure=True).parse(text)
        if isinstance(event, AliasEvent)
    ]


def item_spans(
    src: Source, aliases: list[tuple[int, int, str]], seq: SequenceNode
) -> list[tuple[int, int, bool]]:
    """Where each item of ``seq`` is written, and whether it is an alias use (``*name``).

    An alias use shares its node with the anchored one, whose marks point at the
    anchor; its own text is the next alias in the text after the previous item.
    """
    spans: list[tuple[int, int, bool]] = []
    pos = seq.start_mark.index
    for item in seq.value:
        start = item.start_mark.index
        if start >= pos:
            end = content_end(item)
            spans.append((start, end, False))
        else:
            start, end = next(
                ((a, b) for a, b, _ in aliases if a >= pos),
                (start, start),
            )
            if start == end:
                raise RefuseError(f"line {src.line_no(pos)}: cannot find where an alias is written")
            spans.append((start, end, True))
        pos = max(pos, end)
    return spans


def check_positions(text: str, docs: list[Node]) -> None:
    """The parser's offsets must point at the text each scalar was read from.

    This is the edit-by-offset counterpart of "the library reproduces the file":
    every plain one-line scalar must read exactly its value at its offsets, and
    every quoted or block scalar must start (and a quoted one end) with its
    indicator. Anything else means the offsets cannot be trusted for editing.
    """
    for root in docs:
        for node in subtree(root):
            if not isinstance(node, ScalarNode):
                continue
            start, end = node.start_mark.index, node.end_mark.index
            raw = _PROPERTIES.sub("", text[start:end])
            style = node.style
            if style is None:
                good = raw == node.value or LINE_BREAK.search(raw) is not None
            elif style in "'\"":
                good = len(raw) >= 2 and raw[0] == raw[-1] == style
            else:
                good = raw[:1] == style
            if not good:
                raise RefuseError(
                    f"line {Source(text).line_no(start)}: the YAML parser places "
                    f"{node.value!r} at {raw!r}; its offsets cannot be trusted for this file"
                )
