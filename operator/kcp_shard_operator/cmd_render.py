"""``kcp-shard-operator render``: print the objects the operator would apply."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from kcp_shard_operator.documents import ShardProblem, load_shards, root_of
from kcp_shard_operator.model import SpecError
from kcp_shard_operator.render import render_shard
from kcp_shard_operator.versions import Version, deprecating_release_from_env


def add_deprecating_release_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root-shard-flag-removed-in",
        metavar="VERSION",
        type=Version.parse,
        default=None,
        help="first kcp release that ignores --root-shard-kubeconfig-file "
        "(default: $KCP_SHARD_ROOT_SHARD_FLAG_REMOVED_IN or 0.33.0)",
    )


def deprecating_release(args: argparse.Namespace) -> Version:
    chosen: Version | None = args.root_shard_flag_removed_in
    return chosen if chosen is not None else deprecating_release_from_env()


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "render",
        help="print the Deployment, Service and PDB of each Shard, offline",
        description="Render Shards offline into the objects the operator applies.",
    )
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        type=Path,
        help="YAML file with Shard objects (repeatable; '-' for standard input)",
    )
    add_deprecating_release_option(parser)
    parser.set_defaults(handler=run)


def _read(path: Path) -> str:
    return sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    release = deprecating_release(args)
    try:
        texts = [_read(path) for path in args.filename]
        shards, problems = load_shards(texts, release)
    except (OSError, yaml.YAMLError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    documents: list[dict[str, Any]] = []
    for shard in shards:
        try:
            rendered = render_shard(shard, root_of(shard, shards), release)
        except SpecError as err:
            problems.append(ShardProblem(shard.key, str(err)))
            continue
        for text in rendered.dropped_args:
            print(
                f"note: Shard {shard.key}: dropped '{text}' from spec.extraArgs "
                f"(kcp {shard.spec.version} ignores it)",
                file=sys.stderr,
            )
        documents.extend(rendered.objects)
    if documents:
        sys.stdout.write(yaml.safe_dump_all(documents, sort_keys=False))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 2 if problems else 0
