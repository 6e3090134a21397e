"""A Shard whose rendering carries a config hash that YAML 1.2 reads as a number."""

from __future__ import annotations

import re
from typing import Any

from kcp_shard_operator.core.api.meta import HASH_ANNOTATION
from kcp_shard_operator.core.kcp.versions import DEFAULT_DEPRECATING_RELEASE
from kcp_shard_operator.core.shard.pki import with_issued
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.spec import parse_shard

NUMERIC = re.compile(r"^[0-9]+(e[0-9]+)?$")


def numeric_hash_shard(namespace: str) -> tuple[dict[str, Any], str]:
    """A root Shard object and the digits-only (or ``<digits>e<digits>``) hash it renders.

    Searched for, so that it keeps working when the rendering changes.
    """
    for i in range(200_000):
        obj: dict[str, Any] = {
            "apiVersion": "kcpshard.dev/v1alpha1",
            "kind": "Shard",
            "metadata": {"name": f"hash-{i}", "namespace": namespace},
            "spec": {"version": "0.34.0", "replicas": 1},
        }
        shard = parse_shard(obj, DEFAULT_DEPRECATING_RELEASE)
        # As `render` does: with the references to the Secrets the operator would issue a new Shard.
        filled = with_issued(shard, None, service_account_key=True)
        for child in render_shard(filled, None, DEFAULT_DEPRECATING_RELEASE).objects:
            digest = child["metadata"]["annotations"][HASH_ANNOTATION]
            if NUMERIC.match(digest):
                return obj, digest
    raise AssertionError("no Shard with a numeric-looking config hash found")
