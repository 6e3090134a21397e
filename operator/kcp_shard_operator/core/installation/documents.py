"""Reading Shard, CacheServer, FrontProxy and VirtualWorkspaceServer objects out of
multi-document YAML (pure)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml

from kcp_shard_operator.constants import (
    CACHE_SERVER_API_VERSION,
    CACHE_SERVER_KIND,
    FRONT_PROXY_API_VERSION,
    FRONT_PROXY_KIND,
    SHARD_API_VERSION,
    SHARD_KIND,
    VIRTUAL_WORKSPACES_API_VERSION,
    VIRTUAL_WORKSPACES_KIND,
)
from kcp_shard_operator.core.api.model import SpecError
from kcp_shard_operator.core.cacheserver.spec import CacheServer, parse_cache_server
from kcp_shard_operator.core.frontproxy.spec import FrontProxy, parse_front_proxy
from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.core.shard.spec import Shard, parse_shard
from kcp_shard_operator.core.virtualworkspaces.spec import (
    VirtualWorkspaceServer,
    parse_virtual_workspace_server,
)


@dataclass(frozen=True)
class ShardProblem:
    """A Shard document that could not be used, with a one-line reason."""

    label: str
    problem: str
    kind: str = SHARD_KIND

    def __str__(self) -> str:
        return f"{self.kind} {self.label}: {self.problem}"


def _label(doc: Any) -> str:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        return "<unnamed>"
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or '<unnamed>'}"


def is_shard(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and doc.get("kind") == SHARD_KIND
        and doc.get("apiVersion") == SHARD_API_VERSION
    )


def load_shards(
    texts: Iterable[str], deprecating_release: Version
) -> tuple[list[Shard], list[ShardProblem]]:
    """Every Shard in ``texts`` (other kinds are ignored), and the invalid ones."""
    shards: list[Shard] = []
    problems: list[ShardProblem] = []
    for text in texts:
        for doc in yaml.safe_load_all(text):
            if not is_shard(doc):
                continue
            try:
                shards.append(parse_shard(doc, deprecating_release))
            except SpecError as err:
                problems.append(ShardProblem(_label(doc), str(err)))
    return shards, problems


T = TypeVar("T")


def _load(
    texts: Iterable[str], kind: str, api_version: str, parse: Callable[[Any], T]
) -> tuple[list[T], list[ShardProblem]]:
    """Every object of ``kind`` in ``texts`` (other kinds are ignored), and the invalid ones."""
    found: list[T] = []
    problems: list[ShardProblem] = []
    for text in texts:
        for doc in yaml.safe_load_all(text):
            if not isinstance(doc, dict) or (doc.get("kind"), doc.get("apiVersion")) != (
                kind,
                api_version,
            ):
                continue
            try:
                found.append(parse(doc))
            except SpecError as err:
                problems.append(ShardProblem(_label(doc), str(err), kind))
    return found, problems


def load_cache_servers(texts: Iterable[str]) -> tuple[list[CacheServer], list[ShardProblem]]:
    """Every CacheServer in ``texts``, and the invalid ones."""
    return _load(texts, CACHE_SERVER_KIND, CACHE_SERVER_API_VERSION, parse_cache_server)


def load_front_proxies(texts: Iterable[str]) -> tuple[list[FrontProxy], list[ShardProblem]]:
    """Every FrontProxy in ``texts``, and the invalid ones."""
    return _load(texts, FRONT_PROXY_KIND, FRONT_PROXY_API_VERSION, parse_front_proxy)


def load_virtual_workspace_servers(
    texts: Iterable[str],
) -> tuple[list[VirtualWorkspaceServer], list[ShardProblem]]:
    """Every VirtualWorkspaceServer in ``texts``, and the invalid ones."""
    return _load(
        texts,
        VIRTUAL_WORKSPACES_KIND,
        VIRTUAL_WORKSPACES_API_VERSION,
        parse_virtual_workspace_server,
    )


def root_of(shard: Shard, shards: Iterable[Shard]) -> Shard | None:
    ref = shard.spec.root_shard_ref
    return None if ref is None else named(ref.name, shard.namespace, shards)


def named(name: str, namespace: str, shards: Iterable[Shard]) -> Shard | None:
    """The Shard ``namespace/name`` among ``shards``."""
    for candidate in shards:
        if candidate.name == name and candidate.namespace == namespace:
            return candidate
    return None
