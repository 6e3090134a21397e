"""kcp versions and the one table of version-gated and deprecated kcp flags.

Every rule of the form "this flag exists / matters from version X on" lives in
``FLAG_GATES``; renderers and the values migration ask :func:`flag_applies`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from functools import total_ordering

from kcp_shard_operator.constants import DEPRECATING_RELEASE_ENV

ROOT_SHARD_KUBECONFIG_FLAG = "--root-shard-kubeconfig-file"
CACHE_KUBECONFIG_FLAG = "--cache-kubeconfig"
ROOT_KUBECONFIG_FLAG = "--root-kubeconfig"
SHARD_PEER_KUBECONFIG_FLAG = "--shard-peer-kubeconfig"
SHARD_EXTERNAL_URL_FLAG = "--shard-external-url"
CACHE_CLIENT_CA_FLAG = "--client-ca-file"


_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
VERSION_PATTERN = _SEMVER.pattern


class InvalidVersionError(ValueError):
    """A string that is not a semantic version without a leading ``v``."""


@total_ordering
@dataclass(frozen=True)
class Version:
    """A semantic version; pre-releases sort before their release."""

    major: int
    minor: int
    patch: int
    prerelease: str = ""

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _SEMVER.match(text.strip())
        if match is None:
            raise InvalidVersionError(
                f"{text!r} is not a semantic version like 0.32.3 (no leading 'v')"
            )
        major, minor, patch, pre = match.groups()
        return cls(int(major), int(minor), int(patch), pre or "")

    @property
    def minor_release(self) -> tuple[int, int]:
        """Major and minor: versions that differ only in patch or pre-release share it."""
        return (self.major, self.minor)

    def _key(self) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
        pre = tuple(
            (0, int(part)) if part.isdigit() else (1, part) for part in self.prerelease.split(".")
        )
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}.{self.patch}"
        return f"{base}-{self.prerelease}" if self.prerelease else base


def parse_or_none(text: object) -> Version | None:
    """``text`` as a Version; None when it is empty, not a string or not a version."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return Version.parse(text)
    except InvalidVersionError:
        return None


DEFAULT_DEPRECATING_RELEASE = Version(0, 34, 0)
"""First kcp release that ignores ``--root-shard-kubeconfig-file`` on non-root shards.

kcp v0.33.0 (released 2026-09-15) still registers the flag without deprecation and
uses it to resolve the root shard's APIExport identities. The front-proxy's
``--root-kubeconfig`` was deprecated by kcp PR #4373, merged 2026-09-16 after
v0.33.0 was cut, and the shard flag's deprecation follows that change, so 0.34.0
is the earliest release that can ignore it. Change it with
``--root-shard-flag-removed-in`` or ``$KCP_SHARD_ROOT_SHARD_FLAG_REMOVED_IN``
(chart value ``operator.rootShardFlagRemovedIn``) once kcp tags the release.
"""

MINIMUM_KCP_VERSION = Version(0, 27, 0)
"""Oldest kcp the operator renders for: 0.27. The kind e2e runs v0.27.1 and v0.28.0 (the kcp
releases that build from the Go module proxy) from the rendered Deployments. Every flag the
operator renders exists there, ``--cache-kubeconfig`` included (kcp has accepted it since
0.11; from 0.31 on non-root shards cannot start without it)."""


def deprecating_release_from_env(environ: Mapping[str, str]) -> Version:
    """The deprecating release from the environment, or the default."""
    value = environ.get(DEPRECATING_RELEASE_ENV, "")
    return Version.parse(value) if value.strip() else DEFAULT_DEPRECATING_RELEASE


class Role(Enum):
    """Who runs a flag: a root shard, a non-root shard (both ``kcp start``), the front-proxy,
    a standalone virtual-workspace server (``virtual-workspaces``) or the cache server."""

    ROOT = "root"
    NON_ROOT = "non-root"
    FRONT_PROXY = "front-proxy"
    VIRTUAL_WORKSPACES = "virtual-workspaces"
    CACHE_SERVER = "cache-server"


SHARD_ROLES = frozenset({Role.ROOT, Role.NON_ROOT})
VALUES_ROLES = frozenset({*SHARD_ROLES, Role.FRONT_PROXY})
"""The roles whose flags Helm values and manifests carry (what ``migrate-values`` edits)."""


class Bound(Enum):
    """Version bounds that are settings rather than constants."""

    DEPRECATING_RELEASE = "deprecating-release"


@dataclass(frozen=True)
class FlagGate:
    """A flag that belongs on ``roles`` for kcp versions in ``[since, until)``.

    ``until`` set means kcp deprecated the flag or made it a no-op in that release;
    ``replacement`` is the flag to use instead, and ``same_value`` says the replacement
    takes the same value (an alias), so the flag can be renamed rather than dropped.
    ``still_read``: deprecated, but kcp still reads it, so it is reported and never
    removed. ``required_since``: from that release on the role cannot do without the flag
    (before it, kcp has a default for it).
    ``backports``: patch releases of minors before ``since`` that took the flag too
    (``~0.29.2`` is 0.29.2 and the later 0.29 patches).
    """

    flag: str
    roles: frozenset[Role]
    since: Version | Bound | None = None
    until: Version | Bound | None = None
    replacement: str | None = None
    same_value: bool = False
    still_read: bool = False
    required_since: Version | Bound | None = None
    backports: tuple[Version, ...] = ()
    why: str = ""

    @property
    def deprecated(self) -> bool:
        return self.until is not None


FLAG_GATES: tuple[FlagGate, ...] = (
    FlagGate(
        flag=ROOT_SHARD_KUBECONFIG_FLAG,
        roles=frozenset({Role.NON_ROOT}),
        until=Bound.DEPRECATING_RELEASE,
        why="non-root shards read core APIExport identities from the cache server instead",
    ),
    FlagGate(
        flag=CACHE_KUBECONFIG_FLAG,
        roles=SHARD_ROLES,
        since=MINIMUM_KCP_VERSION,
        why="required on non-root shards since kcp 0.31; optional on a root shard",
    ),
    FlagGate(
        flag="--external-hostname",
        roles=SHARD_ROLES,
        until=Version(0, 31, 0),
        replacement="--shard-external-url",
        why="hidden and ignored; external URLs come from --shard-external-url",
    ),
    FlagGate(
        flag="--cache-server-kubeconfig-file",
        roles=SHARD_ROLES,
        until=Version(0, 11, 0),
        replacement=CACHE_KUBECONFIG_FLAG,
        same_value=True,
        why="the old name is a deprecated alias of the same setting",
    ),
    FlagGate(
        flag=ROOT_KUBECONFIG_FLAG,
        roles=frozenset({Role.FRONT_PROXY}),
        until=Bound.DEPRECATING_RELEASE,
        replacement=SHARD_PEER_KUBECONFIG_FLAG,
        still_read=True,
        why="the front-proxy discovers shards through --shard-peer-kubeconfig (kcp PR #4373) "
        "but still reads --root-kubeconfig for APIExport identities; add the new flag next "
        "to it",
    ),
    FlagGate(
        flag=SHARD_PEER_KUBECONFIG_FLAG,
        roles=frozenset({Role.FRONT_PROXY}),
        since=Bound.DEPRECATING_RELEASE,
        why="the peer shards whose admin view the front-proxy discovers shards through "
        "(kcp PR #4373, after v0.33.0); before it, the front-proxy watches the root shard "
        "of --root-kubeconfig",
    ),
    FlagGate(
        flag=CACHE_KUBECONFIG_FLAG,
        roles=frozenset({Role.VIRTUAL_WORKSPACES}),
        since=MINIMUM_KCP_VERSION,
        required_since=Bound.DEPRECATING_RELEASE,
        why="from the deprecating release on, the virtual-workspace server reads the core "
        "APIExport identities from the cache server and no longer through its shard (before "
        "it: its shard's apiexport-identity-cache ConfigMap, which a non-root shard fills "
        "from the root shard, falling back to the root workspace); without the flag kcp "
        "takes --kubeconfig for the cache",
    ),
    FlagGate(
        flag=SHARD_EXTERNAL_URL_FLAG,
        roles=frozenset({Role.VIRTUAL_WORKSPACES}),
        until=Version(0, 31, 0),
        why="required by the virtual-workspace server up to kcp 0.30; hidden and ignored "
        "from 0.31 on (cmd/virtual-workspaces/options: the virtual workspaces take their "
        "URLs from the Shard objects)",
    ),
    FlagGate(
        flag=CACHE_CLIENT_CA_FLAG,
        roles=frozenset({Role.CACHE_SERVER}),
        since=Version(0, 31, 0),
        backports=(Version(0, 29, 2), Version(0, 30, 2)),
        why="the cache server authenticates client certificates from kcp ~0.29.2 || ~0.30.2 || "
        ">=0.31.0 (0.31 refuses to start without it); before, it registers no authentication "
        "flag (0.30.0's options set authentication to nil) and trusts every client",
    ),
)


def normalize_flag(name: str) -> str:
    """A flag name as kcp's parser sees it: ``_`` and ``-`` are the same word separator."""
    return name.replace("_", "-")


def _resolve(bound: Version | Bound | None, deprecating_release: Version) -> Version | None:
    if isinstance(bound, Bound):
        return deprecating_release
    return bound


def at_least(version: Version, bound: Version) -> bool:
    """``version >= bound``, where a pre-release of ``bound`` counts as ``bound`` itself.

    A release candidate (``0.34.0-rc.1``) of a release that changes a flag already
    carries the change.
    """
    core = Version(version.major, version.minor, version.patch)
    return version >= bound or (not bound.prerelease and core == bound)


def gate_for(flag: str, role: Role | None = None) -> FlagGate:
    """The row of ``flag`` (for ``role``: a flag several binaries take has a row each)."""
    name = normalize_flag(flag)
    for gate in FLAG_GATES:
        if gate.flag == name and (role is None or role in gate.roles):
            return gate
    raise KeyError(flag)


def gate_bounds(gate: FlagGate, deprecating_release: Version) -> tuple[Version | None, ...]:
    """``since`` and ``until`` of ``gate`` with settings resolved."""
    return _resolve(gate.since, deprecating_release), _resolve(gate.until, deprecating_release)


def _backported(gate: FlagGate, version: Version) -> bool:
    return any(
        version.minor_release == patch.minor_release and at_least(version, patch)
        for patch in gate.backports
    )


def flag_applies(flag: str, version: Version, role: Role, deprecating_release: Version) -> bool:
    """Whether ``flag`` belongs on a ``role`` running kcp ``version``."""
    try:
        gate = gate_for(flag, role)
    except KeyError:
        gate_for(flag)  # an unknown flag is a KeyError; one of another role does not apply
        return False
    since, until = gate_bounds(gate, deprecating_release)
    return (since is None or at_least(version, since) or _backported(gate, version)) and (
        until is None or not at_least(version, until)
    )


def flag_required(flag: str, version: Version, role: Role, deprecating_release: Version) -> bool:
    """Whether a ``role`` running kcp ``version`` cannot do without ``flag``."""
    gate = gate_for(flag, role)
    required = _resolve(gate.required_since, deprecating_release)
    return required is not None and at_least(version, required)


def retired_flags(version: Version, role: Role, deprecating_release: Version) -> list[FlagGate]:
    """The deprecated rows whose flag a ``role`` on kcp ``version`` no longer uses."""
    return [
        gate
        for gate in FLAG_GATES
        if gate.deprecated
        and role in gate.roles
        and at_least(version, _resolve(gate.until, deprecating_release) or version)
    ]


def ignores_root_shard_flag(version: Version, deprecating_release: Version) -> bool:
    """True for kcp versions that no longer use ``--root-shard-kubeconfig-file``."""
    return not flag_applies(ROOT_SHARD_KUBECONFIG_FLAG, version, Role.NON_ROOT, deprecating_release)


def explain(deprecating_release: Version) -> str:
    """The deprecated rows of ``FLAG_GATES`` as a table for people."""
    rows = [("FLAG", "USED BY", "DEPRECATED FROM", "REPLACEMENT", "WHY")]
    for gate in FLAG_GATES:
        if not gate.deprecated:
            continue
        _, until = gate_bounds(gate, deprecating_release)
        rows.append(
            (
                gate.flag,
                ",".join(sorted(role.value for role in gate.roles)),
                f"{until}" + (" (setting)" if isinstance(gate.until, Bound) else ""),
                (gate.replacement or "-")
                + (" (same value)" if gate.same_value else "")
                + (" (next to it)" if gate.still_read else ""),
                gate.why,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        + f"  {row[4]}\n"
        for row in rows
    )
