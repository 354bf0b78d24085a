"""Prometheus' text format and OpenMetrics, written straight from a scrape's numbers.

prometheus_client renders a family by building a sample object per series and then,
per line, sorting, validating and escaping its label names and values again: about
6 µs a line, 4 ms for a broker's 700 lines (most of them request-time histogram
buckets and per-partition log gauges), every scrape, on the event loop. Here a series'
name and labels are escaped once and kept as the start of its line for as long as the
series goes on being scraped; a scrape only formats the numbers. The output is what
prometheus_client's encoders write for the same families (labels in name order,
values as its ``floatToGoString`` writes them), so its parsers and Prometheus read
it alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.utils import floatToGoString

Labels = tuple[str, ...]
Key = tuple[str, Labels]  # a series' (or a histogram's) name and label values


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _number(value: float) -> str:
    """``floatToGoString``, with a shortcut for the counts most lines carry."""
    if value.__class__ is int and -10**15 < value < 10**6:
        return f"{value}.0"
    return floatToGoString(value)


class LineStarts:
    """The start of every line of a scrape (a series' name and labels, escaped), to
    be used again by the next one.

    Each scrape keeps only what it wrote: a series gone (a deleted topic's partitions)
    is forgotten, so what is kept never outgrows one scrape.
    """

    def __init__(self) -> None:
        self.series: dict[Key, str] = {}
        self.histograms: dict[Key, tuple[str, ...]] = {}


class Exposition:
    """One scrape's text, for either format."""

    def __init__(self, openmetrics: bool, previous: LineStarts) -> None:
        self.openmetrics = openmetrics
        self._previous = previous
        self.kept = LineStarts()
        self._out: list[str] = []

    def family(self, name: str, doc: str, kind: str) -> None:
        """HELP and TYPE of a family; ``kind`` counter, gauge, histogram or summary.

        The text format names a counter family as its samples are named (``_total``),
        OpenMetrics without the suffix."""
        if kind == "counter" and not self.openmetrics:
            name += "_total"
        doc = _escape(doc) if self.openmetrics else doc.replace("\\", r"\\").replace(
            "\n", r"\n")
        self._out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")

    def sample(self, name: str, label_names: Labels, label_values: Labels,
               value: float) -> None:
        """One line. A family's series are told apart by their label values alone: its
        label names never change."""
        key = (name, label_values)
        start = self.kept.series.get(key) or self._previous.series.get(key)
        if start is None:
            start = _line_start(name, label_names, label_values)
        self.kept.series[key] = start
        self._out.append(start + _number(value) + "\n")

    def histogram(self, name: str, label_names: Labels, label_values: Labels,
                  bounds: Sequence[str], counts: Sequence[int], total: float) -> None:
        """A histogram's series from its buckets' own counts (made cumulative here);
        ``bounds`` as the ``le`` labels read, ``+Inf`` last."""
        key = (name, label_values)
        starts = self.kept.histograms.get(key) or self._previous.histograms.get(key)
        if starts is None:
            bucket, with_le = name + "_bucket", (*label_names, "le")
            starts = (*(_line_start(bucket, with_le, (*label_values, bound))
                        for bound in bounds),
                      _line_start(name + "_count", label_names, label_values),
                      _line_start(name + "_sum", label_names, label_values))
        self.kept.histograms[key] = starts
        out = self._out
        running = 0
        for start, count in zip(starts, counts, strict=False):  # the buckets' starts
            running += count
            out.append(start + _number(running) + "\n")
        out.append(f"{starts[-2]}{_number(running)}\n{starts[-1]}{_number(total)}\n")

    def text(self) -> str:
        """All that was written, closed by ``# EOF`` in OpenMetrics."""
        if self.openmetrics:
            self._out.append("# EOF\n")
        return "".join(self._out)


def _line_start(name: str, label_names: Labels, label_values: Labels) -> str:
    """A series' name and its labels, in name order as prometheus_client writes them."""
    if not label_values:
        return f"{name} "
    labels = ",".join(f'{label}="{_escape(text)}"'
                      for label, text in sorted(zip(label_names, label_values, strict=True)))
    return f"{name}{{{labels}}} "
