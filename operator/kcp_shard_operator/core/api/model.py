"""A tiny typed-model toolkit: dataclasses that parse themselves from camelCase
mappings and emit the matching OpenAPI v3 schema.

One model feeds both the CRD schema and the offline validation of ``render``,
so the two cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

JSON = dict[str, Any]
"""A free-form JSON object (resources, affinity, tolerations...)."""

T = TypeVar("T")


class SpecError(ValueError):
    """A field of the input that does not fit the model."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def field(
    json_name: str,
    description: str,
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    **schema: Any,
) -> Any:
    """A dataclass field with its JSON name, description and extra schema keywords.

    ``openapi=...`` replaces the schema derived from the type hint (for free-form JSON
    fields whose shape the CRD still constrains); the other keywords are added to it.
    """
    metadata = {"json": json_name, "description": description, "schema": schema}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _optional_inner(hint: Any) -> Any | None:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return None


def _is_json_object(hint: Any) -> bool:
    return typing.get_origin(hint) is dict and typing.get_args(hint) == (str, Any)


def schema_of(hint: Any) -> JSON:
    """The OpenAPI v3 schema of a type hint used in a model."""
    inner = _optional_inner(hint)
    if inner is not None:
        return schema_of(inner)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return object_schema(hint)
    if _is_json_object(hint):
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    origin = typing.get_origin(hint)
    if origin is list:
        (item,) = typing.get_args(hint)
        return {"type": "array", "items": schema_of(item)}
    if origin is dict:
        _, value = typing.get_args(hint)
        return {"type": "object", "additionalProperties": schema_of(value)}
    simple = {str: "string", int: "integer", bool: "boolean"}
    if hint in simple:
        return {"type": simple[hint]}
    raise TypeError(f"no schema for {hint!r}")


_RESOLVED: dict[type, tuple[tuple[dataclasses.Field[Any], Any], ...]] = {}


def _fields(cls: type) -> tuple[tuple[dataclasses.Field[Any], Any], ...]:
    """The fields of model ``cls`` with their resolved type hints, resolved once per class
    (the annotations are strings: resolving them compiles each one again)."""
    if cls not in _RESOLVED:
        hints = typing.get_type_hints(cls)
        _RESOLVED[cls] = tuple((f, hints[f.name]) for f in dataclasses.fields(cls))
    return _RESOLVED[cls]


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def object_schema(cls: type) -> JSON:
    properties: JSON = {}
    required: list[str] = []
    for f, hint in _fields(cls):
        meta = f.metadata
        keywords = dict(meta["schema"])
        prop = keywords.pop("openapi", None) or schema_of(hint)
        prop = {**prop, "description": meta["description"], **keywords}
        if f.default not in (dataclasses.MISSING, None):
            prop["default"] = f.default
        properties[meta["json"]] = prop
        if _required(f):
            required.append(meta["json"])
    schema: JSON = {"type": "object", "properties": properties}
    if cls.__doc__:
        schema["description"] = " ".join(cls.__doc__.split())
    if required:
        schema["required"] = required
    return schema


def _parse_value(hint: Any, value: Any, path: str) -> Any:
    inner = _optional_inner(hint)
    if inner is not None:
        return None if value is None else _parse_value(inner, value, path)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return parse(hint, value, path)
    if _is_json_object(hint):
        if not isinstance(value, Mapping):
            raise SpecError(path, "must be an object")
        return dict(value)
    origin = typing.get_origin(hint)
    if origin is list:
        if not isinstance(value, list):
            raise SpecError(path, "must be a list")
        (item,) = typing.get_args(hint)
        return [_parse_value(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise SpecError(path, "must be an object")
        _, item = typing.get_args(hint)
        return {str(k): _parse_value(item, v, f"{path}.{k}") for k, v in value.items()}
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise SpecError(path, "must be an integer")
    if hint is str and not isinstance(value, str):
        raise SpecError(path, "must be a string")
    if hint is bool and not isinstance(value, bool):
        raise SpecError(path, "must be a boolean")
    return value


def _check_keywords(value: Any, keywords: Mapping[str, Any], path: str) -> None:
    if "minimum" in keywords and value < keywords["minimum"]:
        raise SpecError(path, f"must be at least {keywords['minimum']}, got {value}")
    if "maximum" in keywords and value > keywords["maximum"]:
        raise SpecError(path, f"must be at most {keywords['maximum']}, got {value}")
    if "minLength" in keywords and len(value) < keywords["minLength"]:
        raise SpecError(path, "must not be empty")
    if "maxLength" in keywords and len(value) > keywords["maxLength"]:
        raise SpecError(path, f"must be at most {keywords['maxLength']} characters long")
    if "maxItems" in keywords and len(value) > keywords["maxItems"]:
        raise SpecError(path, f"must have at most {keywords['maxItems']} item(s)")
    if "minItems" in keywords and len(value) < keywords["minItems"]:
        raise SpecError(path, f"must have at least {keywords['minItems']} item(s)")
    if "pattern" in keywords and re.search(keywords["pattern"], value) is None:
        raise SpecError(path, f"{value!r} does not match {keywords['pattern']}")
    if "enum" in keywords and value not in keywords["enum"]:
        raise SpecError(path, f"must be one of {', '.join(keywords['enum'])}, got {value!r}")


def parse(cls: type[T], data: Any, path: str) -> T:
    """Build ``cls`` from a camelCase mapping, applying defaults; unknown keys are errors."""
    if not isinstance(data, Mapping):
        raise SpecError(path, "must be an object")
    known = {f.metadata["json"] for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - known)
    if unknown:
        raise SpecError(f"{path}.{unknown[0]}", "unknown field")
    values: dict[str, Any] = {}
    for f, hint in _fields(cls):
        name = f.metadata["json"]
        sub = f"{path}.{name}"
        if name not in data or data[name] is None:
            if _required(f):
                raise SpecError(sub, "is required")
            continue
        value = _parse_value(hint, data[name], sub)
        _check_keywords(value, f.metadata["schema"], sub)
        values[f.name] = value
    return cls(**values)
