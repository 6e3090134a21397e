from __future__ import annotations

import pytest

from kcp_shard_operator.constants import DEPRECATING_RELEASE_ENV
from kcp_shard_operator.core.kcp.versions import (
    CACHE_CLIENT_CA_FLAG,
    CACHE_KUBECONFIG_FLAG,
    DEFAULT_DEPRECATING_RELEASE,
    ROOT_SHARD_KUBECONFIG_FLAG,
    InvalidVersionError,
    Role,
    Version,
    deprecating_release_from_env,
    flag_applies,
    ignores_root_shard_flag,
)

V = Version.parse


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("0.32.3", "0.34.0"),
        ("0.32.3", "0.32.10"),
        ("0.34.0-rc.1", "0.34.0"),
        ("0.34.0-alpha.2", "0.34.0-alpha.10"),
        ("0.34.0-alpha.9", "0.34.0-beta.0"),
        ("0.9.9", "1.0.0"),
    ],
)
def test_ordering(lower: str, higher: str) -> None:
    assert V(lower) < V(higher)
    assert not V(higher) < V(lower)


@pytest.mark.parametrize("text", ["v0.32.3", "0.32", "0.32.3.1", "", "latest", "01.2.3", "0.32.x"])
def test_rejects_malformed(text: str) -> None:
    with pytest.raises(InvalidVersionError):
        V(text)


def test_round_trip_and_build_metadata() -> None:
    assert str(V("0.34.0-rc.1")) == "0.34.0-rc.1"
    assert V("0.34.0+build.5") == V("0.34.0")


@pytest.mark.parametrize(
    ("flag", "version", "role", "release", "expected"),
    [
        (ROOT_SHARD_KUBECONFIG_FLAG, "0.32.3", Role.NON_ROOT, "0.34.0", True),
        (ROOT_SHARD_KUBECONFIG_FLAG, "0.34.0", Role.NON_ROOT, "0.34.0", False),
        (ROOT_SHARD_KUBECONFIG_FLAG, "0.34.0-rc.1", Role.NON_ROOT, "0.34.0", False),
        (ROOT_SHARD_KUBECONFIG_FLAG, "0.34.0-rc.1", Role.NON_ROOT, "0.34.0-rc.2", True),
        (ROOT_SHARD_KUBECONFIG_FLAG, "0.34.0+build.1", Role.NON_ROOT, "0.34.0", False),
        (ROOT_SHARD_KUBECONFIG_FLAG, "0.33.0", Role.NON_ROOT, "0.34.0", True),
        (ROOT_SHARD_KUBECONFIG_FLAG, "0.34.1", Role.NON_ROOT, "0.34.0", False),
        (ROOT_SHARD_KUBECONFIG_FLAG, "0.32.3", Role.ROOT, "0.34.0", False),
        (ROOT_SHARD_KUBECONFIG_FLAG, "0.32.3", Role.NON_ROOT, "0.32.2", False),
        (ROOT_SHARD_KUBECONFIG_FLAG, "0.33.5", Role.NON_ROOT, "0.34.0", True),
        (CACHE_KUBECONFIG_FLAG, "0.31.0", Role.NON_ROOT, "0.34.0", True),
        (CACHE_KUBECONFIG_FLAG, "0.34.0", Role.ROOT, "0.34.0", True),
        (CACHE_KUBECONFIG_FLAG, "0.26.0", Role.NON_ROOT, "0.34.0", False),
        # ~0.29.2 || ~0.30.2 || >=0.31.0: backports to earlier minors from a patch release on.
        (CACHE_CLIENT_CA_FLAG, "0.29.1", Role.CACHE_SERVER, "0.34.0", False),
        (CACHE_CLIENT_CA_FLAG, "0.29.2", Role.CACHE_SERVER, "0.34.0", True),
        (CACHE_CLIENT_CA_FLAG, "0.29.2-rc.1", Role.CACHE_SERVER, "0.34.0", True),
        (CACHE_CLIENT_CA_FLAG, "0.29.9", Role.CACHE_SERVER, "0.34.0", True),
        (CACHE_CLIENT_CA_FLAG, "0.30.0", Role.CACHE_SERVER, "0.34.0", False),
        (CACHE_CLIENT_CA_FLAG, "0.30.2", Role.CACHE_SERVER, "0.34.0", True),
        (CACHE_CLIENT_CA_FLAG, "0.31.0", Role.CACHE_SERVER, "0.34.0", True),
        (CACHE_CLIENT_CA_FLAG, "1.0.0", Role.CACHE_SERVER, "0.34.0", True),
        (CACHE_CLIENT_CA_FLAG, "0.28.0", Role.CACHE_SERVER, "0.34.0", False),
        (CACHE_CLIENT_CA_FLAG, "0.31.0", Role.ROOT, "0.34.0", False),
    ],
)
def test_flag_gates(flag: str, version: str, role: Role, release: str, expected: bool) -> None:
    assert flag_applies(flag, V(version), role, V(release)) is expected


def test_ignores_root_shard_flag_follows_the_gate() -> None:
    assert ignores_root_shard_flag(V("0.34.0"), V("0.34.0"))
    assert not ignores_root_shard_flag(V("0.32.3"), V("0.34.0"))


def test_unknown_flag_is_an_error() -> None:
    with pytest.raises(KeyError):
        flag_applies("--nope", V("0.34.0"), Role.ROOT, V("0.34.0"))


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, DEFAULT_DEPRECATING_RELEASE),
        ({DEPRECATING_RELEASE_ENV: ""}, DEFAULT_DEPRECATING_RELEASE),
        ({DEPRECATING_RELEASE_ENV: "0.34.0"}, V("0.34.0")),
    ],
)
def test_release_from_env(environ: dict[str, str], expected: Version) -> None:
    assert deprecating_release_from_env(environ) == expected


def test_release_from_env_rejects_garbage() -> None:
    with pytest.raises(InvalidVersionError):
        deprecating_release_from_env({DEPRECATING_RELEASE_ENV: "v0.34"})
