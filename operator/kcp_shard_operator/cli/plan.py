"""``kcp-shard-operator plan``: what an upgrade will do, before it is done.

Against the live cluster it only reads (Shards, CacheServers, FrontProxies and their
Deployments); on files (``-f``) it takes each as running its spec. The steps come from the
operator's own planner (:mod:`kcp_shard_operator.core.installation.steps`,
:mod:`kcp_shard_operator.core.installation.plan`), so the plan is what the operator does.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from kcp_shard_operator.cli.options import (
    add_cluster_options,
    add_deprecating_release_option,
    cluster_credentials,
    deprecating_release,
)
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
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.cacheserver import names as cacheserver_names
from kcp_shard_operator.core.cacheserver.spec import CacheServer, parse_cache_server
from kcp_shard_operator.core.frontproxy import names as frontproxy_names
from kcp_shard_operator.core.frontproxy.spec import FrontProxy, parse_front_proxy
from kcp_shard_operator.core.installation.documents import (
    is_shard,
    load_cache_servers,
    load_front_proxies,
    load_shards,
    load_virtual_workspace_servers,
)
from kcp_shard_operator.core.installation.plan import (
    Deployments,
    as_deployed,
    plan_installation,
    served_shards,
)
from kcp_shard_operator.core.installation.steps import (
    INVALID,
    REFUSED,
    Cleanup,
    Step,
    TargetError,
    as_rolled_out,
    check_target,
    plan_upgrade,
)
from kcp_shard_operator.core.kcp.versions import InvalidVersionError, Version
from kcp_shard_operator.core.shard.spec import Shard, parse_shard
from kcp_shard_operator.core.virtualworkspaces import names as virtualworkspaces_names
from kcp_shard_operator.core.virtualworkspaces.spec import (
    VirtualWorkspaceServer,
    parse_virtual_workspace_server,
)
from kcp_shard_operator.identitycache import policy
from kcp_shard_operator.kube import credentials
from kcp_shard_operator.kube.client import APIError, Kube, error_message
from kcp_shard_operator.kube.kubeconfig import CredentialsError

T = TypeVar("T")
FORMATS = ("table", "json", "yaml")
COLUMNS = (
    "ORDER",
    "KIND",
    "NAME",
    "NOW",
    "AFTER",
    "FLAGS-ADDED",
    "FLAGS-DROPPED",
    "IDENTITY-CACHE",
    "OUTCOME",
)
YAML_SUFFIXES = (".yaml", ".yml", ".json")
EXIT_ERROR = 2
EXIT_REFUSED = 3
BLOCKED = (REFUSED, INVALID)
"""The outcomes ``--exit-code`` reports: what the operator refuses, not what waits."""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "plan",
        help="show what an upgrade will do: order, flags, identity-cache cleanup, refusals",
        description="Show, per CacheServer, Shard and FrontProxy and in the order the "
        "operator rolls them, the kcp version now and after, the flags added and dropped, "
        "whether the stale identity-cache ConfigMap will be deleted, what each waits for and "
        "what is refused. Changes nothing.",
        epilog=f"""reads:
  without -f, the cluster ({credentials.SOURCES}): lists Shards, CacheServers and \
FrontProxies in each -n namespace (without -n: the context's namespace if it names one, else \
every namespace; -A: every namespace), gets the Deployment of each
  with -f, the files instead (of a directory, its .yaml, .yml and .json files; '-': standard \
input)
writes:
  the plan on stdout (-o), errors on stderr; nothing in the cluster
exit codes:
  0  the plan is printed; without --exit-code, also when a step is refused
  {EXIT_ERROR}  an error, in one line on stderr: a bad option or file, no Shard found, no \
credentials, an API error
  {EXIT_REFUSED}  with --exit-code: the plan is printed and a step is {REFUSED} or {INVALID}""",
    )
    parser.add_argument(
        "--to",
        metavar="VERSION",
        default=None,
        help="set every Shard, CacheServer, VirtualWorkspaceServer and FrontProxy to this kcp "
        "version (default: the specs as they are)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "-f",
        "--filename",
        action="append",
        type=Path,
        help="YAML file or directory with Shards (and CacheServers, FrontProxies), taken as "
        "running their spec "
        "(repeatable; '-' for standard input)",
    )
    source.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="plan the objects of this namespace (repeatable; default: the context's "
        "namespace if it names one, else every namespace)",
    )
    source.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="plan the objects of every namespace",
    )
    add_cluster_options(parser)
    parser.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="table",
        help="table for people, json or yaml (the same fields) for scripts (default: %(default)s)",
    )
    parser.add_argument(
        "--identity-cache-cleanup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="whether the operator deletes the stale identity-cache ConfigMap: its setting "
        "(default: on)",
    )
    parser.add_argument(
        "--exit-code",
        action="store_true",
        help=f"exit {EXIT_REFUSED} when a step is {REFUSED} (as DowngradeRefused, "
        f"RootShardNotFound) or {INVALID}, as the operator would report it; a step that only "
        "waits does not count (default: exit 0 whenever the plan is printed)",
    )
    add_deprecating_release_option(parser)
    parser.set_defaults(handler=run)


def _texts(paths: list[Path]) -> list[str]:
    """The text of each file, of a directory's YAML and JSON files (sorted, as kubectl
    apply -f reads them), or of standard input for '-'."""
    texts = []
    for path in paths:
        if str(path) == "-":
            texts.append(sys.stdin.read())
        elif path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in YAML_SUFFIXES and p.is_file())
            texts += [p.read_text("utf-8") for p in found]
        else:
            texts.append(path.read_text("utf-8"))
    return texts


@dataclass(frozen=True)
class Found:
    """Shards, their Deployments by ``namespace/name``, the CacheServers, FrontProxies and
    VirtualWorkspaceServers, and the Deployments of those by (kind, ``namespace/name``)."""

    objects: list[JSON]
    deployments: dict[str, JSON | None]
    caches: list[CacheServer]
    proxies: list[FrontProxy]
    servers: list[VirtualWorkspaceServer]
    others: Deployments


def _from_files(paths: list[Path], release: Version) -> Found:
    texts = _texts(paths)
    objects = [doc for text in texts for doc in yaml.safe_load_all(text) if is_shard(doc)]
    caches, _ = load_cache_servers(texts)
    proxies, _ = load_front_proxies(texts)
    servers, _ = load_virtual_workspace_servers(texts)
    shards, _ = load_shards(texts, release)
    rolled, deployments = as_rolled_out(objects, release, proxies, servers)
    others = as_deployed(caches, proxies, shards, release, servers)
    return Found(rolled, deployments, caches, proxies, servers, others)


def _parsed(items: list[JSON], parse: Callable[[JSON], T]) -> list[T]:
    """The objects of ``items`` that parse (the operator reports the others itself)."""
    found = []
    for item in items:
        try:
            found.append(parse(item))
        except SpecError:
            continue
    return found


def _namespaces(args: argparse.Namespace, context_namespace: str | None) -> list[str]:
    """The -n namespaces, else the context's unless -A (empty: every namespace)."""
    if args.namespace or args.all_namespaces or context_namespace is None:
        return list(args.namespace)
    return [context_namespace]


def _from_cluster(kube: Kube, namespaces: list[str]) -> Found:
    scopes: list[str | None] = [*namespaces] if namespaces else [None]
    objects: list[JSON] = []
    caches: list[CacheServer] = []
    proxies: list[FrontProxy] = []
    servers: list[VirtualWorkspaceServer] = []
    for namespace in scopes:
        objects += kube.list(SHARD_API_VERSION, SHARD_KIND, namespace)
        listed = kube.list(CACHE_SERVER_API_VERSION, CACHE_SERVER_KIND, namespace)
        caches += _parsed(listed, parse_cache_server)
        listed = kube.list(FRONT_PROXY_API_VERSION, FRONT_PROXY_KIND, namespace)
        proxies += _parsed(listed, parse_front_proxy)
        listed = kube.list(VIRTUAL_WORKSPACES_API_VERSION, VIRTUAL_WORKSPACES_KIND, namespace)
        servers += _parsed(listed, parse_virtual_workspace_server)
    deployments: dict[str, JSON | None] = {}
    for obj in objects:
        meta = obj["metadata"]
        namespace = meta["namespace"]
        found = kube.get("apps/v1", "Deployment", namespace, f"{meta['name']}-kcp")
        deployments[f"{namespace}/{meta['name']}"] = found
    others: dict[tuple[str, str], JSON | None] = {}
    for cache in caches:
        name = cacheserver_names.child_name(cache)
        others[(CACHE_SERVER_KIND, cache.key)] = kube.get(
            "apps/v1", "Deployment", cache.namespace, name
        )
    for proxy in proxies:
        name = frontproxy_names.child_name(proxy)
        others[(FRONT_PROXY_KIND, proxy.key)] = kube.get(
            "apps/v1", "Deployment", proxy.namespace, name
        )
    for server in servers:
        name = virtualworkspaces_names.child_name(server)
        others[(VIRTUAL_WORKSPACES_KIND, server.key)] = kube.get(
            "apps/v1", "Deployment", server.namespace, name
        )
    return Found(objects, deployments, caches, proxies, servers, others)


def _cleanup(release: Version, enabled: bool) -> Cleanup:
    def what(shard: Shard) -> str:
        decision = policy.decide(shard, release, enabled=enabled)
        if decision.action is policy.Action.CLEAN:
            return "deleted after rollout"
        if decision.reason == "RootShard":
            return "-"
        return f"kept ({decision.reason})"

    return what


def _outcome(step: Step) -> str:
    if step.waits_for and step.wave is not None:
        return f"{step.outcome} (waits for {step.waits_for})"
    if step.reason:
        return f"{step.outcome}: {step.reason}"
    return step.outcome


def table(steps: list[Step], target: str | None) -> str:
    rows = [COLUMNS] + [
        (
            str(step.wave) if step.wave is not None else "-",
            step.kind,
            step.key,
            step.now or "-",
            step.after or "-",
            " ".join(step.flags_added) or "-",
            " ".join(step.flags_dropped) or "-",
            step.identity_cache,
            _outcome(step),
        )
        for step in steps
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        + "  "
        + row[-1]
        for row in rows
    ]
    details = [
        f"{step.key}: {text}"
        for step in steps
        for text in ([step.message] if step.message else []) + step.notes
    ]
    heading = (
        f"Plan: every Shard, CacheServer, VirtualWorkspaceServer and FrontProxy set to kcp {target}"
        if target
        else "Plan: the specs as they are"
    )
    return "\n".join([heading, *lines, *(["", *details] if details else [])]) + "\n"


def document(steps: list[Step], target: str | None, release: Version) -> dict[str, Any]:
    return {
        "target": target,
        "rootShardFlagRemovedIn": str(release),
        "steps": [
            {
                "order": step.wave,
                "kind": step.kind,
                "namespace": step.namespace,
                "name": step.name,
                "root": step.root,
                "outcome": step.outcome,
                "now": step.now,
                "after": step.after,
                "flagsAdded": step.flags_added,
                "flagsDropped": step.flags_dropped,
                "waitsFor": step.waits_for,
                "reason": step.reason,
                "message": step.message,
                "identityCache": step.identity_cache,
                "notes": step.notes,
            }
            for step in steps
        ],
    }


def run(args: argparse.Namespace) -> int:
    try:
        release = deprecating_release(args)
        target = None if args.to is None else check_target(args.to)
    except (InvalidVersionError, TargetError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    namespaces: list[str] = []
    try:
        if args.filename:
            found = _from_files(args.filename, release)
        else:
            cluster = cluster_credentials(args)
            namespaces = _namespaces(args, cluster.namespace)
            found = _from_cluster(Kube(cluster), namespaces)
    except (OSError, yaml.YAMLError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except CredentialsError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except APIError as err:
        where = ", ".join(namespaces) or "all namespaces (name some with -n)"
        print(f"error: reading the objects in {where}: {error_message(err)}", file=sys.stderr)
        return EXIT_ERROR
    objects, caches, proxies, servers = found.objects, found.caches, found.proxies, found.servers
    if not objects:
        where = f" in {', '.join(namespaces)} (-A: every namespace)" if namespaces else ""
        print(f"error: no Shard found{where}", file=sys.stderr)
        return EXIT_ERROR
    cleanup = _cleanup(release, args.identity_cache_cleanup)
    shard_steps = plan_upgrade(
        objects,
        found.deployments,
        target,
        release,
        cleanup,
        {c.key for c in caches},
        proxies,
        servers,
    )
    shards = _parsed(objects, lambda obj: parse_shard(obj, release))
    steps = plan_installation(
        shard_steps,
        objects,
        caches,
        proxies,
        found.others,
        target,
        release,
        servers,
        served_shards(shards, proxies, servers),
    )
    if args.output == "json":
        sys.stdout.write(json.dumps(document(steps, target, release), indent=2) + "\n")
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump(document(steps, target, release), sort_keys=False))
    else:
        sys.stdout.write(table(steps, target))
    if args.exit_code and any(step.outcome in BLOCKED for step in steps):
        return EXIT_REFUSED
    return 0
