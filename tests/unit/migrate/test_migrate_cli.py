"""``kcp-shard-operator migrate-values`` end to end through :func:`cli.main` on temporary files."""

from __future__ import annotations

import io
import os
import shutil
import stat
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from kcp_shard_operator.cli.main import main
from kcp_shard_operator.constants import DEPRECATING_RELEASE_ENV
from kcp_shard_operator.core.kcp.versions import DEFAULT_DEPRECATING_RELEASE
from kcp_shard_operator.core.shard.spec import parse_shard

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "migrate"


def copy(tmp_path: Path, case: str) -> Path:
    target = tmp_path / f"{case}.yaml"
    shutil.copyfile(GOLDEN / f"{case}.in.yaml", target)
    return target


def golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


class Stdin:
    """A stand-in for ``sys.stdin`` whose ``buffer`` holds ``data``."""

    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


def test_prints_result_and_leaves_file(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = copy(tmp_path, "project-chart-values")
    assert main(["migrate-values", str(path)]) == 0
    out, err = capsysbinary.readouterr()
    assert out == golden("project-chart-values.out.yaml")
    assert path.read_bytes() == golden("project-chart-values.in.yaml")
    first = err.decode().splitlines()[0]
    assert first == (
        f"{path}:28: shards[1].rootShardKubeconfigSecretRef: removed "
        "rootShardKubeconfigSecretRef (kcp 0.34.0 ignores --root-shard-kubeconfig-file)"
    )


def test_in_place_rewrites_atomically_and_keeps_mode(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = copy(tmp_path, "crlf")
    path.chmod(0o640)
    inode = path.stat().st_ino
    assert main(["migrate-values", "--in-place", str(path)]) == 0
    out, _ = capsysbinary.readouterr()
    assert out == b""
    assert path.read_bytes() == golden("crlf.out.yaml")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.stat().st_ino != inode, "written through a renamed temporary file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crlf.yaml"]


def test_in_place_does_not_touch_unchanged_file(tmp_path: Path) -> None:
    path = copy(tmp_path, "nothing-to-change")
    before = path.stat()
    assert main(["migrate-values", "--in-place", str(path)]) == 0
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert path.read_bytes() == golden("nothing-to-change.in.yaml")


def test_in_place_through_symlink_keeps_link(tmp_path: Path) -> None:
    real = copy(tmp_path, "two-item-at-end")
    link = tmp_path / "link.yaml"
    link.symlink_to(real.name)
    assert main(["migrate-values", "--in-place", str(link)]) == 0
    assert link.is_symlink()
    assert real.read_bytes() == golden("two-item-at-end.out.yaml")


def test_failed_write_leaves_original_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = copy(tmp_path, "block-and-flow")

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    assert main(["migrate-values", "--in-place", str(path)]) == 2
    assert path.read_bytes() == golden("block-and-flow.in.yaml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["block-and-flow.yaml"]
    assert b"cannot write: [Errno 28] No space left on device" in capsysbinary.readouterr().err


@pytest.mark.parametrize(
    ("cases", "status"),
    [
        (["nothing-to-change"], 0),
        (["shard-chart-root"], 0),
        (["anchors-aliases"], 1),
        (["nothing-to-change", "multi-doc"], 1),
        (["multi-doc", "invalid"], 2),
    ],
)
def test_check_exit_status_and_no_writes(
    tmp_path: Path, cases: list[str], status: int, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    paths = [copy(tmp_path, c) for c in cases]
    assert main(["migrate-values", "--check", *map(str, paths)]) == status
    for case, path in zip(cases, paths, strict=True):
        assert path.read_bytes() == golden(f"{case}.in.yaml")
    assert capsysbinary.readouterr().out == b""


def test_check_with_diff_prints_unified_diff(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = copy(tmp_path, "anchors-aliases")
    assert main(["migrate-values", "--check", "--diff", str(path)]) == 1
    out = capsysbinary.readouterr().out.decode()
    assert out.startswith(f"--- {path}\n+++ {path}\n@@ -1,7 +1,6 @@\n")
    removed = [line for line in out.splitlines() if line.startswith("-") and "---" not in line]
    assert removed == [
        "-  - --root-shard-kubeconfig-file=/etc/kcp/shard/kubeconfig  # shared, removed once"
    ]


def test_in_place_with_diff_writes_and_prints(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = copy(tmp_path, "list-becomes-empty")
    assert main(["migrate-values", "--in-place", "--diff", str(path)]) == 0
    assert b"+  extraFlags: []  # flags we add on top of the chart's\n" in (
        capsysbinary.readouterr().out
    )
    assert path.read_bytes() == golden("list-becomes-empty.out.yaml")


def test_stdin_to_stdout_keeps_crlf(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    monkeypatch.setattr("sys.stdin", Stdin(golden("crlf.in.yaml")))
    assert main(["migrate-values", "-"]) == 0
    out, err = capsysbinary.readouterr()
    assert out == golden("crlf.out.yaml")
    assert err.decode().startswith("<stdin>:6: kcp.extraFlags[1]: removed ")


def test_errors_exit_2_and_other_files_still_processed(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    invalid = copy(tmp_path, "invalid")
    nocache = copy(tmp_path, "project-nonroot-nocache")
    good = copy(tmp_path, "multi-doc")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"a: \xff\n")
    missing = tmp_path / "missing.yaml"
    args = ["migrate-values", "--in-place", *map(str, (invalid, missing, nocache, binary, good))]
    assert main(args) == 2
    err = capsysbinary.readouterr().err.decode()
    assert f"{invalid}:4: (document): error: invalid YAML: expected <block end>" in err
    assert f"{missing}: error: cannot read: [Errno 2] No such file or directory" in err
    assert f"{binary}: error: cannot read: 'utf-8' codec can't decode" in err
    assert f"{nocache}:5: shards[1]: error: non-root shard (rootShardRef set) has no " in err
    assert nocache.read_bytes() == golden("project-nonroot-nocache.in.yaml")
    assert invalid.read_bytes() == golden("invalid.in.yaml")
    assert good.read_bytes() == golden("multi-doc.out.yaml")


def test_prune_mounts(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    path = copy(tmp_path, "multi-doc")
    assert main(["migrate-values", "--prune-mounts", str(path)]) == 0
    out, err = capsysbinary.readouterr()
    assert out == golden("multi-doc-prune.out.yaml")
    assert b"removed volume root-shard-kubeconfig (Secret beta-root-shard-kubeconfig)" in err


@pytest.mark.parametrize("via_env", [False, True])
def test_deprecating_release_setting(
    tmp_path: Path,
    via_env: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    path = copy(tmp_path, "project-chart-values")
    args = ["migrate-values", "--check", str(path)]
    if via_env:
        monkeypatch.setenv(DEPRECATING_RELEASE_ENV, "0.35.0")
    else:
        args.insert(1, "--root-shard-flag-removed-in=0.35.0")
    assert main(args) == 0
    assert b"(it is ignored from 0.35.0 on)" in capsysbinary.readouterr().err


def test_bad_release_and_missing_paths(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["migrate-values", "--root-shard-flag-removed-in", "v1", "x.yaml"]) == 2
    assert main(["migrate-values"]) == 2
    err = capsysbinary.readouterr().err.decode()
    assert "'v1' is not a semantic version" in err
    assert "give at least one PATH" in err


@pytest.mark.parametrize("case", ["shard-chart-root", "shard-chart-nonroot"])
def test_from_shard_chart_golden(
    case: str, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    monkeypatch.chdir(GOLDEN)
    assert main(["migrate-values", "--from-shard-chart", f"{case}.in.yaml"]) == 0
    out, err = capsysbinary.readouterr()
    if os.environ.get("UPDATE_GOLDEN"):
        (GOLDEN / f"{case}.shard.yaml").write_bytes(out)
        (GOLDEN / f"{case}.shard.report").write_bytes(err)
    assert out == golden(f"{case}.shard.yaml")
    assert err == golden(f"{case}.shard.report")
    manifest = YAML(typ="safe", pure=True).load(out)
    assert parse_shard(manifest, DEFAULT_DEPRECATING_RELEASE).spec.version == "0.34.0"
    assert b"root-shard-kubeconfig" not in out


def test_from_shard_chart_to_file(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    target = tmp_path / "beta.yaml"
    source = str(GOLDEN / "shard-chart-nonroot.in.yaml")
    assert main(["migrate-values", "--from-shard-chart", source, "-o", str(target)]) == 0
    assert capsysbinary.readouterr().out == b""
    assert (
        target.read_bytes().split(b"\n", 1)[1]
        == golden("shard-chart-nonroot.shard.yaml").split(b"\n", 1)[1]
    )


def test_from_shard_chart_non_root_without_cache(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    target = tmp_path / "gamma.yaml"
    source = str(GOLDEN / "shard-chart-nonroot-nocache.in.yaml")
    assert main(["migrate-values", "--from-shard-chart", source, "-o", str(target)]) == 2
    assert not target.exists()
    err = capsysbinary.readouterr().err.decode()
    assert "error: non-root shard (sharding.isRoot: false) with neither cache.enabled nor " in err
    assert "--cache-kubeconfig is required for non-root shards" in err


def test_from_shard_chart_rejects_paths_and_bad_input(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    source = tmp_path / "v.yaml"
    source.write_text("- a list\n")
    assert main(["migrate-values", "--from-shard-chart", str(source), "other.yaml"]) == 2
    assert main(["migrate-values", "--from-shard-chart", str(source)]) == 2
    source.write_text("a: [\n")
    assert main(["migrate-values", "--from-shard-chart", str(source)]) == 2
    err = capsysbinary.readouterr().err.decode()
    assert "--from-shard-chart takes no other PATH" in err
    assert "error: values must be a mapping" in err
    assert "error: invalid YAML" in err


def test_explain_prints_every_deprecated_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate-values", "--explain"]) == 0
    out = capsys.readouterr().out
    for flag, release, replacement in (
        ("--root-shard-kubeconfig-file", "0.34.0", "-"),
        ("--external-hostname", "0.31.0", "--shard-external-url"),
        ("--cache-server-kubeconfig-file", "0.11.0", "--cache-kubeconfig"),
        ("--root-kubeconfig", "0.34.0", "--shard-peer-kubeconfig"),
    ):
        row = next(line for line in out.splitlines() if line.startswith(flag + " "))
        assert release in row
        assert replacement in row


def test_files_on_stdout_are_separate_documents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = tmp_path / "a.yaml"
    b = tmp_path / "b.yaml"
    a.write_text("args: [--root-shard-kubeconfig-file=/x, --v=1]\n", encoding="utf-8")
    b.write_text("name: b\nargs: [--v=2]", encoding="utf-8")
    assert main(["migrate-values", str(a), str(b), str(a)]) == 0
    out = capsys.readouterr().out
    assert out == "args: [--v=1]\n---\nname: b\nargs: [--v=2]\n---\nargs: [--v=1]\n"
    assert len(list(YAML(typ="safe", pure=True).load_all(out))) == 3


def test_refused_file_reports_no_removal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "top.yaml"
    path.write_text("- --root-shard-kubeconfig-file=/x\n", encoding="utf-8")
    assert main(["migrate-values", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert "refusing to rewrite" in err[0]


@pytest.mark.parametrize(
    ("extra", "status", "kept"), [([], 0, True), (["--kcp-version", "0.34.0"], 0, False)]
)
def test_unreadable_tag_keeps_the_flag_unless_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], status: int, kept: bool
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(
        "kcp:\n  tag: main\n  extraFlags: [--root-shard-kubeconfig-file=/x]\n", encoding="utf-8"
    )
    assert main(["migrate-values", *extra, str(path)]) == status
    out, err = capsys.readouterr()
    assert ("--root-shard-kubeconfig-file" in out) is kept
    assert ("cannot tell the kcp version from 'main'" in err) is kept
