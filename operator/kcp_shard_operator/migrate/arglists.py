"""Rules on argument lists: deprecated flags removed or renamed, and what only fed them.

A flag is removed (or renamed) where the kcp version running the list ignores it;
the volumeMount and volume that held the removed kubeconfig are reported, or
pruned with ``--prune-mounts``. A deprecated flag inside a string is only warned of.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable

from ruamel.yaml.nodes import Node, ScalarNode, SequenceNode

from kcp_shard_operator.core.kcp.flags import FlagOccurrence, find_flag
from kcp_shard_operator.core.kcp.versions import (
    FLAG_GATES,
    VALUES_ROLES,
    FlagGate,
    at_least,
    gate_bounds,
)
from kcp_shard_operator.migrate.locate import FLAG, Locator, Unknown
from kcp_shard_operator.migrate.nodes import Segment, Visit, get, scalar, subtree

DEPRECATED_GATES = tuple(
    gate for gate in FLAG_GATES if gate.deprecated and gate.roles & VALUES_ROLES
)


def _deprecated_in(value: str) -> str | None:
    """The first deprecated flag written inside ``value``, if any."""
    for gate in DEPRECATED_GATES:
        if gate.flag in value:
            return gate.flag
    return None


def stray_flag(loc: Locator, visit: Visit) -> None:
    flag = _deprecated_in(visit.node.value)
    parent = visit.ancestors[-1] if visit.ancestors else None
    if flag is None or (isinstance(parent, SequenceNode) and find_flag([visit.node.value], flag)):
        return
    loc.warnings.append(
        loc.find(
            visit.node,
            visit.path,
            f"{flag} appears inside a string, not as a list item; left as is, edit it by hand",
        )
    )


def arg_list(loc: Locator, visit: Visit) -> None:
    seq = visit.node
    assert isinstance(seq, SequenceNode)
    values = [scalar(item) for item in seq.value]
    found = [(gate, occ) for gate in DEPRECATED_GATES for occ in find_flag(values, gate.flag)]
    if not found:
        return
    version = loc.context_version((*visit.ancestors, seq))
    for gate, occ in found:
        item = seq.value[occ.index]
        path = (*visit.path, occ.index)
        _, until = gate_bounds(gate, loc.release)
        if isinstance(version, Unknown):
            loc.warnings.append(
                loc.find(
                    item,
                    path,
                    f"kept {gate.flag}: cannot tell the kcp version from {version.text!r}; "
                    f"pass --kcp-version X.Y.Z (kcp ignores the flag from {until} on)",
                )
            )
        elif version is not None and until is not None and not at_least(version, until):
            loc.warnings.append(
                loc.find(
                    item,
                    path,
                    f"kept: kcp {version} still uses {gate.flag} (it is ignored from {until} on)",
                )
            )
        elif gate.still_read:
            if not find_flag(values, gate.replacement or gate.flag):
                loc.warnings.append(
                    loc.find(
                        item,
                        path,
                        f"kept {gate.flag}: deprecated from {until} on; {gate.why}",
                    )
                )
        elif gate.same_value and gate.replacement and not find_flag(values, gate.replacement):
            _rename(loc, item, gate, path)
        else:
            _remove_flag(loc, seq, occ, gate, visit)


def _rename(loc: Locator, item: Node, gate: FlagGate, path: tuple[Segment, ...]) -> None:
    assert isinstance(item, ScalarNode)
    assert gate.replacement
    written = item.value.partition("=")[0]
    loc.plan.renames[id(item)] = (item, written, gate.replacement)
    loc.changes.append(
        loc.find(item, path, f"renamed {written} to {gate.replacement} ({gate.why})")
    )


def _remove_flag(
    loc: Locator, seq: SequenceNode, occ: FlagOccurrence, gate: FlagGate, visit: Visit
) -> None:
    indices = set(range(occ.index, occ.index + occ.length))
    aliased = loc.alias_uses(seq, indices)
    loc.plan.remove_items(seq, indices, aliased)
    shown = occ.text
    if occ.length == 1 and occ.value is None:
        shown += " (no value followed it)"
    if gate.replacement:
        shown += f" (kcp ignores it; {gate.replacement} replaces it)"
    loc.changes.append(loc.find(seq.value[occ.index], (*visit.path, occ.index), f"removed {shown}"))
    if occ.value:
        _mounts_for(loc, occ.value, visit)


def _mounts_for(loc: Locator, path: str, visit: Visit) -> None:
    """Report (or prune) the volumeMount and volume that held the removed kubeconfig."""
    target = posixpath.normpath(path)
    level, mounts = _nearest(
        visit, loc.mounts, lambda n: _mount_covers(scalar(get(n, "mountPath")), target)
    )
    for mount in mounts:
        mount_path_node = get(mount.node, "mountPath")
        mount_path = scalar(mount_path_node) or ""
        still_used = any(
            isinstance(n, ScalarNode)
            and n is not mount_path_node
            and id(n) not in loc.plan.removed_nodes
            and _refers_to(n.value, mount_path)
            for n in subtree(visit.ancestors[level])
        )
        if still_used:
            continue
        name = scalar(get(mount.node, "name")) or ""
        _report_unneeded(loc, mount, f"volumeMount {name} at {mount_path}")
        vol_level, volumes = _nearest(visit, loc.volumes, _named(name))
        shared = any(
            m.node is not mount.node and _named(name)(m.node)
            for m in loc.mounts.get(id(visit.ancestors[vol_level]), [])
        )
        for vol in [] if shared else volumes:
            secret = scalar(get(get(vol.node, "secret"), "secretName"))
            what = f"volume {name}" + (f" (Secret {secret})" if secret else "")
            _report_unneeded(loc, vol, what)


def _nearest(
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


def _report_unneeded(loc: Locator, visit: Visit, what: str) -> None:
    parent = visit.ancestors[-1] if visit.ancestors else None
    if loc.prune and isinstance(parent, SequenceNode):
        index = next(i for i, n in enumerate(parent.value) if n is visit.node)
        if id(visit.node) in loc.plan.removed_nodes:
            return
        loc.plan.remove_items(parent, {index}, set())
        loc.changes.append(
            loc.find(visit.node, visit.path, f"removed {what}: it only served {FLAG}")
        )
    else:
        loc.unneeded.append(
            loc.find(
                visit.node,
                visit.path,
                f"{what}: it only served {FLAG} (remove with --prune-mounts)",
            )
        )


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
