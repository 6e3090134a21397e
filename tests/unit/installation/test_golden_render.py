"""Golden files: the rendered output of manifests/samples/ and of docs/examples/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from kcp_shard_operator.cli.main import main
from kcp_shard_operator.core.kcp.versions import Version
from testkit.tools import pinned_version

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "render"


def _rendered(folder: Path, golden: Path, capsys: pytest.CaptureFixture[str]) -> str:
    args = ["render", "--root-shard-flag-removed-in", "0.34.0"]
    for sample in sorted(folder.glob("*.yaml")):
        args += ["-f", str(sample)]
    assert main(args) == 0
    out, err = capsys.readouterr()
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(out, encoding="utf-8")
    assert out == golden.read_text(encoding="utf-8")
    return err


def test_samples_render_to_golden_with_the_issued_secrets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _rendered(ROOT / "manifests" / "samples", GOLDEN / "samples.yaml", capsys)
    out = (GOLDEN / "samples.yaml").read_text(encoding="utf-8")
    for secret in (
        "root-kcp-serving",
        "root-kcp-client-ca",
        "cache-cache-kubeconfig",
        "root-kcp-requestheader-client-ca",
        "root-kcp-external-logical-cluster-admin-kubeconfig",
        "kcp-front-proxy-serving",
        "kcp-front-proxy-requestheader",
        "kcp-front-proxy-kubeconfig",
    ):
        assert f"secretName: {secret}" in out
    assert out.count("--shard-external-url=https://kcp-front-proxy.kcp-samples.svc:6443") == 2


def test_examples_render_to_golden(capsys: pytest.CaptureFixture[str]) -> None:
    err = _rendered(ROOT / "docs" / "examples", GOLDEN / "examples.yaml", capsys)
    assert "spec.extraArgs: '--root-shard-kubeconfig-file /etc/kcp/root-shard/kubeconfig'" in err


def test_the_cache_server_example_runs_the_kcp_the_kind_images_are_built_from() -> None:
    """The kind e2e applies docs/examples/cache-server.yaml as it is (default images)."""
    pinned = pinned_version("KCP_VERSION").removeprefix("v")
    example = ROOT / "docs" / "examples" / "cache-server.yaml"
    documents = [d for d in yaml.safe_load_all(example.read_text(encoding="utf-8")) if d]
    kinds = [d["kind"] for d in documents]
    assert kinds == ["Namespace", "CacheServer", "Shard", "Shard"]
    assert {d["spec"]["version"] for d in documents if "spec" in d} == {pinned}


def test_the_samples_run_the_kcp_the_kind_images_are_built_from() -> None:
    """``CLUSTER=kind make demo`` applies the samples as they are: a whole installation, whose
    version must be the one ``hack/image.sh kcp`` builds and tags as the default image."""
    pinned = pinned_version("KCP_VERSION").removeprefix("v")
    cache = {"cache": {"serverRef": {"name": "cache"}}}
    kinds = []
    for sample in sorted((ROOT / "manifests" / "samples").glob("*.yaml")):
        for document in yaml.safe_load_all(sample.read_text(encoding="utf-8")):
            kinds.append(document["kind"])
            if "spec" not in document:
                continue
            spec = dict(document["spec"])
            assert spec.pop("version") == pinned, sample.name
            root = {"rootShardRef": {"name": "root"}}
            assert spec in ({}, cache, root, {**root, **cache}), sample.name
    assert kinds == ["Namespace", "CacheServer", "Shard", "Shard", "FrontProxy"]


@pytest.mark.parametrize("version", ["0.27.1", "0.30.0", "0.31.0", "0.34.0"])
def test_virtual_workspace_servers_render_to_golden_on_each_version_row(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/examples/virtual-workspaces.yaml at each kcp version where the flag table's rows
    for the virtual-workspace server or its shard differ: --shard-external-url and the shard's
    --external-hostname up to 0.30, --cache-kubeconfig required and the root-shard kubeconfig
    gone from the deprecating release (0.34.0)."""
    example = ROOT / "docs" / "examples" / "virtual-workspaces.yaml"
    text = example.read_text(encoding="utf-8").replace('version: "0.27.1"', f'version: "{version}"')
    (tmp_path / "virtual-workspaces.yaml").write_text(text, encoding="utf-8")
    _rendered(tmp_path, GOLDEN / f"virtual-workspaces-{version}.yaml", capsys)
    out = (GOLDEN / f"virtual-workspaces-{version}.yaml").read_text(encoding="utf-8")
    old = Version.parse(version) < Version(0, 31, 0)
    # Both shards take it on every version; their servers only up to 0.30.
    assert out.count("--shard-external-url=https://kcp-front-proxy") == (4 if old else 2)
    assert ("--external-hostname=shard-1-kcp.kcp-vw-example.svc" in out) is old
    assert out.count("--run-virtual-workspaces=false") == 2
    assert ("--root-shard-kubeconfig-file" in out) is (version != "0.34.0")


def test_the_cache_servers_client_ca_renders_exactly_on_the_versions_that_take_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _rendered(GOLDEN / "cache-versions", GOLDEN / "cache-versions.yaml", capsys)
    out = (GOLDEN / "cache-versions.yaml").read_text(encoding="utf-8")
    deployments = [d for d in yaml.safe_load_all(out) if d["kind"] == "Deployment"]
    taking = {
        d["metadata"]["name"]
        for d in deployments
        if any(
            a.startswith("--client-ca-file=")
            for a in d["spec"]["template"]["spec"]["containers"][0]["args"]
        )
    }
    assert len(deployments) == 8
    assert taking == {"cache-0-29-2-cache", "cache-0-30-2-cache", "cache-0-31-0-cache"}
