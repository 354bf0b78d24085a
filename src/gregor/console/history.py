"""Offsets over time: message rates and group lag for the console's charts.

Kafka has no API for "messages per second" or "lag over the last minutes": a client
samples log end offsets and committed offsets and takes differences, as Burrow and
kafka_exporter do. A thread samples every ``interval_s`` and keeps ``window_s`` of
samples in memory, so the charts have a past as soon as a page opens.

Throughput in bytes and log sizes need the brokers' own metrics (``metrics.listener``):
given ``BrokerMetrics`` (the brokers' own, or ``gregor console --metrics URL``), the views
add its series beside the offset-based message rate; without, the pages say metrics are
not configured.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import OffsetSpec

from gregor.cli.errors import CliError
from gregor.cli.groups_cmd import committed_offsets, log_offsets
from gregor.console.admin import ClusterAdmin, wait
from gregor.console.metrics import BrokerMetrics

log = logging.getLogger(__name__)
RATE_WINDOW_S = 60.0
METRICS_UNAVAILABLE = ("Bytes in and out per second need the brokers' Prometheus metrics, "
                       "which are not configured (metrics.listener on the brokers, found "
                       "when the console starts, or gregor console --metrics "
                       "http://HOST:PORT/metrics, once per broker); messages per second "
                       "come from log end offsets.")
Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Sample:
    t: float  # time.time(), for the charts' time axis
    ends: dict[Partition, int]
    committed: dict[str, dict[Partition, int]]  # group -> its committed offsets


class History:
    """The samples of the last ``window_s`` seconds, taken every ``interval_s``."""

    def __init__(self, admin: ClusterAdmin, interval_s: float, window_s: float,
                 metrics: BrokerMetrics | None = None) -> None:
        self.admin = admin
        self.interval_s = interval_s
        self.metrics = metrics
        self._samples: deque[Sample] = deque(maxlen=max(2, int(window_s / interval_s) + 1))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-history", daemon=True)
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread.start()
        if self.metrics:
            self.metrics.start()

    def stop(self) -> None:
        self._stop.set()
        if self.metrics:
            self.metrics.stop()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.sample()
                self.last_error = None
            except CliError as exc:  # a broker down: a gap in the charts, said in the pages
                self.last_error = str(exc)
            except Exception:  # never let one odd answer end the sampling
                log.exception("offset sampling failed")
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - began)))

    def sample(self) -> None:
        metadata = self.admin.metadata()
        partitions = [(name, index) for name, topic in metadata.topics.items()
                      if topic.error is None
                      for index, p in topic.partitions.items() if p.leader >= 0]
        ends = log_offsets(self.admin.admin, partitions, OffsetSpec.latest())
        groups = self.admin.group_client()
        listed = wait(groups.list_consumer_groups(), "list groups")
        committed = {group.group_id: committed_offsets(groups, group.group_id)
                     for group in listed.valid}
        with self._lock:
            self._samples.append(Sample(time.time(), ends, committed))

    def _snapshot(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    # ---------------------------------------------------------------- views
    def topic_rates(self) -> dict[str, float]:
        """Messages per second per topic over the last RATE_WINDOW_S (or what there is)."""
        samples = self._snapshot()
        if len(samples) < 2:
            return {}
        last = samples[-1]
        window = [s for s in samples[:-1] if s.t >= last.t - RATE_WINDOW_S - self.interval_s / 2]
        window = window or samples[-2:-1]
        rates: dict[str, float] = {}
        for tp, end in last.ends.items():
            # From the window's first sample that knows the partition: a topic created a
            # moment ago has a rate from its first sample on.
            first = next((s for s in window if tp in s.ends), None)
            if first is None:
                continue
            # A topic deleted and created again starts over: count no negative rate.
            grown = max(end - first.ends[tp], 0)
            rates[tp[0]] = rates.get(tp[0], 0.0) + grown / (last.t - first.t)
        return rates

    def messages_in(self, topic: str | None = None) -> dict[str, list[float]]:
        """Messages per second between consecutive samples, of one topic or all."""
        samples = self._snapshot()
        times, rates = [], []
        for before, after in zip(samples, samples[1:], strict=False):
            grown = sum(max(end - before.ends.get(tp, end), 0) for tp, end in after.ends.items()
                        if topic is None or tp[0] == topic)
            times.append(after.t)
            rates.append(grown / (after.t - before.t))
        return {"t": times, "messages_in": rates}

    def group_lag(self, group: str) -> dict[str, Any]:
        """Lag per partition over time: the log end offset minus the committed offset."""
        samples = [s for s in self._snapshot() if group in s.committed]
        partitions = sorted({tp for s in samples for tp in s.committed[group]})
        series: dict[str, list[int | None]] = {f"{t}-{p}": [] for t, p in partitions}
        for sample in samples:
            offsets = sample.committed[group]
            for tp in partitions:
                lag = (sample.ends[tp] - offsets[tp]
                       if tp in offsets and tp in sample.ends else None)
                series[f"{tp[0]}-{tp[1]}"].append(lag)
        return {"t": [s.t for s in samples], "series": series}

    def cluster_throughput(self) -> dict[str, Any]:
        return {"messages_in": self.messages_in(), **self.broker_throughput()}

    def broker_throughput(self, topic: str | None = None) -> dict[str, Any]:
        """The brokers' bytes in and out and messages in per second (of one topic or
        all), with which brokers answered; a note instead when metrics are off."""
        if self.metrics is None:
            return {"bytes": None, "metrics": None, "bytes_note": METRICS_UNAVAILABLE}
        return {"bytes": self.metrics.throughput(topic), "metrics": self.metrics.status(),
                "bytes_note": None}
