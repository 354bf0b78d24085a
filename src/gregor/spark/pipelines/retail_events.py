"""Sales and shipments of a small coffee shop chain, for the retail pipeline.

The generator keeps its own idea of the stock: when a sale takes a product below its
reorder point, a supplier delivers the reorder quantity a few minutes later, and now
and then a supplier pushes an unrequested bulk delivery.  So the stream has the
dynamics the pipeline watches for (stock running low, stock piling up, products
selling fast) while staying bounded however long it runs.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from itertools import count

from gregor.spark.pipelines.event_publisher import GeneratedEvent, lateness_ms
from gregor.spark.pipelines.event_time import iso_utc
from gregor.spark.pipelines.retail_catalog import PRODUCTS, PRODUCTS_BY_ID, Product

SALES_TOPIC = "sales"
SHIPMENTS_TOPIC = "shipments"
STORES = ("berlin-mitte", "berlin-kreuzberg", "hamburg", "munich", "cologne", "leipzig")
SUPPLIERS = ("roastery-nord", "dairy-coop", "homeware-gmbh")
QUANTITIES = ((1, 60), (2, 22), (3, 10), (4, 5), (6, 3))
DELIVERY_DELAY_MS = (60_000, 240_000)
BULK_DELIVERY_SHARE = 0.004
"""Share of ticks on which a supplier pushes twice the usual quantity unasked."""


def event_ids(seed: int, start_ms: int) -> str:
    """A short stem that makes event ids unique per (seed, start), so two generators
    started differently never produce the same id."""
    return hashlib.blake2s(f"{seed}:{start_ms}".encode(), digest_size=4).hexdigest()


def retail_events(seed: int, start_ms: int, rate: float) -> Iterator[GeneratedEvent]:
    """An endless stream of sales and shipments, ``rate`` events per second of event time."""
    rng = random.Random(seed)
    stem = event_ids(seed, start_ms)
    stock = {p.product_id: p.initial_stock for p in PRODUCTS}
    deliveries: dict[str, int] = {}  # product -> due time of its reorder delivery
    weights = [p.popularity for p in PRODUCTS]
    quantities, quantity_weights = zip(*QUANTITIES, strict=True)
    for tick in count():
        send_ms = start_ms + round(tick * 1000 / rate)
        timestamp_ms = send_ms - lateness_ms(rng)
        due = min(deliveries, key=deliveries.__getitem__, default=None)
        if due is not None and deliveries[due] <= send_ms:
            del deliveries[due]
            quantity = PRODUCTS_BY_ID[due].reorder_quantity
            yield _shipment(rng, stem, tick, PRODUCTS_BY_ID[due], quantity, timestamp_ms, send_ms)
            stock[due] += quantity
            continue
        if rng.random() < BULK_DELIVERY_SHARE:
            product = rng.choices(PRODUCTS, weights)[0]
            quantity = 2 * product.reorder_quantity
            yield _shipment(rng, stem, tick, product, quantity, timestamp_ms, send_ms)
            stock[product.product_id] += quantity
            continue
        quantity = rng.choices(quantities, quantity_weights)[0]
        in_stock = [p for p in PRODUCTS if stock[p.product_id] >= quantity]
        if not in_stock:
            continue
        product = rng.choices(in_stock, [p.popularity for p in in_stock])[0]
        product_id = product.product_id
        stock[product_id] -= quantity
        if stock[product_id] < product.reorder_point and product_id not in deliveries:
            deliveries[product_id] = send_ms + rng.randint(*DELIVERY_DELAY_MS)
        yield GeneratedEvent(
            SALES_TOPIC,
            product.product_id,
            {
                "sale_id": f"sale-{stem}-{tick}",
                "product_id": product.product_id,
                "store_id": rng.choice(STORES),
                "quantity": quantity,
                "unit_price": product.unit_price,
                "event_time": iso_utc(timestamp_ms),
            },
            timestamp_ms,
            send_ms,
        )


def _shipment(
    rng: random.Random,
    stem: str,
    tick: int,
    product: Product,
    quantity: int,
    timestamp_ms: int,
    send_ms: int,
) -> GeneratedEvent:
    return GeneratedEvent(
        SHIPMENTS_TOPIC,
        product.product_id,
        {
            "shipment_id": f"shipment-{stem}-{tick}",
            "product_id": product.product_id,
            "supplier": rng.choice(SUPPLIERS),
            "quantity": quantity,
            "event_time": iso_utc(timestamp_ms),
        },
        timestamp_ms,
        send_ms,
    )

