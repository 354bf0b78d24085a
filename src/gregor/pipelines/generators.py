"""Deterministic event generators that feed the pipelines, and the producer that paces them.

Content (products, quantities, users, pages) depends only on the seed; events are sent
``interval_ms`` apart from ``start_ms`` on, with event times at their sending times
except for the retail generator's late events, so a generator replayed with the same seed
and start produces the same records. Every record's Kafka timestamp is its event time,
which is what the warehouse range and the monitoring windows go by.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any

from confluent_kafka import Producer

REPORT_WINDOW_MS = 60_000
"""Producers report what they sent per 1-minute window of record timestamps."""


@dataclass(frozen=True)
class Product:
    """A catalog entry, shared by the generator and the retail pipeline so that they agree
    on it without a bootstrap step (a real shop would load it from its product database).

    Stock starts at ``initial_stock``; a sale that takes it below ``reorder_point`` makes a
    reorder of ``reorder_quantity`` due; a shipment that takes it above ``overstock_level``
    makes a discount due. ``popularity`` is the product's relative share of sales, so that
    a few products sell much faster than the rest.
    """

    product_id: str
    price: float
    initial_stock: int
    reorder_point: int
    reorder_quantity: int
    overstock_level: int
    popularity: float


CATALOG: tuple[Product, ...] = (
    Product("P01", 4.99, 60, 20, 50, 110, 9.0),
    Product("P02", 12.50, 40, 15, 30, 75, 6.0),
    Product("P03", 2.25, 80, 30, 60, 150, 5.0),
    Product("P04", 19.99, 30, 10, 20, 45, 3.0),
    Product("P05", 7.75, 50, 20, 40, 90, 2.5),
    Product("P06", 3.10, 70, 25, 50, 120, 2.0),
    Product("P07", 45.00, 20, 5, 10, 25, 1.0),
    Product("P08", 9.95, 45, 15, 30, 70, 1.5),
)
PRODUCTS: dict[str, Product] = {p.product_id: p for p in CATALOG}
SALE_QUANTITIES = (1, 2, 3, 4, 6)
SALE_QUANTITY_WEIGHTS = (60, 22, 10, 5, 3)
DELIVERY_DELAY_MS = (60_000, 240_000)
BULK_DELIVERY_SHARE = 0.01
"""Share of events that are a supplier's unasked delivery of twice the reorder quantity."""
LATE_SHARE = 0.05
MAX_LATENESS_MS = 20_000
"""Late events carry event times at most this far behind their sending time (a till that
batches its uploads); the retail pipeline's watermark delay is longer."""
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
    """Sales and shipments of the catalog, one per ``interval_ms`` of sending time.

    The generator keeps its own idea of the stock, so the stream has the dynamics the
    retail pipeline watches for while staying bounded however long it runs: a sale only
    takes what is in stock; a sale that takes a product below its reorder point brings
    the reorder quantity in a shipment one to four minutes later; now and then a supplier
    pushes twice that quantity unasked, piling stock up; and popular products sell fast.
    One event in ``1 / LATE_SHARE`` is late: its event time (and record timestamp) lies up
    to ``MAX_LATENESS_MS`` before the time it is sent. Every event has an ``event_id``,
    unique per (seed, start), that orders events with equal times.
    """
    rng = random.Random(seed)
    stem = hashlib.blake2s(f"{seed}:{start_ms}".encode(), digest_size=4).hexdigest()
    stock = {p.product_id: p.initial_stock for p in CATALOG}
    deliveries: dict[str, int] = {}  # product -> when its reorder shipment is sent
    for index in count():
        send_ms = start_ms + index * interval_ms
        ts = send_ms - (rng.randint(1, MAX_LATENESS_MS) if rng.random() < LATE_SHARE else 0)
        event_id = f"{stem}-{index}"
        due = min(deliveries, key=deliveries.__getitem__, default=None)
        if due is not None and deliveries[due] <= send_ms:
            del deliveries[due]
            product, quantity = PRODUCTS[due], PRODUCTS[due].reorder_quantity
        elif rng.random() < BULK_DELIVERY_SHARE:
            product = rng.choices(CATALOG, [p.popularity for p in CATALOG])[0]
            quantity = 2 * product.reorder_quantity
        else:
            quantity = rng.choices(SALE_QUANTITIES, SALE_QUANTITY_WEIGHTS)[0]
            in_stock = [p for p in CATALOG if stock[p.product_id] >= quantity]
            if not in_stock:
                continue
            product = rng.choices(in_stock, [p.popularity for p in in_stock])[0]
            stock[product.product_id] -= quantity
            if (stock[product.product_id] < product.reorder_point
                    and product.product_id not in deliveries):
                deliveries[product.product_id] = send_ms + rng.randint(*DELIVERY_DELAY_MS)
            yield Event(sales_topic, product.product_id, {
                "event_id": event_id, "product_id": product.product_id, "quantity": quantity,
                "price": product.price, "ts": ts}, ts)
            continue
        stock[product.product_id] += quantity
        yield Event(shipments_topic, product.product_id, {
            "event_id": event_id, "product_id": product.product_id, "quantity": quantity,
            "ts": ts}, ts)


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
        user_id = f"u{user:02d}"
        value = {"user_id": user_id, "page": rng.choice(PAGES), "action": rng.choice(ACTIONS),
                 "ts": ts}
        yield Event(topic, user_id, value, ts)
        index += 1


def report_window(ts_ms: int) -> int:
    return ts_ms - ts_ms % REPORT_WINDOW_MS


def publish(
    events: Iterable[Event],
    config: dict[str, Any],
    rate: float | None = None,
    reports_topic: str | None = "producer-reports",
    stop: threading.Event | None = None,
) -> Counter[tuple[str, int]]:
    """Produce ``events`` (at most ``rate`` per second when given) and report to
    ``reports_topic`` how many records each topic got per window, once the window is
    over; returns those counts.

    Setting ``stop`` (Ctrl-C in ``gregor pipeline generate``) ends the run as if the
    events had run out: what was produced is flushed and its windows reported, so the
    monitoring pipeline does not count the records queued at that moment as lost.

    Events come in time order give or take ``MAX_LATENESS_MS``, so a window is reported
    once an event at least that far past its end is produced (no event of the window can
    follow), and the rest at the end, after a flush, so a report never precedes the
    records it counts.
    """
    stop = threading.Event() if stop is None else stop
    producer = Producer({"linger.ms": 5, **config})
    sent: Counter[tuple[str, int]] = Counter()
    reported: set[tuple[str, int]] = set()
    started = time.monotonic()
    newest_ms: int | None = None

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

    for index, event in enumerate(events):
        if rate:
            ahead = started + index / rate - time.monotonic()
            if ahead > 0:
                stop.wait(ahead)  # sleeps, unless stop is set meanwhile
        if stop.is_set():
            break
        newest_ms = event.ts_ms if newest_ms is None else max(newest_ms, event.ts_ms)
        report(report_window(newest_ms - MAX_LATENESS_MS))
        window = report_window(event.ts_ms)
        producer.produce(event.topic, json.dumps(event.value).encode(), event.key.encode(),
                         timestamp=event.ts_ms)
        producer.poll(0)
        sent[event.topic, window] += 1
    report(None)
    remaining = producer.flush(30)
    if remaining:
        raise RuntimeError(f"{remaining} records were not delivered within 30 s")
    return sent
