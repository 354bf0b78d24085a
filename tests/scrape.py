"""Reading a broker's metrics as Prometheus does: an HTTP GET of its endpoint, parsed by
prometheus_client's own parser of the text format."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Key = tuple[str, frozenset[tuple[str, str]]]


class Scrape:
    """One scrape: every sample by its name and labels."""

    def __init__(self, text: str) -> None:
        self.samples: dict[Key, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def value(self, name: str, **labels: object) -> float | None:
        """The sample with exactly these labels, or None."""
        return self.samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))

    def get(self, name: str, **labels: object) -> float:
        """The sample with exactly these labels, 0 when absent (a counter not yet counted)."""
        value = self.value(name, **labels)
        return 0.0 if value is None else value

    def series(self, name: str, **labels: object) -> dict[frozenset[tuple[str, str]], float]:
        """Every sample of ``name`` whose labels include these."""
        wanted = {(k, str(v)) for k, v in labels.items()}
        return {key: value for (sample, key), value in self.samples.items()
                if sample == name and wanted <= key}

    @property
    def names(self) -> set[str]:
        return {name for name, _ in self.samples}


def scrape(url: str) -> Scrape:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return Scrape(answer.read().decode())
