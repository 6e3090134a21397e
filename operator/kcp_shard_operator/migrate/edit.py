"""The span-edit engine: planned removals and renames -> edits of the original text.

A removed block entry takes its whole lines and the comment lines directly above
it at its indentation, a flow entry its separator; a block list left empty is
written ``[]``. What cannot be removed by deleting such spans is refused.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kcp_shard_operator.migrate.nodes import content_end, subtree
from kcp_shard_operator.migrate.spans import (
    BREAK_CHARS,
    LINE_BREAK,
    Edit,
    RefuseError,
    Source,
    item_spans,
)


@dataclass
class Plan:
    """What to remove, collected while walking the documents."""

    seq_removals: dict[int, tuple[SequenceNode, set[int]]] = field(default_factory=dict)
    pair_removals: dict[int, tuple[MappingNode, set[int]]] = field(default_factory=dict)
    skipped: set[tuple[int, int]] = field(default_factory=set)
    """Removed entries as (id of the list or mapping, index)."""
    removed_nodes: set[int] = field(default_factory=set)
    """Nodes removed where they are written (not through an alias)."""
    renames: dict[int, tuple[ScalarNode, str, str]] = field(default_factory=dict)
    """Scalars whose flag name is rewritten: node, old name as written, new name."""

    def remove_items(self, seq: SequenceNode, indices: set[int], aliased: set[int]) -> None:
        """Remove items of ``seq``; those at ``aliased`` are alias uses, not the nodes."""
        entry = self.seq_removals.setdefault(id(seq), (seq, set()))
        entry[1].update(indices)
        self.skipped.update((id(seq), i) for i in indices)
        self.removed_nodes.update(id(seq.value[i]) for i in indices - aliased)

    def remove_pair(self, mapping: MappingNode, index: int) -> None:
        entry = self.pair_removals.setdefault(id(mapping), (mapping, set()))
        entry[1].add(index)
        self.skipped.add((id(mapping), index))
        self.removed_nodes.add(id(mapping.value[index][0]))


def plan_edits(
    plan: Plan,
    src: Source,
    aliases: list[tuple[int, int, str]],
    key_of: dict[int, Node],
    ends: list[int],
) -> list[Edit]:
    """The edits that carry out ``plan`` on ``src``.

    ``aliases`` are the alias uses in the text, ``key_of`` maps a value's id to its
    key, ``ends`` are the end offsets of every scalar and flow collection.
    """
    return _Editor(plan, src, aliases, key_of, sorted(ends)).edits()


class _Editor:
    def __init__(
        self,
        plan: Plan,
        src: Source,
        aliases: list[tuple[int, int, str]],
        key_of: dict[int, Node],
        ends: list[int],
    ) -> None:
        self.plan = plan
        self.src = src
        self.aliases = aliases
        self.key_of = key_of
        self.ends = ends

    def floor(self, offset: int) -> int:
        """End of the last node that ends at or before ``offset`` (0 if none)."""
        i = bisect.bisect_right(self.ends, offset)
        return self.ends[i - 1] if i else 0

    def comments_above(self, line_start: int, column: int) -> int:
        """Start of the comment lines directly above ``line_start`` at ``column``."""
        text = self.src.text
        start = line_start
        while True:
            prev = self.src.previous_line_start(start)
            if prev is None or prev < self.floor(start):
                return start
            line = text[prev:start]
            stripped = line.lstrip(" \t")
            if not stripped.startswith("#") or len(line) - len(stripped) != column:
                return start
            start = prev

    def whole_lines(self, first: int, last_end: int) -> tuple[int, int] | None:
        """Span of full lines from ``first`` to after ``last_end``'s line, with comments above.

        None when something other than blanks and a comment shares those lines.
        """
        text = self.src.text
        line_start = self.src.line_start(first)
        if text[line_start:first].strip(" \t"):
            return None
        if last_end > 0 and text[last_end - 1] in BREAK_CHARS:
            end = last_end
        else:
            rest = text[last_end : self.src.line_content_end(last_end)].strip(" \t")
            if rest and not rest.startswith("#"):
                return None
            end = self.src.next_line_start(last_end)
        return self.comments_above(line_start, first - line_start), end

    def block_item_span(self, start: int, end: int) -> tuple[int, int]:
        text = self.src.text
        j = start - 1
        while j >= 0 and text[j] in " \t" + BREAK_CHARS:
            j -= 1
        if j < 0 or text[j] != "-":
            raise RefuseError(f"line {self.src.line_no(start)}: cannot find the list item's '-'")
        span = self.whole_lines(j, end)
        if span is None:
            raise RefuseError(
                f"line {self.src.line_no(j)}: the list item shares a line with other content "
                "(or ends in an alias)"
            )
        return span

    def seq_edits(self, seq: SequenceNode, indices: set[int]) -> list[Edit]:
        entries = [(start, end) for start, end, _ in item_spans(self.src, self.aliases, seq)]
        if seq.flow_style:
            return self.flow_edits(seq, entries, indices)
        edits = [Edit(*self.block_item_span(*entries[i])) for i in sorted(indices)]
        if len(indices) == len(seq.value):
            edits.append(Edit(*self.empty_marker(seq, "[]")))
        return edits

    def empty_marker(self, node: Node, marker: str) -> tuple[int, int, str]:
        """Where to write ``[]``/``{}`` for a block collection that lost all its entries."""
        key = self.key_of.get(id(node))
        if key is None:
            raise RefuseError(
                f"line {self.src.line_no(node.start_mark.index)}: would leave an empty list "
                "that is not the value of a key"
            )
        return self.after_key(key, marker)

    def after_key(self, key: Node, marker: str) -> tuple[int, int, str]:
        text = self.src.text
        i = key.end_mark.index
        while i < len(text) and text[i] in " \t":
            i += 1
        if i >= len(text) or text[i] != ":":
            raise RefuseError(f"line {self.src.line_no(i)}: cannot find the ':' after the key")
        i += 1
        pos = i
        while True:
            j = pos
            while j < len(text) and text[j] in " \t":
                j += 1
            if j < len(text) and text[j] in "&!":
                while j < len(text) and text[j] not in " \t" + BREAK_CHARS:
                    j += 1
                pos = j
                continue
            return pos, pos, " " + marker

    def flow_edits(
        self, node: Node, entries: list[tuple[int, int]], indices: set[int]
    ) -> list[Edit]:
        text = self.src.text
        close = node.end_mark.index - 1
        if text[close] not in "]}":
            raise RefuseError(
                f"line {self.src.line_no(close)}: the flow collection does not end where parsed"
            )
        runs: list[list[int]] = []
        for i in sorted(indices):
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
        edits: list[Edit] = []
        for run in runs:
            first, last = run[0], run[-1]
            start, end = entries[first][0], entries[last][1]
            after = end
            while after < len(text) and text[after] in " \t":
                after += 1
            if after < len(text) and text[after] == ",":
                after += 1
            lines = self.whole_lines(start, after)
            if lines is not None:
                edits.append(Edit(*lines))
            elif last + 1 < len(entries):
                nxt = entries[last + 1][0]
                if first == 0 or LINE_BREAK.search(text, end, nxt) is None:
                    edits.append(Edit(start, nxt))
                else:
                    ws = start
                    while text[ws - 1] in " \t":
                        ws -= 1
                    edits.append(Edit(ws, after))
            elif first > 0:
                prev = entries[first - 1][1]
                if LINE_BREAK.search(text, prev, start) is None:
                    edits.append(Edit(prev, end))
                else:
                    edits.append(Edit(start, end))
            else:
                edits.append(Edit(start, close))
        return edits

    def pair_edits(self, mapping: MappingNode, indices: set[int]) -> list[Edit]:
        if len(indices) == len(mapping.value):
            raise RefuseError(
                f"line {self.src.line_no(mapping.start_mark.index)}: would leave an empty mapping"
            )
        if mapping.flow_style:
            entries = [(k.start_mark.index, content_end(v)) for k, v in mapping.value]
            return self.flow_edits(mapping, entries, indices)
        edits = []
        text = self.src.text
        for i in sorted(indices):
            key, value = mapping.value[i]
            start = key.start_mark.index
            span = self.whole_lines(start, content_end(value))
            if span is not None:
                edits.append(Edit(*span))
            elif i + 1 < len(mapping.value) and i + 1 not in indices:
                next_key = mapping.value[i + 1][0]
                between = text[start : next_key.start_mark.index]
                if "#" in between:
                    raise RefuseError(
                        f"line {self.src.line_no(start)}: comments between keys on a list item line"
                    )
                edits.append(Edit(start, next_key.start_mark.index))
            else:
                raise RefuseError(
                    f"line {self.src.line_no(start)}: the key shares its line with other content"
                )
        return edits

    def rename_edit(self, node: ScalarNode, written: str, replacement: str) -> Edit:
        start = node.start_mark.index
        at = self.src.text.find(written, start, node.end_mark.index)
        if at < 0:
            raise RefuseError(
                f"line {self.src.line_no(start)}: cannot find {written} where the parser put it"
            )
        return Edit(at, at + len(written), replacement)

    def check_anchors(self) -> None:
        """Refuse to remove an anchor that an alias left in place still uses."""
        removed: list[tuple[int, int]] = []
        anchored: list[tuple[int, str]] = []
        for seq, indices in self.plan.seq_removals.values():
            spans = item_spans(self.src, self.aliases, seq)
            for i in indices:
                start, end, alias = spans[i]
                removed.append((start, end))
                if not alias:
                    anchored += [
                        (n.start_mark.index, n.anchor)
                        for n in subtree(seq.value[i])
                        if getattr(n, "anchor", None) and start <= n.start_mark.index <= end
                    ]
        for at, anchor in anchored:
            for use, _, name in self.aliases:
                if name == anchor and not any(a <= use <= b for a, b in removed):
                    raise RefuseError(
                        f"line {self.src.line_no(at)}: the item to remove carries the anchor "
                        f"&{anchor}, which *{anchor} on line {self.src.line_no(use)} still "
                        f"uses; write the value there instead of *{anchor}, then run again"
                    )

    def edits(self) -> list[Edit]:
        self.check_anchors()
        out: list[Edit] = [self.rename_edit(*entry) for entry in self.plan.renames.values()]
        for seq, indices in self.plan.seq_removals.values():
            out.extend(self.seq_edits(seq, indices))
        for mapping, indices in self.plan.pair_removals.values():
            out.extend(self.pair_edits(mapping, indices))
        return out
