"""Remove ``--root-shard-kubeconfig-file`` from YAML values and manifests, keeping every byte else.

The YAML library only *locates* what to remove (character offsets of nodes); the
edit deletes spans of the original text, so untouched bytes (comments, quoting,
indentation, line endings, document markers) are copied, never re-serialised.
Each located span is checked to hold the text it is supposed to hold, and the
result is re-parsed and compared with the original minus the removed nodes; a
file that fails either check is refused, unchanged.

This module runs the steps: the rules in :mod:`.shards` and :mod:`.arglists`
locate what to remove (on a :mod:`.locate` ``Locator``), :mod:`.edit` turns that
into edits, :mod:`.spans` checks the offsets and applies the edits.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.migrate.arglists import arg_list, stray_flag
from kcp_shard_operator.migrate.edit import plan_edits
from kcp_shard_operator.migrate.locate import Finding, Locator
from kcp_shard_operator.migrate.nodes import subtree, walk
from kcp_shard_operator.migrate.shards import find_shards, shard_chart_values
from kcp_shard_operator.migrate.spans import (
    RefuseError,
    Source,
    alias_uses,
    apply_edits,
    check_positions,
)

MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class MigrationResult:
    """The new text and what happened; ``errors`` means the file must not be written."""

    original: str
    text: str
    changes: tuple[Finding, ...] = ()
    unneeded: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = ()
    errors: tuple[Finding, ...] = ()

    @property
    def changed(self) -> bool:
        return self.text != self.original


def parse(text: str) -> list[Node]:
    """Compose every document; duplicate keys are an error, as for kubectl and helm."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. a reused anchor name: legal YAML
        docs = [n for n in YAML(typ="safe", pure=True).compose_all(text) if n is not None]
    for root in docs:
        for node in subtree(root):
            if isinstance(node, MappingNode):
                _check_unique_keys(node)
    return docs


def _check_unique_keys(mapping: MappingNode) -> None:
    seen: set[tuple[str | None, str]] = set()
    for key, _ in mapping.value:
        if not isinstance(key, ScalarNode) or key.tag == MERGE_TAG:
            continue
        if (key.tag, key.value) in seen:
            raise MarkedYAMLError(
                problem=f"found duplicate key {key.value!r}", problem_mark=key.start_mark
            )
        seen.add((key.tag, key.value))


def migrate_text(
    text: str,
    *,
    deprecating_release: Version,
    prune_mounts: bool = False,
    kcp_version: Version | None = None,
) -> MigrationResult:
    """Remove or rename deprecated flags (and what only fed them) in one YAML stream.

    ``kcp_version`` is the version to assume where the file states none it can be
    compared with. A file with errors is not rewritten and reports no changes.
    """
    try:
        docs = parse(text)
        aliases = alias_uses(text)
    except YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        line = mark.line + 1 if mark is not None else 0
        message = " ".join(str(getattr(err, "problem", None) or err).split())
        return MigrationResult(
            text, text, errors=(Finding(line, "(document)", f"invalid YAML: {message}"),)
        )
    loc = Locator(Source(text), aliases, deprecating_release, prune_mounts, kcp_version)
    _locate(loc, docs)
    kept = (
        tuple(sorted(loc.unneeded, key=lambda f: f.line)),
        tuple(sorted(loc.warnings, key=lambda f: f.line)),
    )
    if loc.errors:
        return MigrationResult(text, text, (), *kept, tuple(loc.errors))
    changes = tuple(sorted(loc.changes, key=lambda f: f.line))
    if not changes:
        return MigrationResult(text, text, (), *kept)
    plan = loc.plan
    try:
        check_positions(text, docs)
        new_text = apply_edits(text, plan_edits(plan, loc.src, aliases, loc.key_of, loc.ends))
        renames = {
            key: replacement + node.value[len(written) :]
            for key, (node, written, replacement) in plan.renames.items()
        }
        _verify(docs, new_text, _Expected(plan.skipped, renames))
    except RefuseError as err:
        refusal = Finding(0, "(document)", f"refusing to rewrite this file: {err}; left unchanged")
        return MigrationResult(text, text, (), *kept, (refusal,))
    return MigrationResult(text, new_text, changes, *kept)


def _locate(loc: Locator, docs: list[Node]) -> None:
    """Index each document, then run the rules on it.

    Shard specs go first: the argument-list rules read the versions they state.
    """
    for root in docs:
        visits = list(walk(root))
        for visit in visits:
            loc.index(visit)
        for visit in visits:
            find_shards(loc, visit)
        if isinstance(root, MappingNode):
            shard_chart_values(loc, root)
        for visit in visits:
            if isinstance(visit.node, SequenceNode):
                arg_list(loc, visit)
            elif isinstance(visit.node, ScalarNode) and visit.path:
                stray_flag(loc, visit)


@dataclass
class _Expected:
    """How the edited documents should differ: entries left out, flag names changed."""

    skip: set[tuple[int, int]] = field(default_factory=set)
    renames: dict[int, str] = field(default_factory=dict)
    memo: dict[int, object] = field(default_factory=dict)


def _signature(node: Node, expected: _Expected, depth: int = 0) -> object:
    """A comparable, style-free view of a node tree as ``expected`` says it should become."""
    if depth > 200:
        raise RefuseError("document nests too deeply (or is recursive)")
    key = id(node)
    if key in expected.memo:
        return expected.memo[key]
    skip = expected.skip
    sig: object
    if isinstance(node, ScalarNode):
        sig = ("scalar", node.tag, expected.renames.get(key, node.value))
    elif isinstance(node, SequenceNode):
        sig = (
            "seq",
            node.tag,
            tuple(
                _signature(n, expected, depth + 1)
                for i, n in enumerate(node.value)
                if (key, i) not in skip
            ),
        )
    else:
        sig = (
            "map",
            node.tag,
            tuple(
                (_signature(k, expected, depth + 1), _signature(v, expected, depth + 1))
                for i, (k, v) in enumerate(node.value)
                if (key, i) not in skip
            ),
        )
    expected.memo[key] = sig
    return sig


def _verify(old_docs: list[Node], new_text: str, expected: _Expected) -> None:
    """The rewritten text must parse to the original documents as ``expected`` changes them."""
    try:
        new_docs = parse(new_text)
    except YAMLError as err:
        raise RefuseError(f"the edited text would not parse ({err})") from err
    want = [_signature(d, expected) for d in old_docs]
    actual = [_signature(d, _Expected()) for d in new_docs]
    if want != actual:
        raise RefuseError("the edited text would differ in more than the removed entries")
