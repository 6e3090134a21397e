"""What a user meets first: ``--version`` and each command's ``--help``."""

from __future__ import annotations

from importlib import metadata

import pytest

from kcp_shard_operator.cli.main import main


def exit_code(argv: list[str]) -> int | str | None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code


def test_version_is_the_installed_distribution_s(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(["--version"]) == 0
    assert capsys.readouterr() == (f"{metadata.version('kcp-shard-operator')}\n", "")


def test_version_without_the_distribution_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert exit_code(["--version"]) == 2
    assert capsys.readouterr() == (
        "",
        "error: the kcp-shard-operator distribution is not installed\n",
    )
