"""``migrate-values``: rewrite values and manifests off ``--root-shard-kubeconfig-file``.

Reads files, calls :mod:`kcp_shard_operator.migrate.values` and
:mod:`kcp_shard_operator.migrate.shardchart`, writes atomically (temporary file in the
same directory, then rename).
"""

from __future__ import annotations

import argparse
import difflib
import io
import os
import sys
import tempfile
from typing import Any, BinaryIO, TextIO

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from kcp_shard_operator.cli.options import add_deprecating_release_option, deprecating_release
from kcp_shard_operator.core.kcp.versions import InvalidVersionError, Version, explain
from kcp_shard_operator.migrate import chartvalues, shardchart, values

EXIT_OK = 0
EXIT_WOULD_CHANGE = 1
EXIT_ERROR = 2
STDIN = "-"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate-values",
        help="remove deprecated kcp flags from Helm values and manifests",
        description=(
            "Remove --root-shard-kubeconfig-file and the other flags kcp deprecated "
            "(--explain lists them), and what only fed them, from YAML files, keeping "
            "everything else byte for byte; or convert the deprecated kcp 'shard' chart's "
            "values into a Shard manifest (--from-shard-chart)."
        ),
        epilog=f"""reads:
  each PATH ('-': standard input), or the values file of --from-shard-chart; nothing in the \
cluster
writes:
  the migrated YAML on stdout; with --in-place, the files instead (atomically, their mode \
kept); with --diff, a unified diff on stdout; with --from-shard-chart, the Shard on stdout or \
in the -o FILE; with --explain, the table on stdout; what changed, warnings and errors on \
stderr; nothing in the cluster
exit codes:
  {EXIT_OK}  done; with --check, no file would change
  {EXIT_WOULD_CHANGE}  with --check, a file would change
  {EXIT_ERROR}  an error: a bad option, a file that cannot be read, written or migrated (the \
other files are still migrated)""",
    )
    parser.add_argument(
        "paths", nargs="*", metavar="PATH", help="YAML file (repeatable; '-' for standard input)"
    )
    parser.add_argument(
        "--in-place", action="store_true", help="rewrite the files instead of printing them"
    )
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a file would change"
    )
    parser.add_argument(
        "--diff", action="store_true", help="print a unified diff instead of the files"
    )
    parser.add_argument(
        "--prune-mounts",
        action="store_true",
        help="also remove volumeMounts and volumes that only served the flag",
    )
    add_deprecating_release_option(parser)
    parser.add_argument(
        "--from-shard-chart",
        metavar="VALUES.yaml",
        help="convert values of kcp-dev/helm-charts' deprecated 'shard' chart to a Shard",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="with --from-shard-chart: write the Shard here (default: stdout)",
    )
    parser.add_argument(
        "--name",
        help="with --from-shard-chart: the chart's full name, <release>-shard (default: the "
        f"values' fullnameOverride, else {chartvalues.DEFAULT_NAME})",
    )
    parser.add_argument(
        "--kcp-version",
        metavar="X.Y.Z",
        help="the kcp version where a file states none that can be read (e.g. 'tag: main'); "
        "with --from-shard-chart, the Shard's (default: the values' kcp tag)",
    )
    parser.add_argument(
        "--explain", action="store_true", help="print the table of deprecated flags and exit"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    err: TextIO = sys.stderr
    try:
        release = deprecating_release(args)
    except InvalidVersionError as exc:
        print(f"migrate-values: --root-shard-flag-removed-in: {exc}", file=err)
        return EXIT_ERROR
    if args.explain:
        sys.stdout.write(explain(release))
        return EXIT_OK
    kcp_version: Version | None = None
    if args.kcp_version and not args.from_shard_chart:
        try:
            kcp_version = Version.parse(args.kcp_version.removeprefix("v"))
        except InvalidVersionError as exc:
            print(f"migrate-values: --kcp-version: {exc}", file=err)
            return EXIT_ERROR
    if args.from_shard_chart:
        if args.paths:
            print("migrate-values: --from-shard-chart takes no other PATH", file=err)
            return EXIT_ERROR
        return convert_shard_chart(args, release)
    if not args.paths:
        print("migrate-values: give at least one PATH (or '-' for stdin)", file=err)
        return EXIT_ERROR
    status = EXIT_OK
    stdout = _Stdout()
    for path in args.paths:
        status = max(status, migrate_one(path, args, release, kcp_version, stdout))
    return status


class _Stdout:
    """Standard output for several YAML files: each one a separate set of documents."""

    def __init__(self) -> None:
        self.last = ""

    def write(self, text: str) -> None:
        if self.last:
            separator = "" if self.last.endswith("\n") else "\n"
            if not text.startswith("---"):
                separator += "---\n"
            text = separator + text
        if text:
            _out().write(text.encode("utf-8"))
            self.last = text


def _out() -> BinaryIO:
    return sys.stdout.buffer


def _read(path: str) -> str:
    data = sys.stdin.buffer.read() if path == STDIN else _read_bytes(path)
    return data.decode("utf-8")


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def report_lines(name: str, result: values.MigrationResult) -> list[str]:
    """Standard-error lines for one file: ``FILE:LINE: PATH: what``, each once."""
    lines: list[str] = []
    for kind, findings in (
        ("", result.changes),
        ("no longer needed: ", result.unneeded),
        ("warning: ", result.warnings),
        ("error: ", result.errors),
    ):
        for f in findings:
            where = f"{name}:{f.line}: {f.path}" if f.line else name
            line = f"{where}: {kind}{f.message}"
            if line not in lines:
                lines.append(line)
    return lines


def migrate_one(
    path: str,
    args: argparse.Namespace,
    release: Version,
    kcp_version: Version | None,
    stdout: _Stdout,
) -> int:
    """Migrate one file; returns its exit status."""
    name = "<stdin>" if path == STDIN else path
    try:
        text = _read(path)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"{name}: error: cannot read: {exc}", file=sys.stderr)
        return EXIT_ERROR
    result = values.migrate_text(
        text, deprecating_release=release, prune_mounts=args.prune_mounts, kcp_version=kcp_version
    )
    for line in report_lines(name, result):
        print(line, file=sys.stderr)
    if result.errors:
        return EXIT_ERROR
    if args.diff and result.changed:
        _out().write(_diff(name, result.original, result.text).encode("utf-8"))
    if args.check:
        return EXIT_WOULD_CHANGE if result.changed else EXIT_OK
    if args.in_place and path != STDIN:
        if result.changed:
            try:
                write_atomically(path, result.text.encode("utf-8"))
            except OSError as exc:
                print(f"{name}: error: cannot write: {exc}", file=sys.stderr)
                return EXIT_ERROR
    elif not args.diff:
        stdout.write(result.text)
    return EXIT_OK


def _diff(name: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=name,
        tofile=name,
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def write_atomically(path: str, data: bytes) -> None:
    """Replace ``path`` (following symlinks) via a temporary file, keeping its mode."""
    target = os.path.realpath(path)
    try:
        mode: int | None = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".migrate-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644 & ~_umask() if mode is None else mode)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def convert_shard_chart(args: argparse.Namespace, release: Version) -> int:
    """``--from-shard-chart``: values of the deprecated chart -> Shard manifest."""
    name = "<stdin>" if args.from_shard_chart == STDIN else args.from_shard_chart
    try:
        values = YAML(typ="safe", pure=True).load(_read(args.from_shard_chart)) or {}
    except (OSError, UnicodeDecodeError) as exc:
        print(f"{name}: error: cannot read: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except YAMLError as exc:
        print(f"{name}: error: invalid YAML: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_ERROR
    if not isinstance(values, dict):
        print(f"{name}: error: values must be a mapping", file=sys.stderr)
        return EXIT_ERROR
    conversion = shardchart.convert(
        values, deprecating_release=release, name=args.name, version=args.kcp_version
    )
    for note in conversion.notes:
        print(f"{name}: note: {note}", file=sys.stderr)
    for flag in conversion.unrendered:
        print(f"{name}: not rendered: {flag}", file=sys.stderr)
    for setting in conversion.unmapped:
        print(f"{name}: not carried over: {setting}", file=sys.stderr)
    for error in conversion.errors:
        print(f"{name}: error: {error}", file=sys.stderr)
    if conversion.manifest is None:
        return EXIT_ERROR
    text = render_manifest(conversion.manifest, source=name)
    if args.output:
        try:
            write_atomically(args.output, text.encode("utf-8"))
        except OSError as exc:
            print(f"{args.output}: error: cannot write: {exc}", file=sys.stderr)
            return EXIT_ERROR
    else:
        _out().write(text.encode("utf-8"))
    return EXIT_OK


def render_manifest(manifest: dict[str, Any], source: str) -> str:
    yaml = YAML()
    yaml.indent(mapping=2, sequence=4, offset=2)
    buffer = io.StringIO()
    yaml.dump(manifest, buffer)
    header = f"# Converted from {source} (deprecated kcp 'shard' chart) by migrate-values.\n"
    return header + buffer.getvalue()
