"""The ``kcp-shard-operator`` command line: parses arguments and dispatches.

Each sub-command lives in its own module of this package exposing ``register``.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from importlib import metadata
from typing import Any

from kcp_shard_operator.cli import (
    apireference,
    backup,
    cleanup,
    crd,
    kubeconfig,
    migrate,
    plan,
    render,
    run,
)

DISTRIBUTION = "kcp-shard-operator"


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        try:
            version = metadata.version(DISTRIBUTION)
        except metadata.PackageNotFoundError:
            parser.exit(2, f"error: the {DISTRIBUTION} distribution is not installed\n")
        sys.stdout.write(f"{version}\n")
        parser.exit()


class HelpFormatter(argparse.HelpFormatter):
    """Wraps a description or epilog line by line, so that its lists stay lists: a line
    indented by spaces keeps its indent, and its continuation lines go two spaces deeper."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = []
        for line in text.splitlines():
            body = line.lstrip(" ")
            margin = indent + line[: len(line) - len(body)]
            hanging = margin + "  " if margin != indent else margin
            lines.append(
                textwrap.fill(
                    body,
                    width,
                    initial_indent=margin,
                    subsequent_indent=hanging,
                    break_on_hyphens=False,
                )
            )
        return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """A sub-command's parser, with the :class:`HelpFormatter`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(formatter_class=HelpFormatter, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kcp-shard-operator",
        description="Run and upgrade sharded kcp on Kubernetes.",
        epilog="'kcp-shard-operator COMMAND --help' says what a command reads and writes.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    modules = (run, render, plan, crd, apireference, migrate, cleanup, kubeconfig, backup)
    for module in modules:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = args.handler
    code: int = handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
