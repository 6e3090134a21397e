"""``kcp-shard-operator render``: print the objects the operator would apply."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from kcp_shard_operator.cliopts import add_deprecating_release_option, deprecating_release
from kcp_shard_operator.documents import ShardProblem, load_shards, root_of
from kcp_shard_operator.model import SpecError
from kcp_shard_operator.render import render_shard
from kcp_shard_operator.versions import InvalidVersionError


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
    try:
        release = deprecating_release(args)
        texts = [_read(path) for path in args.filename]
        shards, problems = load_shards(texts, release)
    except (InvalidVersionError, OSError, yaml.YAMLError) as err:
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
