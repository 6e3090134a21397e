"""``kcp-shard-operator cleanup-identitycache``: delete the stale ConfigMap on one shard.

For installations the operator does not manage. Exits 0 when the ConfigMap is gone or was
never there (or, with ``--dry-run``, would be deleted), 1 otherwise, with the reason on
stderr. A root shard is detected by the ``root`` logical cluster it serves and refused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kcp_shard_operator.core.pki.issuance import SHARD_BASE_CONTEXT
from kcp_shard_operator.identitycache.client import clean_with_kubeconfig_file
from kcp_shard_operator.identitycache.policy import (
    CONFIGMAP_NAME,
    ROOT_CLUSTER,
    SYSTEM_SHARD_CLUSTER,
    Outcome,
    Result,
)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "cleanup-identitycache",
        help=f"delete the stale {CONFIGMAP_NAME} ConfigMap from a non-root kcp shard",
        description=(
            f"Delete ConfigMap default/{CONFIGMAP_NAME} from the {SYSTEM_SHARD_CLUSTER} logical "
            "cluster of one non-root kcp shard, after its upgrade to a kcp release that no "
            "longer uses it. Needs group system:masters on that shard."
        ),
        epilog=f"""reads:
  the --kubeconfig file (and the files it names; its exec plugin runs); on the shard: gets \
the LogicalCluster of logical cluster {ROOT_CLUSTER} (a shard that serves it is a root shard, \
refused) and the ConfigMap
writes:
  on the shard, unless --dry-run: deletes the ConfigMap; nothing else
  what was found and done on stdout, errors on stderr
exit codes:
  0  the ConfigMap is gone, was never there, or (--dry-run) would be deleted
  1  otherwise: a root shard, an unusable kubeconfig, kcp refused or did not answer""",
    )
    parser.add_argument(
        "--kubeconfig", required=True, type=Path, help="kubeconfig of the shard itself"
    )
    parser.add_argument(
        "--context",
        default=None,
        help=f"context to use (default: {SHARD_BASE_CONTEXT} if present, else the current one)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="report what would be deleted, change nothing"
    )
    parser.set_defaults(handler=run)


def report(outcome: Outcome) -> tuple[list[str], list[str]]:
    """Lines for stdout and stderr describing ``outcome``."""
    out: list[str] = []
    if outcome.found is not None:
        out.append(f"found {outcome.found.describe()}")
    if outcome.ok:
        out.append(outcome.message)
        return out, []
    return out, [f"error ({outcome.result.value}): {outcome.message}"]


def run(args: argparse.Namespace) -> int:
    path: Path = args.kubeconfig
    try:
        raw = path.read_bytes()
    except OSError as err:
        print(f"error: cannot read {path}: {err.strerror}", file=sys.stderr)
        return 1
    outcome = clean_with_kubeconfig_file(
        raw, args.context, path.resolve().parent, dry_run=args.dry_run
    )
    lines, errors = report(outcome)
    for line in lines:
        print(line)
    for line in errors:
        print(line, file=sys.stderr)
    if outcome.result is Result.NOT_PRESENT:
        print("nothing to do")
    return 0 if outcome.ok else 1
