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
from kcp_shard_operator.kube import credentials
from kcp_shard_operator.kube.credentials import Credentials


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


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """``--kubeconfig`` and ``--context``, as kubectl takes them."""
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        default=None,
        help="kubeconfig file to use (default: $KUBECONFIG, its files merged; else in a pod its "
        "ServiceAccount; else ~/.kube/config)",
    )
    parser.add_argument(
        "--context",
        default=None,
        help="kubeconfig context to use (default: the current context)",
    )


def cluster_credentials(args: argparse.Namespace) -> Credentials:
    """The credentials ``--kubeconfig`` and ``--context`` name; raises ``CredentialsError``."""
    return credentials.load(args.kubeconfig, args.context)
