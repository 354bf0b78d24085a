"""The scrape's own writer of Prometheus' formats: what it keeps from one scrape for the
next changes nothing in the text, and a series gone is not kept."""

from __future__ import annotations

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from gregor.metrics.exposition import Exposition, LineStarts

BOUNDS = ("0.5", "1.0", "+Inf")


def _scrape(openmetrics: bool, previous: LineStarts, topics: list[str]) -> Exposition:
    out = Exposition(openmetrics, previous)
    out.family("t_bytes", 'bytes "in", by topic\\', "counter")
    for topic in topics:
        out.sample("t_bytes_total", ("topic",), (topic,), 2_500_000)
    out.sample("t_bytes_total", (), (), 7)
    out.family("t_size", "size", "gauge")
    for topic in topics:
        out.sample("t_size", ("topic", "partition"), (topic, "0"), 1.5)
    out.family("t_time_ms", "time", "histogram")
    out.histogram("t_time_ms", ("request",), ("Fetch",), BOUNDS, (1, 0, 2), 4.25)
    return out


def test_kept_line_starts_change_nothing_and_gone_series_are_dropped() -> None:
    topics = ['odd "topic"\\\n', "plain"]
    for openmetrics in (False, True):
        first = _scrape(openmetrics, LineStarts(), topics)
        second = _scrape(openmetrics, first.kept, topics)
        assert second.text() == first.text()
        third = _scrape(openmetrics, second.kept, topics[1:])
        assert not any(topics[0] in values for _, values in third.kept.series)
        assert ("t_size", ("plain", "0")) in third.kept.series
        text = third.text()
        assert topics[0] not in text


def test_both_formats_parse_to_the_values_written() -> None:
    topics = ['odd "topic"\\\n', "plain"]
    text = _scrape(False, LineStarts(), topics).text()
    openmetrics = _scrape(True, LineStarts(), topics).text()
    for families in (list(text_string_to_metric_families(text)),
                     list(openmetrics_families(openmetrics))):
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in families for s in family.samples}
        assert samples[("t_bytes_total", (("topic", topics[0]),))] == 2_500_000
        assert samples[("t_bytes_total", ())] == 7
        assert samples[("t_size", (("partition", "0"), ("topic", topics[0])))] == 1.5
        buckets = [samples[("t_time_ms_bucket", (("le", bound), ("request", "Fetch")))]
                   for bound in BOUNDS]
        assert buckets == [1, 1, 3]
        assert samples[("t_time_ms_count", (("request", "Fetch"),))] == 3
        assert samples[("t_time_ms_sum", (("request", "Fetch"),))] == 4.25
        assert {f.name: f.type for f in families} == {
            "t_bytes": "counter", "t_size": "gauge", "t_time_ms": "histogram"}
