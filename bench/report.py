"""Printing benchmark figures and writing them to a results file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def report(figures: dict[str, Any], path: Path) -> None:
    """Print ``figures`` one per line and write them to ``path`` as JSON."""
    width = max(len(key) for key in figures) + 2
    for key, value in figures.items():
        print(f"{key:{width}} {value}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(f"written to {path}")
