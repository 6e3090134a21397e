"""Migrated values through the real chart: ``helm template`` of charts/kcp-shard-operator.

Checks with the real helm binary (built by hack/tools.sh) that migrated values
still pass the chart's schema and render exactly the intended difference, and
that Shards converted from the deprecated kcp ``shard`` chart are accepted as
``shards:`` items of this project's chart.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcp_shard_operator.core.kcp.flags import without_flag
from kcp_shard_operator.core.kcp.versions import DEFAULT_DEPRECATING_RELEASE
from kcp_shard_operator.core.shard.spec import parse_shard
from testkit.tools import helm, helm_env
from tests.chart import CHART

pytestmark = pytest.mark.e2e

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "migrate"
REF = "rootShardKubeconfigSecretRef"


def helm_template(values: Path) -> list[dict[str, Any]]:
    env = helm_env()
    kube_version = env["KWOK_KUBE_VERSION"]
    proc = helm(
        env, "template", "migrated", str(CHART), "--kube-version", kube_version, "-f", str(values)
    )
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def shards(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Shard"}


def test_migrated_chart_values_render_the_intended_difference() -> None:
    before = helm_template(GOLDEN / "project-chart-values.in.yaml")
    after = helm_template(GOLDEN / "project-chart-values.out.yaml")
    assert [d for d in before if d["kind"] != "Shard"] == [d for d in after if d["kind"] != "Shard"]
    old, new = shards(before), shards(after)
    assert sorted(old) == sorted(new) == ["alpha", "beta", "gamma", "root"]
    expected = copy.deepcopy(old)
    for name in ("alpha", "gamma"):
        spec = expected[name]["spec"]
        del spec[REF]
        if "extraArgs" in spec:
            spec["extraArgs"] = without_flag(spec["extraArgs"], "--root-shard-kubeconfig-file")[0]
    assert new == expected
    assert REF in new["beta"]["spec"]
    for obj in new.values():
        parse_shard(obj, DEFAULT_DEPRECATING_RELEASE)


@pytest.mark.parametrize("case", ["shard-chart-root", "shard-chart-nonroot"])
def test_converted_shard_fits_the_chart(case: str, tmp_path: Path) -> None:
    manifest = yaml.safe_load((GOLDEN / f"{case}.shard.yaml").read_text())
    item = {"name": manifest["metadata"]["name"], **manifest["spec"]}
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"shards": [item]}))
    rendered = shards(helm_template(values))
    assert list(rendered) == [item["name"]]
    assert rendered[item["name"]]["spec"] == manifest["spec"]
