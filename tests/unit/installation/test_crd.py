from __future__ import annotations

from pathlib import Path

import yaml

from kcp_shard_operator.cli.crd import crd_yaml
from kcp_shard_operator.core.shard.spec import SPEC_RULES

ROOT = Path(__file__).resolve().parents[3]
CRD = ROOT / "manifests" / "crds" / "kcpshard.dev.yaml"


def test_crd_file_is_generated_from_the_model() -> None:
    assert CRD.read_text(encoding="utf-8") == crd_yaml(), "run `make generate`"


def test_schema_carries_rules_and_defaults() -> None:
    crd = next(yaml.safe_load_all(crd_yaml()))
    version = crd["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["version"]
    assert spec["properties"]["replicas"]["default"] == 1
    assert spec["properties"]["replicas"]["minimum"] == 1
    assert spec["properties"]["replicas"]["maximum"] == 10
    assert spec["properties"]["extraArgs"]["maxItems"] == 64
    assert spec["properties"]["extraArgs"]["items"]["maxLength"] == 1024
    assert spec["properties"]["version"]["maxLength"] == 63
    assert [r["rule"] for r in spec["x-kubernetes-validations"]] == [r.cel for r in SPEC_RULES]
    quantity = spec["properties"]["resources"]["properties"]["limits"]["additionalProperties"]
    assert quantity["x-kubernetes-int-or-string"] is True
    assert spec["properties"]["affinity"]["x-kubernetes-preserve-unknown-fields"] is True
    root = version["schema"]["openAPIV3Schema"]
    assert "size(self.metadata.name) <= 59" in root["x-kubernetes-validations"][0]["rule"]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[:4] == ["Root", "Desired", "Running", "Ready"]
