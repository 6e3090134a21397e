from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kcp_shard_operator.cli.main import main
from kcp_shard_operator.core.api.reference import NO_DESCRIPTION, api_reference
from kcp_shard_operator.core.installation.crds import crds

ROOT = Path(__file__).resolve().parents[3]
API_MD = ROOT / "docs" / "reference" / "api.md"


def test_api_reference_page_is_generated_from_the_crds() -> None:
    assert API_MD.read_text(encoding="utf-8") == api_reference(crds()), "run `make generate`"


def test_cli_prints_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["api-reference"]) == 0
    assert capsys.readouterr().out == api_reference(crds())


def crd(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    """A CRD of kind Widget whose spec and status schemas are the given ones."""
    properties = {"metadata": {"type": "object"}, "spec": spec}
    if status is not None:
        properties["status"] = status
    return {
        "spec": {
            "group": "example.dev",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [
                {
                    "name": "v1",
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A widget.",
                            "required": ["spec"],
                            "properties": properties,
                        }
                    },
                }
            ],
        }
    }


def spec_of(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "description": "Desired state.", "properties": properties}


def row(page: str, path: str) -> list[str]:
    """The cells of the table row of the field at ``path``."""
    (line,) = [line for line in page.splitlines() if line.startswith(f"| `{path}` |")]
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_a_required_field_is_marked_and_an_optional_one_not() -> None:
    spec = spec_of(
        size={"type": "integer", "description": "Size."},
        name={"type": "string", "description": "Name."},
    )
    page = api_reference([crd({**spec, "required": ["name"]})])
    assert row(page, "spec.name")[3] == "yes"
    assert row(page, "spec.size")[3] == ""
    assert row(page, "spec")[3] == "yes"


def test_a_default_is_shown_as_its_json_value() -> None:
    page = api_reference(
        [
            crd(
                spec_of(
                    replicas={"type": "integer", "description": "Pods.", "default": 2},
                    issue={"type": "boolean", "description": "Issue.", "default": True},
                    size={"type": "string", "description": "Size.", "default": "10Gi"},
                )
            )
        ]
    )
    assert row(page, "spec.replicas")[2] == "`2`"
    assert row(page, "spec.issue")[2] == "`true`"
    assert row(page, "spec.size")[2] == "`10Gi`"


def test_enum_pattern_and_bounds_are_shown_as_validation() -> None:
    page = api_reference(
        [
            crd(
                spec_of(
                    policy={"type": "string", "description": "P.", "enum": ["Always", "Never"]},
                    count={"type": "integer", "description": "C.", "minimum": 1, "maximum": 10},
                    tag={"type": "string", "description": "T.", "pattern": "^v(1|2)$"},
                    args={
                        "type": "array",
                        "description": "A.",
                        "maxItems": 64,
                        "items": {"type": "string", "maxLength": 1024},
                    },
                )
            )
        ]
    )
    assert row(page, "spec.policy")[4] == "one of `Always`, `Never`"
    assert row(page, "spec.count")[4] == "minimum 1; maximum 10"
    # A pipe would split the table's cell: the code goes into <code> with entities.
    assert row(page, "spec.tag")[4] == "pattern <code>^v(1&#124;2)$</code>"
    assert row(page, "spec.args")[1] == "array of string"
    assert row(page, "spec.args")[4] == "maxItems 64; each item: maxLength 1024"


def test_nested_objects_and_list_items_get_their_own_tables() -> None:
    ref = {
        "type": "object",
        "description": "The Secret.",
        "required": ["name"],
        "properties": {"name": {"type": "string", "description": "Its name."}},
    }
    item = {
        "type": "object",
        "properties": {"key": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "has(self.key)", "message": "needs a key"}],
    }
    items = {"type": "array", "description": "Items.", "items": item}
    page = api_reference([crd(spec_of(tls=spec_of(secretRef=ref), items=items))])
    assert row(page, "spec.tls")[1] == "[object](#widget-v1-spec-tls)"
    assert row(page, "spec.tls.secretRef")[1] == "[object](#widget-v1-spec-tls-secretref)"
    assert row(page, "spec.items")[1] == "array of [object](#widget-v1-spec-items)"
    for heading in (
        "### `spec` {#widget-v1-spec}",
        "### `spec.tls` {#widget-v1-spec-tls}",
        "### `spec.tls.secretRef` {#widget-v1-spec-tls-secretref}",
        "### `spec.items[]` {#widget-v1-spec-items}",
    ):
        assert heading in page.splitlines()
    assert row(page, "spec.tls.secretRef.name")[3:] == ["yes", "", "Its name."]
    # An object's rules go under its own table, not into its parent's row.
    assert "- needs a key (`has(self.key)`)" in page
    assert row(page, "spec.items")[4] == ""


def test_a_field_without_description_says_so() -> None:
    status = {"type": "object", "properties": {"phase": {"type": "string"}}}
    page = api_reference([crd(spec_of(), status)])
    assert row(page, "status.phase")[5] == NO_DESCRIPTION
    assert row(page, "status")[5] == NO_DESCRIPTION


def test_kind_facts_and_printer_columns() -> None:
    page = api_reference([crd(spec_of())]).splitlines()
    assert "## Widget `v1` {#widget-v1}" in page
    assert "- [Widget `v1`](#widget-v1)" in page
    facts = (
        "`apiVersion: example.dev/v1`, scope `Namespaced`, plural `widgets`, subresource `status`."
    )
    assert facts in page
    assert "| Phase | string | `.status.phase` |" in page
    assert not any(line.startswith("| `metadata` |") for line in page)


def test_description_text_is_escaped_for_markdown() -> None:
    spec = spec_of(tag={"type": "string", "description": "Defaults to v<version>; *Ref | x_y."})
    assert row(api_reference([crd(spec)]), "spec.tag")[5] == (
        "Defaults to v&lt;version&gt;; \\*Ref \\| x\\_y."
    )


def test_every_kind_and_object_level_is_linked() -> None:
    page = api_reference(crds())
    headings = [line for line in page.splitlines() if line.startswith(("## ", "### `"))]
    anchors = [heading.split("{#")[1].rstrip("}") for heading in headings]
    assert len(anchors) > 3
    for anchor in anchors:
        assert f"(#{anchor})" in page, anchor
