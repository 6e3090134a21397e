"""The ``kcp-shard-operator`` command line: parses arguments and dispatches.

Each sub-command lives in its own module of this package exposing ``register``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kcp_shard_operator.cli import (
    apireference,
    cleanup,
    crd,
    kubeconfig,
    migrate,
    plan,
    render,
    run,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kcp-shard-operator",
        description="Run and upgrade sharded kcp on Kubernetes.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (run, render, plan, crd, apireference, migrate, cleanup, kubeconfig):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = args.handler
    code: int = handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
