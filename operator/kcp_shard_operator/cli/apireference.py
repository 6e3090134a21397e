"""``kcp-shard-operator api-reference``: print the API reference (Markdown) of the CRDs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kcp_shard_operator.core.api.reference import api_reference
from kcp_shard_operator.core.installation.crds import crds


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "api-reference",
        help="print the API reference (Markdown) generated from the CRDs, as docs/reference/api.md",
        description="Print the API reference of Shard, CacheServer and FrontProxy as Markdown, "
        "generated from the same CRDs as `crd` (make generate writes it to docs/reference/api.md).",
        epilog="reads:\n  nothing\nwrites:\n  the API reference as Markdown on stdout; nothing in "
        "the cluster",
    )
    parser.set_defaults(handler=run)


def run(_: argparse.Namespace) -> int:
    sys.stdout.write(api_reference(crds()))
    return 0
