"""``kcp-shard-operator render``: print the objects the operator would apply."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from kcp_shard_operator.cli.options import add_deprecating_release_option, deprecating_release
from kcp_shard_operator.constants import FRONT_PROXY_KIND, VIRTUAL_WORKSPACES_KIND
from kcp_shard_operator.core.api.model import SpecError
from kcp_shard_operator.core.cacheserver.render import render_cache_server
from kcp_shard_operator.core.frontproxy.names import serving
from kcp_shard_operator.core.frontproxy.render import render_front_proxy
from kcp_shard_operator.core.frontproxy.spec import FrontProxy
from kcp_shard_operator.core.installation.documents import (
    ShardProblem,
    load_cache_servers,
    load_front_proxies,
    load_shards,
    load_virtual_workspace_servers,
    named,
    root_of,
)
from kcp_shard_operator.core.kcp.versions import InvalidVersionError
from kcp_shard_operator.core.shard.pki import with_issued
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.virtualworkspaces.names import serving as serving_shard
from kcp_shard_operator.core.virtualworkspaces.render import render_virtual_workspaces


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "render",
        help="print the objects of each Shard, CacheServer, VirtualWorkspaceServer and "
        "FrontProxy, offline",
        description="Render Shards, CacheServers, VirtualWorkspaceServers and FrontProxies "
        "offline into the objects the operator applies, in the order they roll out "
        "(CacheServers, Shards, VirtualWorkspaceServers, FrontProxies), each "
        "VirtualWorkspaceServer taken as Ready (its shard and the front-proxy use it). The "
        "Secrets the operator would issue (spec.pki) are referenced, not printed.",
        epilog="""reads:
  the files of -f ('-': standard input); nothing in the cluster
writes:
  the objects as YAML on stdout; notes and errors on stderr; nothing in the cluster
exit codes:
  0  every object rendered
  2  an error: a bad option or file, or an object that cannot be rendered (the others are \
still printed)""",
    )
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        type=Path,
        help="YAML file with Shard, CacheServer, VirtualWorkspaceServer and FrontProxy objects "
        "(repeatable; '-' for standard input)",
    )
    add_deprecating_release_option(parser)
    parser.set_defaults(handler=run)


_NOT_A_STRING = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)|0o[0-7]+|0x[0-9a-fA-F]+"
    r"|[Tt]rue|TRUE|[Ff]alse|FALSE|[Nn]ull|NULL|~|)$"
)
"""Plain scalars that YAML 1.2 readers (kubectl's among them) take for a number, bool or null."""


class _Dumper(yaml.SafeDumper):
    """Quotes every string another YAML reader could take for something else."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = '"' if _NOT_A_STRING.match(data) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _represent_str)


def dump_all(documents: list[dict[str, Any]]) -> str:
    """YAML that every reader parses back to ``documents``: a config hash of digits and
    ``e`` (``5965445602761e04``) stays a string."""
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False)


def proxy_label(proxy: FrontProxy) -> str:
    return f"{proxy.namespace}/{proxy.name}"


def _read(path: Path) -> str:
    return sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    try:
        release = deprecating_release(args)
        texts = [_read(path) for path in args.filename]
        shards, problems = load_shards(texts, release)
        caches, cache_problems = load_cache_servers(texts)
        proxies, proxy_problems = load_front_proxies(texts)
        servers, server_problems = load_virtual_workspace_servers(texts)
    except (InvalidVersionError, OSError, yaml.YAMLError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    problems += cache_problems + proxy_problems + server_problems
    documents: list[dict[str, Any]] = []
    filled_shards = {}
    for cache in caches:
        documents.extend(render_cache_server(cache).objects)
    for shard in shards:
        try:
            root = root_of(shard, shards)
            ref = shard.spec.root_shard_ref
            proxy = serving(
                (p for p in proxies if p.namespace == shard.namespace),
                ref.name if ref else shard.name,
            )
            filled_root = None if root is None else with_issued(root, None, proxy=proxy)
            # As for a new Shard: one that runs without the installation's service-account
            # key never gets it (its tokens would no longer verify).
            filled = with_issued(
                shard,
                root,
                service_account_key=True,
                proxy=proxy,
                virtual_workspaces=serving_shard(servers, shard.namespace, shard.name),
            )
            filled_shards[shard.key] = filled
            rendered = render_shard(filled, filled_root, release)
        except SpecError as err:
            problems.append(ShardProblem(shard.key, str(err)))
            continue
        for text in rendered.dropped_args:
            print(
                f"note: Shard {shard.key}: spec.extraArgs: '{text}': deprecated for kcp "
                f"{shard.spec.version} (see migrate-values --explain)",
                file=sys.stderr,
            )
        documents.extend(rendered.objects)
    for server in servers:
        label = f"{server.namespace}/{server.name}"
        served = filled_shards.get(f"{server.namespace}/{server.spec.shard_ref.name}")
        if served is None:
            message = f"Shard {server.spec.shard_ref.name!r} not found or not rendered"
            problems.append(ShardProblem(label, message, VIRTUAL_WORKSPACES_KIND))
            continue
        try:
            documents.extend(render_virtual_workspaces(server, served, release).objects)
        except SpecError as err:
            problems.append(ShardProblem(label, str(err), VIRTUAL_WORKSPACES_KIND))
    for proxy in proxies:
        root = named(proxy.spec.root_shard_ref.name, proxy.namespace, shards)
        if root is None:
            message = f"root Shard {proxy.spec.root_shard_ref.name!r} not found"
            problems.append(ShardProblem(proxy_label(proxy), message, FRONT_PROXY_KIND))
            continue
        try:
            root_server = serving_shard(servers, proxy.namespace, root.name)
            documents.extend(
                render_front_proxy(proxy, root, release, virtual_workspaces=root_server).objects
            )
        except SpecError as err:
            problems.append(ShardProblem(proxy_label(proxy), str(err), FRONT_PROXY_KIND))
    if documents:
        sys.stdout.write(dump_all(documents))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 2 if problems else 0
