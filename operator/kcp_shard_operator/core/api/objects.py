"""An object of one of the operator's kinds: identity, validated spec and the raw status, and
the one way to parse it (pure)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kcp_shard_operator.core.api import model
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.kcp.versions import Version, parse_or_none

S = TypeVar("S")


@dataclass(frozen=True)
class KcpObject(Generic[S]):
    """A Shard, CacheServer or FrontProxy: identity plus validated spec and the raw status."""

    name: str
    namespace: str
    spec: S
    uid: str = ""
    generation: int = 0
    status: JSON | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def status_version(self) -> Version | None:
        """The kcp version rolled out on every replica (``status.version``), if valid."""
        return parse_or_none((self.status or {}).get("version"))


Obj = TypeVar("Obj", bound=KcpObject[Any])


def parse_object(
    obj: Any,
    cls: type[Obj],
    spec_cls: type[Any],
    check_name: Callable[[str], None],
    validate: Callable[[Any], None],
) -> Obj:
    """A ``cls`` from a Kubernetes object mapping: its name checked, its spec parsed as
    ``spec_cls`` and validated; raises :class:`SpecError` naming the field."""
    if not isinstance(obj, dict):
        raise SpecError("<document>", "must be an object")
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise SpecError("metadata.name", "is required")
    check_name(str(name))
    spec = model.parse(spec_cls, obj.get("spec"), "spec")
    validate(spec)
    return cls(
        name=name,
        namespace=meta.get("namespace") or "default",
        spec=spec,
        uid=meta.get("uid", ""),
        generation=int(meta.get("generation", 0)),
        status=obj.get("status"),
    )
