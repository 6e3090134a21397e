from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ruamel.yaml import YAML

from kcp_shard_operator.cli.main import main
from tests.conftest import non_root_object, shard_object
from tests.numeric_hash import numeric_hash_shard


def write(tmp_path: Path, name: str, *docs: object) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return str(path)


def test_invalid_shard_is_reported_and_not_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = shard_object(name="bad", version="v1")
    path = write(tmp_path, "s.yaml", shard_object(), bad)
    assert main(["render", "-f", path]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: Shard ns/bad: spec.version: 'v1' does not match ")
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(out)]
    assert names == ["root-kcp", "root-kcp-data", "root-kcp"]


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (shard_object(name="x" * 60), "metadata.name: must be at most 59 characters"),
        (shard_object(name="bad", version="0.33.0-" + "a" * 60), "spec.version: must be at most"),
        (
            shard_object(name="bad", resources={"requests": {"cpu": "lots"}}),
            "spec.resources.requests.cpu: 'lots' is not a quantity",
        ),
        (
            shard_object(name="bad", tolerations=[{"operator": "Exists", "value": "v"}]),
            "operator Exists has no value",
        ),
    ],
)
def test_what_the_api_server_would_refuse_is_a_spec_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: dict[str, object], words: str
) -> None:
    assert main(["render", "-f", write(tmp_path, "s.yaml", bad)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert words in lines[0]


def test_non_root_without_its_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "s.yaml", non_root_object())
    assert main(["render", "-f", path]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "error: Shard ns/shard-1: spec.rootShardRef: root Shard 'root' not found\n"


def test_root_can_come_from_another_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write(tmp_path, "a.yaml", shard_object())
    b = write(tmp_path, "b.yaml", {"kind": "ConfigMap", "apiVersion": "v1"}, non_root_object())
    assert main(["render", "-f", a, "-f", b]) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)]
    claim = "PersistentVolumeClaim"
    assert kinds == ["Service", claim, "Deployment", "Service", claim, "Deployment"]


def test_release_flag_and_env(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "s.yaml", shard_object(), non_root_object(version="0.34.0"))
    monkeypatch.setenv("KCP_SHARD_ROOT_SHARD_FLAG_REMOVED_IN", "0.35.0")
    assert main(["render", "-f", path]) == 0
    assert "--root-shard-kubeconfig-file=" in capsys.readouterr().out
    assert main(["render", "-f", path, "--root-shard-flag-removed-in", "0.34.0"]) == 0
    assert "--root-shard-kubeconfig-file" not in capsys.readouterr().out


def test_unreadable_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", "/nonexistent.yaml"]) == 2
    assert "No such file" in capsys.readouterr().err


def test_invalid_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("a: [\n", encoding="utf-8")
    assert main(["render", "-f", str(path)]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_numeric_looking_hash_stays_a_string(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    obj, digest = numeric_hash_shard("ns")
    assert main(["render", "-f", write(tmp_path, "s.yaml", obj)]) == 0
    out = capsys.readouterr().out
    assert f'"{digest}"' in out
    for doc in YAML(typ="safe", pure=True).load_all(out):
        for value in (
            *doc["metadata"]["labels"].values(),
            *doc["metadata"]["annotations"].values(),
        ):
            assert isinstance(value, str), value
