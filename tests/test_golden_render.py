"""Golden files: the rendered output of manifests/samples/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kcp_shard_operator.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "manifests" / "samples").glob("*.yaml"))
GOLDEN = Path(__file__).parent / "golden" / "render" / "samples.yaml"


def test_samples_render_to_golden(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["render", "--root-shard-flag-removed-in", "0.34.0"]
    for sample in SAMPLES:
        args += ["-f", str(sample)]
    assert main(args) == 0
    out, err = capsys.readouterr()
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(out, encoding="utf-8")
    assert out == GOLDEN.read_text(encoding="utf-8")
    assert "spec.extraArgs: '--root-shard-kubeconfig-file /etc/kcp/root-shard/kubeconfig'" in err
