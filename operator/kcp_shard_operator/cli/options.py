"""Command-line options shared by several commands."""

from __future__ import annotations

import argparse
import os

from kcp_shard_operator.constants import DEPRECATING_RELEASE_ENV
from kcp_shard_operator.core.kcp.versions import (
    DEFAULT_DEPRECATING_RELEASE,
    Version,
    deprecating_release_from_env,
)


def add_deprecating_release_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root-shard-flag-removed-in",
        metavar="X.Y.Z",
        default=None,
        help="first kcp release that ignores --root-shard-kubeconfig-file "
        f"(default: ${DEPRECATING_RELEASE_ENV}, else {DEFAULT_DEPRECATING_RELEASE})",
    )


def deprecating_release(args: argparse.Namespace) -> Version:
    """The option's release, else the environment's; raises ``InvalidVersionError``."""
    chosen: str | None = args.root_shard_flag_removed_in
    return Version.parse(chosen) if chosen else deprecating_release_from_env(os.environ)
