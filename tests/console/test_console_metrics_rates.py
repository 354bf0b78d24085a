"""Rates and sizes from scrapes given by hand: the arithmetic of adding up brokers,
without a clock or a broker."""

from __future__ import annotations

import pytest

from gregor.console.metrics import BrokerMetrics, BrokerScrape, Round

A, B = "http://a/metrics", "http://b/metrics"


def scraped(bytes_in: float, sizes: dict[tuple[str, int], float] | None = None) -> BrokerScrape:
    return BrokerScrape({("bytes_in", None): bytes_in, ("bytes_in", "t"): bytes_in},
                        sizes or {})


def metrics(*rounds: Round) -> BrokerMetrics:
    kept = BrokerMetrics([A, B], interval_s=5, window_s=600)
    kept._rounds.extend(rounds)
    return kept


def test_rates_add_up_brokers_and_count_a_restarted_one_from_zero() -> None:
    kept = metrics(Round(0, {A: scraped(100), B: scraped(1000)}, {}),
                   Round(5, {A: scraped(150), B: scraped(1100)}, {}),
                   Round(10, {A: scraped(200), B: scraped(40)}, {}))  # B restarted
    assert kept.throughput()["bytes_in"] == pytest.approx([30.0, 18.0])
    assert kept.throughput("t")["bytes_in"] == pytest.approx([30.0, 18.0])
    assert kept.throughput("other")["bytes_in"] == [0.0, 0.0]


def test_a_broker_missing_from_either_scrape_is_left_out_of_that_interval() -> None:
    kept = metrics(Round(0, {A: scraped(100), B: scraped(1000)}, {}),
                   Round(5, {A: scraped(150)}, {B: "timed out"}),
                   Round(10, {A: scraped(200), B: scraped(1500)}, {}))
    assert kept.throughput()["bytes_in"] == pytest.approx([10.0, 10.0])
    assert kept.status() == {"endpoints": 2, "scraped": True, "answering": 2, "errors": []}


def test_a_partitions_size_is_its_largest_replicas() -> None:
    kept = metrics(Round(0, {A: scraped(0, {("t", 0): 900, ("t", 1): 10}),
                             B: scraped(0, {("t", 0): 850})}, {}))
    assert kept.sizes() == {("t", 0): 900, ("t", 1): 10}
