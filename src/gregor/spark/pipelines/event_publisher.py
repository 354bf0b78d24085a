"""Publish generated events to topics at a given rate, and report what was sent.

Generators describe *what* happens (:class:`GeneratedEvent`); this module decides *when*
each record goes out and adds the producer reports that the monitoring pipeline audits:
for every window of ``REPORT_WINDOW_MS`` of record timestamps, one record per topic on
``producer-reports`` saying how many records this producer sent into that window.  A
report goes out only once no more records of its window can come (``MAX_LATENESS_MS``
after the window ends) and after the producer flushed, so the records it counts are
acknowledged by the time anyone reads it.

Planning (:func:`plan`) is pure and deterministic, so tests can replay exactly what the
command sends; sending (:func:`publish`) paces it in real time or sends as fast as the
producer goes.  :class:`Faults` make a producer "lose" or delay some records while still
counting them, to show the monitoring pipeline at work.
"""

from __future__ import annotations

import heapq
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from gregor.spark.pipelines.event_time import iso_utc

REPORT_WINDOW_MS = 60_000
"""Producers count and the monitoring pipeline audits records per minute of timestamps."""
REPORTS_TOPIC = "producer-reports"
MAX_LATENESS_MS = 20_000
"""The generators' late events carry timestamps at most this far behind their sending
time (a phone that was offline, a till that batches its uploads)."""
LATE_SHARE = 0.03
"""Share of generated events that arrive late."""
BUFFER_FULL_WAIT_S = 0.1


@dataclass(frozen=True)
class GeneratedEvent:
    topic: str
    """Topic name without the publisher's prefix."""
    key: str
    value: dict[str, Any]
    timestamp_ms: int
    """The event time, also used as the record's CreateTime."""
    send_ms: int
    """When a live source emits it; later than ``timestamp_ms`` for a late event."""


@dataclass(frozen=True)
class Faults:
    """Records a producer counts as sent but that never arrive (``loss``) or arrive
    ``lag_ms`` late (``lag``); both are shares of all records, chosen at random."""

    loss: float = 0.0
    lag: float = 0.0
    lag_ms: int = 90_000

    def __post_init__(self) -> None:
        if self.loss < 0 or self.lag < 0 or self.loss + self.lag > 1:
            raise ValueError("loss and lag must be shares between 0 and 1 (together at most 1)")
        if self.lag_ms <= 0:
            raise ValueError("the lag must be a positive number of milliseconds")


@dataclass(frozen=True)
class Outgoing:
    """One record as it will be produced."""

    topic: str
    key: str
    value: bytes
    timestamp_ms: int
    send_ms: int
    is_report: bool = False


@dataclass
class PublishStats:
    records: int = 0
    reports: int = 0
    last_timestamp_ms: int | None = None
    failures: Counter[str] = field(default_factory=Counter)


def lateness_ms(rng: random.Random) -> int:
    """How late an event arrives: mostly on time, sometimes up to ``MAX_LATENESS_MS``."""
    return rng.randint(1, MAX_LATENESS_MS) if rng.random() < LATE_SHARE else 0


def window_start(timestamp_ms: int) -> int:
    return timestamp_ms - timestamp_ms % REPORT_WINDOW_MS


def plan(
    events: Iterable[GeneratedEvent],
    *,
    producer_id: str,
    topic_prefix: str = "",
    faults: Faults = Faults(),
    seed: int = 0,
) -> Iterator[Outgoing]:
    """Every record and producer report to send, in sending order."""
    fault_rng = random.Random(f"faults-{seed}")
    counts: dict[int, Counter[str]] = {}
    # Delayed records and due reports, by due time; the sequence number keeps ties in order.
    pending: list[tuple[int, int, Outgoing | int]] = []
    sequence = 0

    def due(now_ms: float) -> Iterator[Outgoing]:
        while pending and pending[0][0] <= now_ms:
            due_ms, _, item = heapq.heappop(pending)
            if isinstance(item, Outgoing):
                yield item
            else:
                yield from _reports(item, counts.pop(item), producer_id, topic_prefix, due_ms)

    for event in events:
        yield from due(event.send_ms)
        start = window_start(event.timestamp_ms)
        if start not in counts:
            counts[start] = Counter()
            heapq.heappush(pending, (start + REPORT_WINDOW_MS + MAX_LATENESS_MS, sequence, start))
            sequence += 1
        counts[start][topic_prefix + event.topic] += 1
        record = Outgoing(
            topic_prefix + event.topic,
            event.key,
            json.dumps(event.value, separators=(",", ":")).encode(),
            event.timestamp_ms,
            event.send_ms,
        )
        roll = fault_rng.random()
        if roll < faults.loss:
            continue
        if roll < faults.loss + faults.lag:
            delayed = replace(record, send_ms=event.send_ms + faults.lag_ms)
            heapq.heappush(pending, (delayed.send_ms, sequence, delayed))
            sequence += 1
            continue
        yield record
    yield from due(float("inf"))


def _reports(
    start: int, counts: Counter[str], producer_id: str, topic_prefix: str, send_ms: int
) -> Iterator[Outgoing]:
    end = start + REPORT_WINDOW_MS
    for topic in sorted(counts):
        report = {
            "producer": producer_id,
            "topic": topic,
            "window_start": iso_utc(start),
            "window_end": iso_utc(end),
            "records": counts[topic],
        }
        value = json.dumps(report, separators=(",", ":")).encode()
        yield Outgoing(topic_prefix + REPORTS_TOPIC, topic, value, end, send_ms, is_report=True)


def publish(
    outgoing: Iterable[Outgoing],
    producer: Producer,
    *,
    paced: bool,
    on_progress: Callable[[PublishStats], None] | None = None,
) -> PublishStats:
    """Produce everything; with ``paced``, each record waits for its ``send_ms`` (relative
    to the first one) so that the generator runs at its rate in real time."""
    stats = PublishStats()

    def on_delivery(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            stats.failures[error.str()] += 1

    first_send_ms: int | None = None
    started = time.monotonic()
    for item in outgoing:
        if paced:
            if first_send_ms is None:
                first_send_ms = item.send_ms
            wake = started + (item.send_ms - first_send_ms) / 1000
            while (delay := wake - time.monotonic()) > 0:
                producer.poll(delay)
        if item.is_report:
            producer.flush()
            stats.reports += 1
        else:
            stats.records += 1
            stats.last_timestamp_ms = item.timestamp_ms
        _produce(producer, item, on_delivery)
        producer.poll(0)
        if on_progress is not None:
            on_progress(stats)
    producer.flush()
    return stats


def _produce(
    producer: Producer, item: Outgoing, on_delivery: Callable[[KafkaError | None, Message], None]
) -> None:
    while True:
        try:
            producer.produce(
                item.topic,
                item.value,
                item.key,
                timestamp=item.timestamp_ms,
                on_delivery=on_delivery,
            )
            return
        except BufferError:
            producer.poll(BUFFER_FULL_WAIT_S)
