"""Shared helpers for unit tests."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kcp_shard_operator.core.kcp.versions import DEFAULT_DEPRECATING_RELEASE
from kcp_shard_operator.core.shard.spec import Shard, parse_shard

RELEASE = DEFAULT_DEPRECATING_RELEASE


NO_PKI: dict[str, Any] = {"pki": {"issue": False}}
"""A spec field that keeps the operator from issuing anything for the Shard."""


def shard_object(name: str = "root", **spec: Any) -> dict[str, Any]:
    """A Shard object with a valid minimal spec, overridden by ``spec``."""
    base: dict[str, Any] = {"version": "0.34.0", "replicas": 1}
    base.update(spec)
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "Shard",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
        "spec": base,
    }


def non_root_object(name: str = "shard-1", **spec: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "rootShardRef": {"name": "root"},
        "cache": {"kubeconfigSecretRef": {"name": "cache"}},
        "rootShardKubeconfigSecretRef": {"name": "root-admin"},
    }
    fields.update(spec)
    return shard_object(name, **fields)


def make(obj: dict[str, Any]) -> Shard:
    return parse_shard(copy.deepcopy(obj), RELEASE)


@pytest.fixture
def root() -> Shard:
    return make(shard_object())
