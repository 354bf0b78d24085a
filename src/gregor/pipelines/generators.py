"""Deterministic event generators that feed the pipelines, and the producer that paces them.

Content (products, quantities, users, pages) depends only on the seed; event times are
``start_ms + index * interval_ms``, so a generator replayed with the same seed and start
produces the same records. Every record's Kafka timestamp is its event time, which is
what the warehouse range and the monitoring windows go by.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

REPORT_WINDOW_MS = 60_000
"""Producers report what they sent per 1-minute window of record timestamps."""


@dataclass(frozen=True)
class Product:
    """A catalog entry: stock starts at ``initial_stock``; below ``reorder_point`` a
    reorder of ``reorder_quantity`` is due."""

    product_id: str
    price: float
    initial_stock: int
    reorder_point: int
    reorder_quantity: int


CATALOG: tuple[Product, ...] = (
    Product("P01", 4.99, 60, 20, 50),
    Product("P02", 12.50, 40, 15, 30),
    Product("P03", 2.25, 80, 30, 60),
    Product("P04", 19.99, 30, 10, 20),
    Product("P05", 7.75, 50, 20, 40),
    Product("P06", 3.10, 70, 25, 50),
    Product("P07", 45.00, 20, 5, 10),
    Product("P08", 9.95, 45, 15, 30),
)
PAGES = ("/", "/search", "/products", "/products/p01", "/products/p02", "/cart", "/checkout")
ACTIONS = ("view", "click", "search")


@dataclass(frozen=True)
class Event:
    """One record to produce: JSON ``value`` keyed by ``key``, timestamped ``ts_ms``."""

    topic: str
    key: str
    value: dict[str, Any]
    ts_ms: int


def retail_events(
    seed: int,
    start_ms: int,
    interval_ms: int,
    sales_topic: str = "sales",
    shipments_topic: str = "shipments",
) -> Iterator[Event]:
    """Mostly sales of 1-5 units; one event in eight is a shipment of 5-20 units, so
    stock drifts down and products cross their reorder points."""
    rng = random.Random(seed)
    index = 0
    while True:
        product = rng.choice(CATALOG)
        ts = start_ms + index * interval_ms
        if rng.random() < 0.125:
            value: dict[str, Any] = {
                "product_id": product.product_id, "quantity": rng.randint(5, 20), "ts": ts}
            yield Event(shipments_topic, product.product_id, value, ts)
        else:
            value = {"product_id": product.product_id, "quantity": rng.randint(1, 5),
                     "price": product.price, "ts": ts}
            yield Event(sales_topic, product.product_id, value, ts)
        index += 1


def activity_events(
    seed: int, start_ms: int, interval_ms: int, topic: str = "activity", users: int = 12
) -> Iterator[Event]:
    """Users act in bursts: a user stays active for a few events, then another user
    takes over, so that per-user sessions both continue and time out."""
    rng = random.Random(seed)
    index = 0
    user = rng.randrange(users)
    while True:
        if rng.random() < 0.3:
            user = rng.randrange(users)
        ts = start_ms + index * interval_ms
        value = {"user_id": f"u{user:02d}", "page": rng.choice(PAGES),
                 "action": rng.choice(ACTIONS), "ts": ts}
        yield Event(topic, value["user_id"], value, ts)
        index += 1


def report_window(ts_ms: int) -> int:
    return ts_ms - ts_ms % REPORT_WINDOW_MS


def publish(
    events: Iterable[Event],
    config: dict[str, Any],
    rate: float | None = None,
    reports_topic: str | None = "producer-reports",
) -> Counter[tuple[str, int]]:
    """Produce ``events`` (at most ``rate`` per second when given) and report to
    ``reports_topic`` how many records each topic got per window, once the window is
    over; returns those counts.

    A window is reported when the first event of a later window is produced (events come
    in time order), and the rest at the end, after a flush, so a report never precedes
    the records it counts.
    """
    producer = Producer({"linger.ms": 5, **config})
    sent: Counter[tuple[str, int]] = Counter()
    reported: set[tuple[str, int]] = set()
    started = time.monotonic()

    def report(before_window: int | None) -> None:
        due = [k for k in sent if k not in reported
               and (before_window is None or k[1] < before_window)]
        if not due or reports_topic is None:
            return
        producer.flush(30)
        for topic, window_start in sorted(due):
            body = {"topic": topic, "window_start": window_start, "sent": sent[topic, window_start]}
            producer.produce(reports_topic, json.dumps(body).encode(), topic.encode(),
                             timestamp=window_start)
            reported.add((topic, window_start))

    for count, event in enumerate(events):
        if rate:
            ahead = started + count / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        window = report_window(event.ts_ms)
        report(window)
        producer.produce(event.topic, json.dumps(event.value).encode(), event.key.encode(),
                         timestamp=event.ts_ms)
        producer.poll(0)
        sent[event.topic, window] += 1
    report(None)
    remaining = producer.flush(30)
    if remaining:
        raise RuntimeError(f"{remaining} records were not delivered within 30 s")
    return sent
