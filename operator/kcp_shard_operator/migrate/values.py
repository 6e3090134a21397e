"""Remove ``--root-shard-kubeconfig-file`` from YAML values and manifests, keeping every byte else.

The YAML library only *locates* what to remove (character offsets of nodes); the
edit deletes spans of the original text, so untouched bytes (comments, quoting,
indentation, line endings, document markers) are copied, never re-serialised.
Each located span is checked to hold the text it is supposed to hold, and the
result is re-parsed and compared with the original minus the removed nodes; a
file that fails either check is refused, unchanged.
"""

from __future__ import annotations

import posixpath
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kcp_shard_operator.constants import SHARD_API_VERSION, SHARD_KIND
from kcp_shard_operator.core.flags import FlagOccurrence, find_flag
from kcp_shard_operator.core.versions import (
    FLAG_GATES,
    ROOT_SHARD_KUBECONFIG_FLAG,
    FlagGate,
    InvalidVersionError,
    Version,
    at_least,
    gate_bounds,
    ignores_root_shard_flag,
)
from kcp_shard_operator.migrate.edit import Plan, plan_edits
from kcp_shard_operator.migrate.nodes import (
    Segment,
    Visit,
    get,
    pair_index,
    scalar,
    subtree,
    truthy,
    walk,
)
from kcp_shard_operator.migrate.spans import (
    RefuseError,
    Source,
    alias_uses,
    apply_edits,
    check_positions,
    item_spans,
)

FLAG = ROOT_SHARD_KUBECONFIG_FLAG
ROOT_SHARD_REF_KEY = "rootShardKubeconfigSecretRef"
SHARD_CHART_KUBECONFIG_MOUNT = "/etc/kcp/shard"
"""Where kcp-dev/helm-charts' deprecated ``shard`` chart mounts the root-shard kubeconfig."""

MERGE_TAG = "tag:yaml.org,2002:merge"
_PATH_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")

DEPRECATED_GATES = tuple(gate for gate in FLAG_GATES if gate.deprecated)


@dataclass(frozen=True)
class _Unknown:
    """A kcp version stated in a form that cannot be compared (``tag: main``)."""

    text: str


Stated = Version | _Unknown | None
"""What a file says about a kcp version: one, an unreadable one, or nothing."""


@dataclass(frozen=True)
class Finding:
    """Something to tell the user about one place in a file (line is 1-based)."""

    line: int
    path: str
    message: str


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


def _deprecated_in(value: str) -> str | None:
    """The first deprecated flag written inside ``value``, if any."""
    for gate in DEPRECATED_GATES:
        if gate.flag in value:
            return gate.flag
    return None


class _Migration:
    def __init__(
        self,
        text: str,
        deprecating_release: Version,
        prune_mounts: bool,
        kcp_version: Version | None,
    ) -> None:
        self.src = Source(text)
        self.release = deprecating_release
        self.prune = prune_mounts
        self.kcp_version = kcp_version
        self.plan = Plan()
        self.changes: list[Finding] = []
        self.unneeded: list[Finding] = []
        self.warnings: list[Finding] = []
        self.errors: list[Finding] = []
        self.docs: list[Node] = []
        self.ends: list[int] = []
        """End offsets of every scalar and flow collection."""
        self.aliases: list[tuple[int, int, str]] = []
        """Every alias use in the text: start, end, anchor name (in text order)."""
        self.shard_specs: dict[int, Stated] = {}
        self.key_of: dict[int, Node] = {}
        self.mounts: dict[int, list[Visit]] = {}
        self.volumes: dict[int, list[Visit]] = {}

    def find(self, node: Node, path: tuple[Segment, ...], message: str) -> Finding:
        return Finding(self.src.line_no(node.start_mark.index), format_path(path), message)

    def is_alias_use(self, seq: SequenceNode, index: int) -> bool:
        return item_spans(self.src, self.aliases, seq)[index][2]

    def collect(self) -> None:
        for root in self.docs:
            visits = list(walk(root))
            for visit in visits:
                node = visit.node
                if isinstance(node, ScalarNode) or getattr(node, "flow_style", False):
                    self.ends.append(node.end_mark.index)
                if isinstance(node, MappingNode):
                    self._index(visit)
            for visit in visits:
                self._find_shards(visit)
            if isinstance(root, MappingNode):
                self._shard_chart_values(root)
            for visit in visits:
                if isinstance(visit.node, SequenceNode):
                    self._arg_list(visit)
                elif isinstance(visit.node, ScalarNode) and visit.path:
                    self._stray_flag(visit)

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

    def _stray_flag(self, visit: Visit) -> None:
        flag = _deprecated_in(visit.node.value)
        parent = visit.ancestors[-1] if visit.ancestors else None
        if flag is None or (
            isinstance(parent, SequenceNode) and find_flag([visit.node.value], flag)
        ):
            return
        self.warnings.append(
            self.find(
                visit.node,
                visit.path,
                f"{flag} appears inside a string, not as a list item; left as is, edit it by hand",
            )
        )

    def _find_shards(self, visit: Visit) -> None:
        node = visit.node
        if not isinstance(node, MappingNode):
            return
        shards = get(node, "shards")
        if isinstance(shards, SequenceNode):
            for i, item in enumerate(shards.value):
                if isinstance(item, MappingNode):
                    self._shard_spec(item, (*visit.path, "shards", i))
        if (
            scalar(get(node, "apiVersion")) == SHARD_API_VERSION
            and scalar(get(node, "kind")) == SHARD_KIND
        ):
            spec = get(node, "spec")
            if isinstance(spec, MappingNode):
                self._shard_spec(spec, (*visit.path, "spec"))

    def _shard_spec(self, spec: MappingNode, path: tuple[Segment, ...]) -> None:
        version_text = scalar(get(spec, "version")) or ""
        version: Version | None = None
        try:
            version = Version.parse(version_text)
        except InvalidVersionError:
            version = None
        self.shard_specs[id(spec)] = version or _Unknown(version_text)
        if get(spec, "rootShardRef") is not None and not isinstance(
            get(get(spec, "cache"), "kubeconfigSecretRef"), MappingNode
        ):
            self.errors.append(
                self.find(
                    spec,
                    path,
                    "non-root shard (rootShardRef set) has no cache.kubeconfigSecretRef: "
                    "kcp refuses to start it (--cache-kubeconfig is required for non-root shards)",
                )
            )
        index = pair_index(spec, ROOT_SHARD_REF_KEY)
        if index is None:
            return
        key, ref = spec.value[index]
        ref_path = (*path, ROOT_SHARD_REF_KEY)
        if version is None:
            self.warnings.append(
                self.find(key, ref_path, "kept: the shard has no valid version to decide on")
            )
            return
        if not ignores_root_shard_flag(version, self.release):
            return
        self.plan.remove_pair(spec, index)
        self.changes.append(
            self.find(
                key,
                ref_path,
                f"removed {ROOT_SHARD_REF_KEY} (kcp {version} ignores {FLAG})",
            )
        )
        secret = scalar(get(ref, "name"))
        if secret:
            self.unneeded.append(
                self.find(
                    key,
                    ref_path,
                    f"Secret {secret}: it only fed {FLAG}; delete it once no older shard uses it",
                )
            )

    def _shard_chart_values(self, root: MappingNode) -> None:
        """Values of the deprecated kcp ``shard`` chart, whose template renders the flag."""
        kcp = get(root, "kcp")
        if not isinstance(kcp, MappingNode):
            return
        ignored = get(kcp, "sharding")
        if isinstance(ignored, MappingNode):
            self.warnings.append(
                self.find(
                    ignored,
                    ("kcp", "sharding"),
                    "read by nothing in the deprecated shard chart, which reads the "
                    "top-level sharding.*",
                )
            )
        sharding = get(root, "sharding")
        is_root = get(sharding, "isRoot")
        if not truthy(get(sharding, "enabled")) or is_root is None or truthy(is_root):
            return
        where = is_root
        path: tuple[Segment, ...] = ("sharding", "isRoot")
        if not (
            truthy(get(get(root, "cache"), "enabled"))
            or truthy(get(get(root, "externalCache"), "enabled"))
        ):
            self.errors.append(
                self.find(
                    where,
                    path,
                    "non-root shard with neither cache.enabled nor externalCache.enabled: "
                    "kcp refuses to start it (--cache-kubeconfig is required for non-root shards)",
                )
            )
        fullname = scalar(get(root, "fullnameOverride")) or (
            "<release>-" + (scalar(get(root, "nameOverride")) or "shard")
        )
        self.unneeded.append(
            self.find(
                where,
                path,
                f"Secret {fullname}-shard-admin-kubeconfig (volume kcp-shard-kubeconfig at "
                f"{SHARD_CHART_KUBECONFIG_MOUNT}) from kcp {self.release} on; this deprecated "
                f"chart's template renders {FLAG} itself (convert with --from-shard-chart)",
            )
        )

    def _stated_tag(self, node: Node) -> Stated:
        key = self.key_of.get(id(node))
        tag = _image_tag(node, kcp_values=scalar(key) == "kcp")
        if not tag:
            return None
        try:
            return Version.parse(tag.removeprefix("v"))
        except InvalidVersionError:
            return _Unknown(tag)

    def _context_version(self, ancestors: tuple[Node, ...]) -> Stated:
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

    def _arg_list(self, visit: Visit) -> None:
        seq = visit.node
        assert isinstance(seq, SequenceNode)
        values = [scalar(item) for item in seq.value]
        found = [(gate, occ) for gate in DEPRECATED_GATES for occ in find_flag(values, gate.flag)]
        if not found:
            return
        version = self._context_version((*visit.ancestors, seq))
        for gate, occ in found:
            item = seq.value[occ.index]
            path = (*visit.path, occ.index)
            _, until = gate_bounds(gate, self.release)
            if isinstance(version, _Unknown):
                self.warnings.append(
                    self.find(
                        item,
                        path,
                        f"kept {gate.flag}: cannot tell the kcp version from {version.text!r}; "
                        f"pass --kcp-version X.Y.Z (kcp ignores the flag from {until} on)",
                    )
                )
            elif version is not None and until is not None and not at_least(version, until):
                self.warnings.append(
                    self.find(
                        item,
                        path,
                        f"kept: kcp {version} still uses {gate.flag} "
                        f"(it is ignored from {until} on)",
                    )
                )
            elif gate.still_read:
                if not find_flag(values, gate.replacement or gate.flag):
                    self.warnings.append(
                        self.find(
                            item,
                            path,
                            f"kept {gate.flag}: deprecated from {until} on; {gate.why}",
                        )
                    )
            elif gate.same_value and gate.replacement and not find_flag(values, gate.replacement):
                self._rename(item, gate, path)
            else:
                self._remove_flag(seq, occ, gate, visit)

    def _rename(self, item: Node, gate: FlagGate, path: tuple[Segment, ...]) -> None:
        assert isinstance(item, ScalarNode)
        assert gate.replacement
        written = item.value.partition("=")[0]
        self.plan.renames[id(item)] = (item, written, gate.replacement)
        self.changes.append(
            self.find(item, path, f"renamed {written} to {gate.replacement} ({gate.why})")
        )

    def _remove_flag(
        self, seq: SequenceNode, occ: FlagOccurrence, gate: FlagGate, visit: Visit
    ) -> None:
        indices = set(range(occ.index, occ.index + occ.length))
        aliased = {i for i in indices if self.is_alias_use(seq, i)}
        self.plan.remove_items(seq, indices, aliased)
        shown = occ.text
        if occ.length == 1 and occ.value is None:
            shown += " (no value followed it)"
        if gate.replacement:
            shown += f" (kcp ignores it; {gate.replacement} replaces it)"
        self.changes.append(
            self.find(seq.value[occ.index], (*visit.path, occ.index), f"removed {shown}")
        )
        if occ.value:
            self._mounts_for(occ.value, visit)

    def _mounts_for(self, path: str, visit: Visit) -> None:
        """Report (or prune) the volumeMount and volume that held the removed kubeconfig."""
        target = posixpath.normpath(path)
        level, mounts = self._nearest(
            visit, self.mounts, lambda n: _mount_covers(scalar(get(n, "mountPath")), target)
        )
        for mount in mounts:
            mount_path_node = get(mount.node, "mountPath")
            mount_path = scalar(mount_path_node) or ""
            still_used = any(
                isinstance(n, ScalarNode)
                and n is not mount_path_node
                and id(n) not in self.plan.removed_nodes
                and _refers_to(n.value, mount_path)
                for n in subtree(visit.ancestors[level])
            )
            if still_used:
                continue
            name = scalar(get(mount.node, "name")) or ""
            self._report_unneeded(mount, f"volumeMount {name} at {mount_path}")
            vol_level, volumes = self._nearest(visit, self.volumes, _named(name))
            shared = any(
                m.node is not mount.node and _named(name)(m.node)
                for m in self.mounts.get(id(visit.ancestors[vol_level]), [])
            )
            for vol in [] if shared else volumes:
                secret = scalar(get(get(vol.node, "secret"), "secretName"))
                what = f"volume {name}" + (f" (Secret {secret})" if secret else "")
                self._report_unneeded(vol, what)

    def _nearest(
        self,
        visit: Visit,
        index: dict[int, list[Visit]],
        match: Callable[[Node], bool],
    ) -> tuple[int, list[Visit]]:
        """Entries of ``index`` matching ``match`` under the nearest ancestor that has any.

        Returns that ancestor's level (its index in ``visit.ancestors``) and the matches.
        """
        for level in range(len(visit.ancestors) - 1, -1, -1):
            found = [v for v in index.get(id(visit.ancestors[level]), []) if match(v.node)]
            if found:
                return level, found
        return 0, []

    def _report_unneeded(self, visit: Visit, what: str) -> None:
        parent = visit.ancestors[-1] if visit.ancestors else None
        if self.prune and isinstance(parent, SequenceNode):
            index = next(i for i, n in enumerate(parent.value) if n is visit.node)
            if id(visit.node) in self.plan.removed_nodes:
                return
            self.plan.remove_items(parent, {index}, set())
            self.changes.append(
                self.find(visit.node, visit.path, f"removed {what}: it only served {FLAG}")
            )
        else:
            self.unneeded.append(
                self.find(
                    visit.node,
                    visit.path,
                    f"{what}: it only served {FLAG} (remove with --prune-mounts)",
                )
            )


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


def _named(name: str) -> Callable[[Node], bool]:
    def match(node: Node) -> bool:
        return scalar(get(node, "name")) == name

    return match


def _mount_covers(mount_path: str | None, target: str) -> bool:
    if not mount_path or not mount_path.startswith("/"):
        return False
    mount = posixpath.normpath(mount_path)
    return target == mount or target.startswith(mount.rstrip("/") + "/")


def _refers_to(value: str, mount_path: str) -> bool:
    mount = posixpath.normpath(mount_path).rstrip("/")
    return bool(mount) and re.search(re.escape(mount) + r"(/|$|[\s\"',])", value) is not None


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
    migration = _Migration(text, deprecating_release, prune_mounts, kcp_version)
    try:
        migration.docs = parse(text)
        migration.aliases = alias_uses(text)
    except YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        line = mark.line + 1 if mark is not None else 0
        message = " ".join(str(getattr(err, "problem", None) or err).split())
        return MigrationResult(
            text, text, errors=(Finding(line, "(document)", f"invalid YAML: {message}"),)
        )
    migration.collect()
    kept = (
        tuple(sorted(migration.unneeded, key=lambda f: f.line)),
        tuple(sorted(migration.warnings, key=lambda f: f.line)),
    )
    if migration.errors:
        return MigrationResult(text, text, (), *kept, tuple(migration.errors))
    changes = tuple(sorted(migration.changes, key=lambda f: f.line))
    if not changes:
        return MigrationResult(text, text, (), *kept)
    plan = migration.plan
    try:
        check_positions(text, migration.docs)
        edits = plan_edits(plan, migration.src, migration.aliases, migration.key_of, migration.ends)
        new_text = apply_edits(text, edits)
        renames = {
            key: replacement + node.value[len(written) :]
            for key, (node, written, replacement) in plan.renames.items()
        }
        _verify(migration.docs, new_text, _Expected(plan.skipped, renames))
    except RefuseError as err:
        refusal = Finding(0, "(document)", f"refusing to rewrite this file: {err}; left unchanged")
        return MigrationResult(text, text, (), *kept, (refusal,))
    return MigrationResult(text, new_text, changes, *kept)


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
