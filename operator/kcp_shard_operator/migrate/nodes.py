"""The YAML node tree as ruamel composes it: walking it and reading values off it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

Segment = str | int


@dataclass
class Visit:
    node: Node
    path: tuple[Segment, ...]
    ancestors: tuple[Node, ...]


def scalar(node: Node | None) -> str | None:
    return node.value if isinstance(node, ScalarNode) else None


def get(mapping: Node | None, key: str) -> Node | None:
    if not isinstance(mapping, MappingNode):
        return None
    for k, v in mapping.value:
        if isinstance(k, ScalarNode) and k.value == key:
            found: Node = v
            return found
    return None


def pair_index(mapping: MappingNode, key: str) -> int | None:
    for i, (k, _) in enumerate(mapping.value):
        if isinstance(k, ScalarNode) and k.value == key:
            return i
    return None


def truthy(node: Node | None) -> bool:
    value = scalar(node)
    return value is not None and value.lower() in ("true", "yes", "on")


def walk(root: Node) -> Iterator[Visit]:
    """Every node once (an alias is the anchored node, visited at the anchor)."""
    seen: set[int] = set()
    stack: list[Visit] = [Visit(root, (), ())]
    while stack:
        visit = stack.pop()
        node = visit.node
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield visit
        below = (*visit.ancestors, node)
        children: list[Visit] = []
        if isinstance(node, SequenceNode):
            children = [Visit(item, (*visit.path, i), below) for i, item in enumerate(node.value)]
        elif isinstance(node, MappingNode):
            for k, v in node.value:
                seg: Segment = k.value if isinstance(k, ScalarNode) else "?"
                children.append(Visit(k, visit.path, below))
                children.append(Visit(v, (*visit.path, seg), below))
        stack.extend(reversed(children))


def subtree(node: Node) -> Iterator[Node]:
    for visit in walk(node):
        yield visit.node


def content_end(node: Node) -> int:
    """End offset of the last character that belongs to ``node``.

    Block collections report their end at the next token (after trailing
    comments), so their end is taken from their last scalar or flow collection.
    """
    if isinstance(node, ScalarNode) or getattr(node, "flow_style", False):
        end: int = node.end_mark.index
        return end
    ends = [content_end(child) for child in _children(node)]
    return max(ends) if ends else int(node.start_mark.index)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []
