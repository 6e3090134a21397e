"""Locating what to remove: what the rules share while they walk one file's documents.

The rules (:mod:`.shards`, :mod:`.arglists`) record on one :class:`Locator` what to
tell the user and what to remove; it also indexes the node tree (the key of each
value, named mounts and volumes under each node) and tells which kcp version runs
each place in the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kcp_shard_operator.core.kcp.versions import (
    ROOT_SHARD_KUBECONFIG_FLAG,
    InvalidVersionError,
    Version,
)
from kcp_shard_operator.migrate.edit import Plan
from kcp_shard_operator.migrate.nodes import Segment, Visit, get, scalar
from kcp_shard_operator.migrate.spans import Source, item_spans

FLAG = ROOT_SHARD_KUBECONFIG_FLAG
_PATH_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Unknown:
    """A kcp version stated in a form that cannot be compared (``tag: main``)."""

    text: str


Stated = Version | Unknown | None
"""What a file says about a kcp version: one, an unreadable one, or nothing."""


@dataclass(frozen=True)
class Finding:
    """Something to tell the user about one place in a file (line is 1-based)."""

    line: int
    path: str
    message: str


def format_path(path: tuple[Segment, ...]) -> str:
    """``spec.containers[0].args[2]``; keys that are not identifiers are quoted."""
    out = ""
    for seg in path:
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif _PATH_KEY.match(seg):
            out += f".{seg}" if out else seg
        else:
            out += f"[{seg!r}]"
    return out or "(document)"


class Locator:
    """What the rules have found in one file so far, and the indexes they share."""

    def __init__(
        self,
        src: Source,
        aliases: list[tuple[int, int, str]],
        deprecating_release: Version,
        prune_mounts: bool,
        kcp_version: Version | None,
    ) -> None:
        self.src = src
        self.aliases = aliases
        """Every alias use in the text: start, end, anchor name (in text order)."""
        self.release = deprecating_release
        self.prune = prune_mounts
        self.kcp_version = kcp_version
        self.plan = Plan()
        self.changes: list[Finding] = []
        self.unneeded: list[Finding] = []
        self.warnings: list[Finding] = []
        self.errors: list[Finding] = []
        self.ends: list[int] = []
        """End offsets of every scalar and flow collection."""
        self.shard_specs: dict[int, Stated] = {}
        self.key_of: dict[int, Node] = {}
        self.mounts: dict[int, list[Visit]] = {}
        self.volumes: dict[int, list[Visit]] = {}

    def find(self, node: Node, path: tuple[Segment, ...], message: str) -> Finding:
        return Finding(self.src.line_no(node.start_mark.index), format_path(path), message)

    def alias_uses(self, seq: SequenceNode, indices: set[int]) -> set[int]:
        """Which of the items at ``indices`` are alias uses (``*name``); one pass over ``seq``."""
        spans = item_spans(self.src, self.aliases, seq)
        return {i for i in indices if spans[i][2]}

    def index(self, visit: Visit) -> None:
        """Index one node: where a scalar or flow collection ends, what a mapping holds."""
        node = visit.node
        if isinstance(node, ScalarNode) or getattr(node, "flow_style", False):
            self.ends.append(node.end_mark.index)
        if isinstance(node, MappingNode):
            self._index(visit)

    def _index(self, visit: Visit) -> None:
        """Remember keys of values, and named mappings (mounts, volumes) under each ancestor."""
        node = visit.node
        for key, value in node.value:
            self.key_of.setdefault(id(value), key)
        if not scalar(get(node, "name")):
            return
        if get(node, "mountPath") is not None:
            index = self.mounts
        elif len(node.value) > 1:
            index = self.volumes
        else:
            return
        for ancestor in visit.ancestors:
            index.setdefault(id(ancestor), []).append(visit)

    def context_version(self, ancestors: tuple[Node, ...]) -> Stated:
        """The kcp version of the nearest enclosing shard or kcp container.

        What the file states wins; ``--kcp-version`` stands in where it states
        nothing or something that is not a version.
        """
        stated: Stated = None
        for node in reversed(ancestors):
            stated = self.shard_specs.get(id(node)) or self._stated_tag(node)
            if stated is not None:
                break
        if isinstance(stated, Version) or self.kcp_version is None:
            return stated
        return self.kcp_version

    def _stated_tag(self, node: Node) -> Stated:
        key = self.key_of.get(id(node))
        tag = _image_tag(node, kcp_values=scalar(key) == "kcp")
        if not tag:
            return None
        try:
            return Version.parse(tag.removeprefix("v"))
        except InvalidVersionError:
            return Unknown(tag)


def _image_tag(node: Node, kcp_values: bool = False) -> str | None:
    """The kcp image tag stated on ``node``: ``image: .../kcp:TAG``, ``image: {tag}``, ``tag``.

    ``kcp_values``: ``node`` is the ``kcp:`` block of chart values, whose ``tag`` alone
    states the version (the image defaults to kcp's).
    """
    image = get(node, "image")
    if image is None and kcp_values:
        return scalar(get(node, "tag"))
    if isinstance(image, MappingNode):
        return scalar(get(image, "tag"))
    reference = scalar(image)
    if reference is None or "kcp" not in reference:
        return None
    name, _, tag = reference.rpartition(":")
    if name and "/" not in tag and "@" not in reference:
        return tag
    return scalar(get(node, "tag"))
