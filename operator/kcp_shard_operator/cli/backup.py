"""``kcp-shard-operator backup``, ``backups`` and ``restore``: ask the operator for a backup of a
Shard now and wait for its outcome; list the verified backups the Shards' statuses record;
ask the operator to restore a Shard from one of them and wait until it is done.

``backup`` sets the annotation the operator answers (kcpshard.dev/backup) to a new value and
waits until the status says it handled that value; the snapshot itself is the operator's.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Callable
from typing import Any

from kcp_shard_operator.cli.backupclaim import list_claim
from kcp_shard_operator.cli.options import add_cluster_options, cluster_credentials
from kcp_shard_operator.cli.restoreinstallation import run_installation, write
from kcp_shard_operator.constants import SHARD_API_VERSION, SHARD_KIND
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.listing import LISTING_NAME
from kcp_shard_operator.core.backup.manifest import IMPORTED_FROM
from kcp_shard_operator.core.backup.record import BACKED_UP
from kcp_shard_operator.core.backup.restore import RESTORE_ANNOTATION
from kcp_shard_operator.core.backup.spec import BACKUP_ANNOTATION, DEFAULT_BACKUP_IMAGE
from kcp_shard_operator.core.status.conditions import condition
from kcp_shard_operator.kube import credentials
from kcp_shard_operator.kube.client import APIError, Kube, error_message
from kcp_shard_operator.kube.kubeconfig import CredentialsError

DEFAULT_NAMESPACE = "default"
POLL_SECONDS = 2.0
ENDED = ("Done", "Failed", "Refused")
COLUMNS = (
    "SHARD",
    "NAME",
    "TIME",
    "TRIGGER",
    "KCP",
    "SIZE",
    "KEYS",
    "TARGET",
    "PATH",
    "IMPORTED-FROM",
)
"""TARGET: the claim, or s3://<bucket>; PATH: the file on the claim, or the object's key."""


def register(commands: Any) -> None:
    backup = commands.add_parser(
        "backup",
        help="take a backup of a Shard's etcd now and wait for it",
        description="Ask the operator for a backup of the Shard's embedded etcd now "
        "(spec.backup must be set): a snapshot from the running kcp, verified, on the claim "
        "of spec.backup.claimRef or uploaded to the bucket of spec.backup.s3. Waits until the "
        "operator has answered.",
        epilog=f"""reads:
  the cluster ({credentials.SOURCES}): the Shard NAME and its status
writes:
  the annotation {BACKUP_ANNOTATION} of the Shard (a new value: the time of the request)
exit codes:
  0  the backup was taken and verified (printed as backups prints it)
  1  it failed (the condition BackedUp's reason and message), or no answer in --timeout""",
    )
    backup.add_argument("shard", metavar="NAME", help="name of the Shard")
    _namespace(backup)
    backup.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds to wait for the outcome (default: 900)",
    )
    add_cluster_options(backup)
    backup.set_defaults(handler=run_backup)

    listing = commands.add_parser(
        "backups",
        help="list the verified backups of the Shards, or those on a backup claim",
        description="List the verified backups the Shards' statuses record, newest first. "
        "With --claim: the backups whose manifests lie on that backup claim, without a Shard "
        "(a claim left from a deleted Shard), read by a short-lived pod that mounts it "
        "read-only.",
        epilog=f"""examples:
  kcp-shard-operator backups -n NS
  kcp-shard-operator backups --claim kcp-backups -n NS
reads:
  the cluster ({credentials.SOURCES}): the Shard NAME, or every Shard of the namespace;
  with --claim, the PersistentVolumeClaim and the log of the pod it runs
writes:
  the table on stdout; a manifest that cannot be used: a warning on stderr
  naming the file and the field; nothing in the cluster without --claim
  with --claim, a pod {LISTING_NAME}-<random> on the backup image
  (non-root, read-only root filesystem, the claim mounted read-only),
  deleted once its log is read, also on failure or Ctrl-C
exit codes:
  0  listed (a claim without manifests: one line on stderr)
  1  no such Shard or claim, or the pod failed or did not end in --timeout""",
    )
    listing.add_argument("shard", metavar="NAME", nargs="?", help="name of a Shard (default: all)")
    listing.add_argument(
        "--claim",
        metavar="CLAIM",
        help="list the backups on this PersistentVolumeClaim from their manifests instead",
    )
    listing.add_argument(
        "--image",
        default=DEFAULT_BACKUP_IMAGE,
        help=f"with --claim: the image of the pod (default: {DEFAULT_BACKUP_IMAGE})",
    )
    listing.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="with --claim: seconds to wait for the pod (default: 300)",
    )
    _namespace(listing)
    add_cluster_options(listing)
    listing.set_defaults(handler=run_backups)

    restore = commands.add_parser(
        "restore",
        help="restore a Shard, or a whole installation, in place from backups and wait for it",
        description="Ask the operator to restore the Shard's embedded etcd from one of its "
        "verified backups (status.backups; on a Shard made again, one whose manifest lies on "
        "its backup claim or in its bucket): it stops the shard, restores the backup into its "
        "claim with a Job (a backup in a bucket downloaded first and its sha256 checked; the "
        "replaced data kept aside on the claim), and starts the kcp "
        "version the backup was taken with, which spec.version must name already. Everything "
        "the shard stored after the backup is replaced. With --installation ROOT: the root "
        "Shard and every Shard naming it, from backups of one point in time (the root records "
        "which shard holds each workspace): by default the newest backups taken before a "
        "minor upgrade (trigger BeforeUpgrade), one per shard; the root starts first, the "
        "others once it runs on its restored data.",
        epilog=f"""examples:
  kcp-shard-operator restore root -n NS --backup root-20261207T114627Z
  kcp-shard-operator restore --installation root -n NS --set-version
reads:
  the cluster ({credentials.SOURCES}): the Shard NAME and its status; with
  --installation, every Shard of the namespace
writes:
  the annotation {RESTORE_ANNOTATION} of the Shard (the backup's name); with --set-version
  also spec.version (and spec.image.tag, when set) of each Shard whose version is not its
  backup's, in the same write, never without the flag
  stdout: each phase of the restore as the operator records it, with its
  message and the seconds since the request
exit codes:
  0  restored: kcp runs on the backup's data (with --installation: every Shard Ready)
  1  refused or failed (the condition Restored's message), or no end in --timeout""",
    )
    restore.add_argument("shard", metavar="NAME", nargs="?", help="name of the Shard")
    restore.add_argument(
        "--installation",
        metavar="ROOT",
        help="restore the root Shard ROOT and every Shard naming it, from backups of one point",
    )
    restore.add_argument(
        "--backup",
        action="append",
        help="name of the backup (kcp-shard-operator backups); with --installation: the "
        "root's backup naming the point (default: its newest BeforeUpgrade backup), and "
        "repeated, another shard's backup of that moment",
    )
    restore.add_argument(
        "--set-version",
        action="store_true",
        help="with --installation: set spec.version (and spec.image.tag, when set) of each "
        "Shard to the kcp its backup was taken with (refused without it when they differ)",
    )
    _namespace(restore)
    restore.add_argument(
        "--timeout", type=float, default=900.0, help="seconds to wait for the end (default: 900)"
    )
    add_cluster_options(restore)
    restore.set_defaults(handler=run_restore)


def _namespace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-n",
        "--namespace",
        default=None,
        help=f"namespace of the Shard (default: the context's namespace, else {DEFAULT_NAMESPACE})",
    )


def _connect(args: argparse.Namespace) -> tuple[Kube, str]:
    try:
        cluster = cluster_credentials(args)
    except CredentialsError as err:
        raise SystemExit(f"error: {err}") from None
    return Kube(cluster), args.namespace or cluster.namespace or DEFAULT_NAMESPACE


def _shard(kube: Kube, namespace: str, name: str) -> JSON:
    found = kube.get(SHARD_API_VERSION, SHARD_KIND, namespace, name)
    if found is None:
        raise SystemExit(f"error: Shard {name!r} not found in {namespace}")
    return found


def imported_from(entry: JSON) -> str:
    """The Shard (``namespace/name``) an entry imported from its manifest was taken of, ``-``
    for a backup the Shard took itself."""
    origin = entry.get(IMPORTED_FROM)
    if not isinstance(origin, dict):
        return "-"
    return f"{origin.get('namespace', '')}/{origin.get('name', '')}"


def row(shard: str, entry: JSON) -> tuple[str, ...]:
    """The line ``backups`` prints of the backup ``entry`` of Shard ``shard``."""
    in_bucket = bool(entry.get("key"))
    return (
        shard,
        *(
            str(entry.get(key, ""))
            for key in ("name", "time", "trigger", "kcpVersion", "size", "keys")
        ),
        f"s3://{entry.get('bucket', '')}" if in_bucket else str(entry.get("claim", "")),
        str(entry["key"]) if in_bucket else str(entry.get("path", "")),
        imported_from(entry),
    )


def rows(shards: list[JSON]) -> list[tuple[str, ...]]:
    """One row per backup of each Shard, as ``backups`` prints them."""
    return [
        row(str(obj["metadata"]["name"]), entry)
        for obj in shards
        for entry in (obj.get("status") or {}).get("backups") or []
    ]


def table(found: list[tuple[str, ...]]) -> str:
    lines = [COLUMNS, *found]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "".join(
        "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        + "\n"
        for line in lines
    )


def run_backups(args: argparse.Namespace) -> int:
    if args.claim and args.shard:
        raise SystemExit("error: name a Shard or --claim, not both")
    kube, namespace = _connect(args)
    if args.claim:
        return _claim_backups(kube, namespace, args.claim, args.image, args.timeout)
    try:
        if args.shard:
            shards = [_shard(kube, namespace, args.shard)]
        else:
            shards = kube.list(SHARD_API_VERSION, SHARD_KIND, namespace)
    except APIError as err:
        raise SystemExit(f"error: {error_message(err)}") from None
    sys.stdout.write(table(rows(shards)))
    return 0


def _claim_backups(kube: Kube, namespace: str, claim: str, image: str, timeout: float) -> int:
    try:
        listing = list_claim(kube, namespace, claim, image, timeout)
    except APIError as err:
        raise SystemExit(f"error: {error_message(err)}") from None
    for unusable in listing.unusable:
        sys.stderr.write(f"warning: manifest {unusable}\n")
    if not listing.backups:
        if not listing.unusable:
            sys.stderr.write(
                f"no backup manifests on PersistentVolumeClaim {claim} in {namespace}\n"
            )
        return 0
    sys.stdout.write(table([row(found.shard, found.entry) for found in listing.backups]))
    return 0


def run_backup(args: argparse.Namespace) -> int:
    kube, namespace = _connect(args)
    token = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    try:
        obj = _shard(kube, namespace, args.shard)
        if not (obj.get("spec") or {}).get("backup"):
            raise SystemExit(f"error: Shard {args.shard!r} has no spec.backup: nowhere to write")
        kube.annotate(
            SHARD_API_VERSION, SHARD_KIND, namespace, args.shard, {BACKUP_ANNOTATION: token}
        )
        deadline = time.monotonic() + args.timeout
        while True:
            obj = _shard(kube, namespace, args.shard)
            status = obj.get("status") or {}
            if (status.get("backup") or {}).get("lastRequest") == token:
                break
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"error: no answer to backup request {token} within {args.timeout:.0f} s "
                    "(is the shard Ready, its backup sidecar running?)"
                )
            time.sleep(POLL_SECONDS)
    except APIError as err:
        raise SystemExit(f"error: {error_message(err)}") from None
    backed_up = condition(status, BACKED_UP) or {}
    if backed_up.get("status") != "True":
        raise SystemExit(f"error: {backed_up.get('reason')}: {backed_up.get('message')}")
    sys.stdout.write(table(rows([obj])[:1]))
    return 0


def run_restore(args: argparse.Namespace) -> int:
    if (args.installation is None) == (args.shard is None):
        raise SystemExit("error: name a Shard (NAME --backup BACKUP) or --installation ROOT")
    if args.installation is None and len(args.backup or []) != 1:
        raise SystemExit("error: restore NAME takes one --backup")
    if args.set_version and args.installation is None:
        raise SystemExit("error: --set-version goes with --installation")
    kube, namespace = _connect(args)
    if args.installation is not None:
        try:
            return run_installation(kube, namespace, args, write)
        except APIError as err:
            raise SystemExit(f"error: {error_message(err)}") from None
    (backup,) = args.backup
    try:
        obj = _shard(kube, namespace, args.shard)
        restore = (obj.get("status") or {}).get("restore") or {}
        if restore.get("request") == backup:
            # The annotation answers each value once: clear it so that it asks again.
            kube.annotate(
                SHARD_API_VERSION, SHARD_KIND, namespace, args.shard, {RESTORE_ANNOTATION: None}
            )
            _wait(kube, namespace, args.shard, args.timeout, lambda r: r.get("request") != backup)
        kube.annotate(
            SHARD_API_VERSION, SHARD_KIND, namespace, args.shard, {RESTORE_ANNOTATION: backup}
        )
        ended = _wait(
            kube,
            namespace,
            args.shard,
            args.timeout,
            lambda r: r.get("request") == backup and r.get("phase") in ENDED,
            phases(args.shard, backup, write),
        )
    except APIError as err:
        raise SystemExit(f"error: {error_message(err)}") from None
    if ended.get("phase") != "Done":
        raise SystemExit(f"error: restore {ended.get('phase')}: {ended.get('message')}")
    return 0


def phases(name: str, backup: str, out: Callable[[str], object]) -> Callable[[JSON], None]:
    """What prints each phase of the restore of Shard ``name`` from ``backup`` once, as the
    operator records it in ``status.restore``, with the seconds since the request."""
    started = time.monotonic()
    seen = {"phase": ""}

    def show(record: JSON) -> None:
        phase = str(record.get("phase") or "")
        if record.get("request") != backup or phase in ("", seen["phase"]):
            return
        seen["phase"] = phase
        at = time.monotonic() - started
        out(f"{at:6.0f}s  {name}: {phase}: {record.get('message', '')}\n")

    return show


def _wait(
    kube: Kube,
    namespace: str,
    name: str,
    timeout: float,
    done: Callable[[JSON], bool],
    seen: Callable[[JSON], None] = lambda _: None,
) -> JSON:
    """``status.restore`` of the Shard once ``done`` says so; each one read passed to ``seen``."""
    deadline = time.monotonic() + timeout
    while True:
        restore = (_shard(kube, namespace, name).get("status") or {}).get("restore") or {}
        seen(restore)
        if done(restore):
            return dict(restore)
        if time.monotonic() > deadline:
            raise SystemExit(
                f"error: the restore of {name} did not end within {timeout:.0f} s "
                f"(status.restore: {restore.get('phase')}: {restore.get('message')})"
            )
        time.sleep(POLL_SECONDS)
