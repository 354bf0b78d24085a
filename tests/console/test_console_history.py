"""Rates and lag over time from offset samples (the console's charts), on samples
given by hand: the arithmetic, without a clock or a broker."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gregor.console.history import History, Sample


def history(*samples: Sample) -> History:
    # The views read the samples only; the admin client is for taking them.
    kept = History(cast(Any, None), interval_s=5, window_s=600)
    kept._samples.extend(samples)
    return kept


def test_topic_rate_counts_a_topic_created_inside_the_window() -> None:
    kept = history(Sample(0, {("old", 0): 100}, {}),
                   Sample(5, {("old", 0): 150, ("new", 0): 0, ("new", 1): 10}, {}),
                   Sample(15, {("old", 0): 250, ("new", 0): 40, ("new", 1): 30}, {}))
    rates = kept.topic_rates()
    assert rates["old"] == pytest.approx(10.0)  # 150 records in 15 s
    assert rates["new"] == pytest.approx(6.0)  # 60 records in the 10 s since it appeared


def test_topic_rate_uses_the_last_minute_only() -> None:
    kept = history(Sample(0, {("t", 0): 0}, {}), Sample(50, {("t", 0): 10_000}, {}),
                   Sample(110, {("t", 0): 10_600}, {}))
    assert kept.topic_rates()["t"] == pytest.approx(10.0)


def test_group_lag_per_partition_over_time() -> None:
    kept = history(Sample(0, {("t", 0): 20}, {"g": {("t", 0): 5}}),
                   Sample(5, {("t", 0): 20}, {}),  # the group was not listed then
                   Sample(10, {("t", 0): 30}, {"g": {("t", 0): 30}}))
    assert kept.group_lag("g") == {"t": [0, 10], "series": {"t-0": [15, 0]}}
