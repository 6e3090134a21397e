"""kcp versions and the one table of version-gated `kcp start` flags.

Every rule of the form "this flag exists / matters from version X on" lives in
``FLAG_GATES``; renderers and the values migration ask :func:`flag_applies`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from enum import Enum
from functools import total_ordering

ROOT_SHARD_KUBECONFIG_FLAG = "--root-shard-kubeconfig-file"
CACHE_KUBECONFIG_FLAG = "--cache-kubeconfig"

DEPRECATING_RELEASE_ENV = "KCP_SHARD_ROOT_SHARD_FLAG_REMOVED_IN"

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


DEFAULT_DEPRECATING_RELEASE = Version(0, 33, 0)
"""First kcp release that ignores ``--root-shard-kubeconfig-file``.

No such tag was published when this was written (the newest kcp tag the Go
module proxy serves is v0.32.3), so 0.33.0 is the assumption; override it with
``--root-shard-flag-removed-in`` or the environment variable.
"""

MINIMUM_KCP_VERSION = Version(0, 31, 0)
"""Oldest kcp the operator renders for: the release that made
``--cache-kubeconfig`` mandatory on non-root shards."""


def deprecating_release_from_env(environ: dict[str, str] | None = None) -> Version:
    """The deprecating release from the environment, or the default."""
    value = (os.environ if environ is None else environ).get(DEPRECATING_RELEASE_ENV, "")
    return Version.parse(value) if value.strip() else DEFAULT_DEPRECATING_RELEASE


class Role(Enum):
    ROOT = "root"
    NON_ROOT = "non-root"


class Bound(Enum):
    """Version bounds that are settings rather than constants."""

    DEPRECATING_RELEASE = "deprecating-release"


@dataclass(frozen=True)
class FlagGate:
    """A flag rendered for ``roles`` on versions in ``[since, until)``."""

    flag: str
    roles: frozenset[Role]
    since: Version | Bound | None = None
    until: Version | Bound | None = None
    why: str = ""


FLAG_GATES: tuple[FlagGate, ...] = (
    FlagGate(
        flag=ROOT_SHARD_KUBECONFIG_FLAG,
        roles=frozenset({Role.NON_ROOT}),
        until=Bound.DEPRECATING_RELEASE,
        why="non-root shards read core APIExport identities from the cache server instead",
    ),
    FlagGate(
        flag=CACHE_KUBECONFIG_FLAG,
        roles=frozenset({Role.ROOT, Role.NON_ROOT}),
        since=MINIMUM_KCP_VERSION,
        why="required on non-root shards since kcp 0.31; optional on a root shard",
    ),
)


def _resolve(bound: Version | Bound | None, deprecating_release: Version) -> Version | None:
    if isinstance(bound, Bound):
        return deprecating_release
    return bound


def gate_for(flag: str) -> FlagGate:
    for gate in FLAG_GATES:
        if gate.flag == flag:
            return gate
    raise KeyError(flag)


def flag_applies(flag: str, version: Version, role: Role, deprecating_release: Version) -> bool:
    """Whether ``flag`` belongs on a shard of ``role`` running kcp ``version``."""
    gate = gate_for(flag)
    since = _resolve(gate.since, deprecating_release)
    until = _resolve(gate.until, deprecating_release)
    return (
        role in gate.roles
        and (since is None or version >= since)
        and (until is None or version < until)
    )


def ignores_root_shard_flag(version: Version, deprecating_release: Version) -> bool:
    """True for kcp versions that no longer use ``--root-shard-kubeconfig-file``."""
    return not flag_applies(ROOT_SHARD_KUBECONFIG_FLAG, version, Role.NON_ROOT, deprecating_release)
