"""Kubernetes resource quantities (``500m``, ``2Gi``, ``3``) by value (pure)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([KMGTPE]i|[numkMGTPE])?$")
_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{f"{p}i": Decimal(1024) ** (i + 1) for i, p in enumerate("KMGTPE")},
}


def quantity(value: Any) -> Decimal | None:
    """The value of a Kubernetes quantity (``500m``, ``2Gi``, ``3``), or None."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    match = _QUANTITY.match(str(value))
    if match is None:
        return None
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2) or ""]
    except InvalidOperation:
        return None
