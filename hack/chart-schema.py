"""Write the Shard spec of the CRD into the chart's values schema (shards.items), so the two
never drift: the CRD is the source, made from the typed models by `kcp-shard-operator crd`.

The chart's copy is JSON Schema for Helm: the API server's own keywords (x-kubernetes-*) are
dropped, and an object with fixed properties admits no other key (a typo in values fails
`helm install` instead of being dropped by the API server). The metadata fields a values
entry adds (name, namespace, labels, annotations) and the cross-field rules (allOf) are the
chart's own and kept.

Usage: python hack/chart-schema.py <crd.yaml> <values.schema.json>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

METADATA_FIELDS = ("name", "namespace", "labels", "annotations")


def for_helm(schema: Any) -> Any:
    if isinstance(schema, list):
        return [for_helm(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: for_helm(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    open_ended = (
        schema.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in schema
    )
    if "properties" in schema and not open_ended:
        out["additionalProperties"] = False
    return out


def main(crd_path: str, schema_path: str) -> None:
    crd = next(yaml.safe_load_all(Path(crd_path).read_text()))
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    values = json.loads(Path(schema_path).read_text())
    item = values["properties"]["shards"]["items"]
    metadata = {name: item["properties"][name] for name in METADATA_FIELDS}
    item["properties"] = metadata | for_helm(spec["properties"])
    Path(schema_path).write_text(json.dumps(values, indent=2) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
