"""Reading the operator's own /metrics: a scrape parsed into samples, and sums over labels."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Scrape:
    """The samples of one scrape, by name and labels, and the size of the text."""

    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]
    size: int

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def total(self, name: str, **labels: str) -> float:
        """The sum of ``name`` over the samples whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(v for (n, got), v in self.samples.items() if n == name and wanted <= got)

    def labelled(self, name: str, label: str) -> dict[str, float]:
        """``name`` by the value of ``label``, summed over the other labels."""
        found: dict[str, float] = {}
        for (n, got), value in self.samples.items():
            key = dict(got).get(label)
            if n == name and key is not None:
                found[key] = found.get(key, 0.0) + value
        return found


def parse(text: str) -> Scrape:
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels: Mapping[str, str] = sample.labels
            samples[(sample.name, frozenset(labels.items()))] = float(sample.value)
    return Scrape(samples, len(text.encode()))


def scrape(url: str, timeout: float = 5) -> Scrape:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return parse(response.read().decode())
