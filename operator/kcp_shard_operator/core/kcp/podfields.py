"""Free-form fields of the pod template in a Shard's spec: their schemas, and the checks the
API server would make of them (offline twins for ``render``)."""

from __future__ import annotations

import re
from typing import Any

from kcp_shard_operator.core.api.model import JSON, SpecError, field

LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
QUANTITY_SCHEMA: JSON = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": QUANTITY_PATTERN,
    "x-kubernetes-int-or-string": True,
}
RESOURCES_SCHEMA: JSON = {
    "type": "object",
    "properties": {
        "limits": {"type": "object", "additionalProperties": QUANTITY_SCHEMA},
        "requests": {"type": "object", "additionalProperties": QUANTITY_SCHEMA},
        "claims": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "request": {"type": "string"}},
            },
        },
    },
}
TOLERATION_OPERATORS = ["Exists", "Equal"]
TOLERATION_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
TOLERATION_SCHEMA: JSON = {
    "type": "object",
    "properties": {
        "key": {"type": "string"},
        "operator": {"type": "string", "enum": TOLERATION_OPERATORS},
        "value": {"type": "string"},
        "effect": {"type": "string", "enum": TOLERATION_EFFECTS},
        "tolerationSeconds": {"type": "integer", "format": "int64"},
    },
    "x-kubernetes-validations": [
        {
            "rule": "!has(self.operator) || self.operator != 'Exists' || "
            "!has(self.value) || self.value == ''",
            "message": "a toleration with operator Exists has no value",
        },
        {
            "rule": "(has(self.key) && self.key != '') || "
            "(has(self.operator) && self.operator == 'Exists')",
            "message": "a toleration without a key needs operator Exists",
        },
    ],
}


def check_node_selector(selector: dict[str, str]) -> None:
    for key, value in selector.items():
        if len(value) > 63 or not re.match(LABEL_VALUE_PATTERN, value):
            raise SpecError(f"spec.nodeSelector.{key}", f"{value!r} is not a valid label value")


def check_resources(resources: JSON) -> None:
    unknown = sorted(set(resources) - set(RESOURCES_SCHEMA["properties"]))
    if unknown:
        raise SpecError(f"spec.resources.{unknown[0]}", "unknown field")
    for part in ("limits", "requests"):
        amounts = resources.get(part)
        if amounts is None:
            continue
        if not isinstance(amounts, dict):
            raise SpecError(f"spec.resources.{part}", "must be an object")
        for name, amount in amounts.items():
            text = (
                str(amount) if isinstance(amount, int) and not isinstance(amount, bool) else amount
            )
            if not isinstance(text, str) or not re.match(QUANTITY_PATTERN, text):
                raise SpecError(
                    f"spec.resources.{part}.{name}",
                    f"{amount!r} is not a quantity (e.g. 500m, 2Gi)",
                )


def check_toleration(toleration: JSON, path: str) -> None:
    fields = TOLERATION_SCHEMA["properties"]
    unknown = sorted(set(toleration) - set(fields))
    if unknown:
        raise SpecError(f"{path}.{unknown[0]}", "unknown field")
    for key in ("key", "value"):
        if not isinstance(toleration.get(key, ""), str):
            raise SpecError(f"{path}.{key}", "must be a string")
    seconds = toleration.get("tolerationSeconds", 0)
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise SpecError(f"{path}.tolerationSeconds", "must be an integer")
    for key, allowed in (("operator", TOLERATION_OPERATORS), ("effect", TOLERATION_EFFECTS)):
        if key in toleration and toleration[key] not in allowed:
            raise SpecError(f"{path}.{key}", f"must be one of {', '.join(allowed)}")
    exists = toleration.get("operator") == "Exists"
    if exists and toleration.get("value"):
        raise SpecError(f"{path}.value", "a toleration with operator Exists has no value")
    if not toleration.get("key") and not exists:
        raise SpecError(path, "a toleration without a key needs operator Exists")


MAX_EXTRA_ARGS = 64
MAX_ARG_LENGTH = 1024


def extra_args_field(command: str) -> Any:
    """``extraArgs``: more arguments to ``command``, within the limits the CRD sets."""
    return field(
        "extraArgs",
        f"Extra arguments to {command}.",
        default_factory=list,
        openapi={"type": "array", "items": {"type": "string", "maxLength": MAX_ARG_LENGTH}},
        maxItems=MAX_EXTRA_ARGS,
    )


def resources_field() -> Any:
    return field("resources", "Container resources.", default=None, openapi=RESOURCES_SCHEMA)


def node_selector_field() -> Any:
    return field(
        "nodeSelector",
        "Pod node selector.",
        default_factory=dict,
        openapi={
            "type": "object",
            "additionalProperties": {
                "type": "string",
                "maxLength": 63,
                "pattern": LABEL_VALUE_PATTERN,
            },
        },
    )


def tolerations_field() -> Any:
    return field(
        "tolerations",
        "Pod tolerations.",
        default_factory=list,
        openapi={"type": "array", "items": TOLERATION_SCHEMA},
    )


def affinity_field() -> Any:
    return field("affinity", "Pod affinity.", default=None)


def check_extra_args(extra_args: list[str]) -> None:
    """What the CRD's schema refuses in ``extraArgs``; raises :class:`SpecError`."""
    for index, arg in enumerate(extra_args):
        if len(arg) > MAX_ARG_LENGTH:
            raise SpecError(
                f"spec.extraArgs[{index}]", f"must be at most {MAX_ARG_LENGTH} characters long"
            )


def check_pod_fields(
    node_selector: dict[str, str], resources: JSON | None, tolerations: list[JSON]
) -> None:
    """The checks of a spec's free-form pod fields; raises :class:`SpecError`."""
    check_node_selector(node_selector)
    check_resources(resources or {})
    for index, toleration in enumerate(tolerations):
        check_toleration(toleration, f"spec.tolerations[{index}]")
