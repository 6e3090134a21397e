"""Golden files for ``migrate-values``: inputs, expected outputs and expected reports.

``tests/golden/migrate/<input>.in.yaml`` is migrated with the case's options; the
result must equal ``<case>.out.yaml`` byte for byte (absent for files refused with
an error) and the standard-error lines must equal ``<case>.report``.
``UPDATE_GOLDEN=1`` (``make migrate-golden``) rewrites the expected files; review the diff.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from kcp_shard_operator.cli.migrate import report_lines
from kcp_shard_operator.core.kcp.versions import DEFAULT_DEPRECATING_RELEASE, Version
from kcp_shard_operator.migrate.values import MigrationResult, migrate_text

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "migrate"


@dataclass(frozen=True)
class Case:
    name: str
    source: str = ""
    prune_mounts: bool = False
    release: Version = DEFAULT_DEPRECATING_RELEASE
    changes: int = 0
    errors: bool = False

    @property
    def input(self) -> Path:
        return GOLDEN / f"{self.source or self.name}.in.yaml"


CASES = [
    Case("shard-chart-root"),
    Case("shard-chart-nonroot", changes=1),
    Case("shard-chart-nonroot-nocache", errors=True),
    Case("project-chart-values", changes=3),
    Case("project-chart-values-release-0.35", "project-chart-values", release=Version(0, 35, 0)),
    Case("project-nonroot-nocache", errors=True),
    Case("block-and-flow", changes=7),
    Case("two-item-at-end", changes=3),
    Case("list-becomes-empty", changes=4),
    Case("anchors-aliases", changes=1),
    Case("multi-doc", changes=3),
    Case("multi-doc-prune", "multi-doc", prune_mounts=True, changes=5),
    Case("crlf", changes=2),
    Case("nothing-to-change"),
    Case("invalid", errors=True),
]


def run(case: Case, text: str) -> MigrationResult:
    return migrate_text(text, deprecating_release=case.release, prune_mounts=case.prune_mounts)


def read(path: Path) -> str:
    return path.read_bytes().decode("utf-8")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_golden_output(case: Case) -> None:
    text = read(case.input)
    result = run(case, text)
    expected = GOLDEN / f"{case.name}.out.yaml"
    if case.errors:
        assert result.errors
        assert not expected.exists()
    else:
        assert not result.errors
        if os.environ.get("UPDATE_GOLDEN"):
            expected.write_bytes(result.text.encode("utf-8"))
        assert result.text == read(expected)
        assert result.changed == bool(case.changes)
    assert len(result.changes) == case.changes


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_golden_report(case: Case) -> None:
    result = run(case, read(case.input))
    report = "\n".join(report_lines(case.input.name, result)) + "\n"
    expected = GOLDEN / f"{case.name}.report"
    if os.environ.get("UPDATE_GOLDEN"):
        expected.write_bytes(report.encode("utf-8"))
    assert report == read(expected)


@pytest.mark.parametrize("case", [c for c in CASES if not c.errors], ids=lambda c: c.name)
def test_second_run_changes_nothing(case: Case) -> None:
    once = run(case, read(case.input))
    twice = run(case, once.text)
    assert twice.text == once.text
    assert not twice.changes
    assert not twice.errors


def test_crlf_input_really_has_crlf() -> None:
    data = (GOLDEN / "crlf.in.yaml").read_bytes()
    assert data.count(b"\r\n") == data.count(b"\n") > 0
    out = (GOLDEN / "crlf.out.yaml").read_bytes()
    assert out.count(b"\r\n") == out.count(b"\n") > 0


def test_untouched_lines_survive_in_order() -> None:
    """Golden output lines are input lines, in order (lines with flow lists may be edited)."""
    for case in CASES:
        expected = GOLDEN / f"{case.name}.out.yaml"
        if not expected.exists():
            continue
        source = read(case.input).splitlines(keepends=True)
        pos = 0
        for line in read(expected).splitlines(keepends=True):
            if "[" in line:
                continue
            assert line in source[pos:], (case.name, line)
            pos = source.index(line, pos) + 1
