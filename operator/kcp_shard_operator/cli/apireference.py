"""``kcp-shard-operator api-reference``: print the API reference (Markdown) of the CRDs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kcp_shard_operator.core.apireference import api_reference
from kcp_shard_operator.core.crd import crds


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "api-reference",
        help="print the API reference (Markdown) generated from the CRDs, as docs/reference/api.md",
    )
    parser.set_defaults(handler=run)


def run(_: argparse.Namespace) -> int:
    sys.stdout.write(api_reference(crds()))
    return 0
