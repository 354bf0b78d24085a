"""retail: ``sales`` and ``shipments`` in; per-product stock kept as streaming state;
``reorders``, ``price-adjustments`` and the ``stock`` changelog out, keyed by product.

Two streaming queries, each with its own checkpoint directory:

* stock: sales and shipments as one stream of stock movements, grouped by product into a
  :class:`~gregor.pipelines.stock_ledger.StockLedger` kept with ``applyInPandasWithState``.
  Every movement the ledger applies goes to ``stock`` (the stock after it); a sale that
  takes the stock below the reorder point raises a reorder, and a shipment that piles it
  above the overstock level raises a discount on ``price-adjustments``.
* velocity: units sold per product in sliding event-time windows, in append mode: a
  window is published once, when the watermark has closed it, and only if its units
  reached the threshold, as a price increase on ``price-adjustments``.

Both decide only once the watermark has passed what they decide on, so late events still
count and the output does not depend on how the input was cut into micro-batches or
where a query was stopped and restarted. Event time advances with the sales: the
watermark is the newest sale time read minus ``watermark``. Shipments, much rarer, get
no watermark of their own: Spark would take the older of two, which stalls after a
restart until the next shipment (Spark does not checkpoint per-source watermarks), and
forever if none comes. A sale counts if it is at most ``watermark`` behind the newest
sale read before it, a shipment if it is read before the watermark passes it. Each
topic is read by a source of its own, with its own budget of records per micro-batch
(``max_offsets``), so the rarer shipments are read ahead of the sales, never behind. The
connector shares a source's budget evenly among its partitions, though, so partitions of
one topic keyed by products of unequal popularity drift apart in event time when a
backlog is read in small slices, and one read ahead can make another's events late.

Outputs are at-least-once, as with Spark's Kafka sink: a micro-batch replayed after a
crash or stop writes its records again. Every record carries an id (``reorder_id``,
``adjustment_id``, the ``event_id`` of its movement) that is the same on a replay.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructType

from gregor.pipelines.generators import CATALOG, PRODUCTS, Product
from gregor.pipelines.stock_ledger import SALE, SHIPMENT, Settled, StockLedger, StockMovement
from gregor.pipelines.topic_io import ensure_topics, parse_json, read_stream, with_trigger

EVENT_SCHEMA = (
    StructType()
    .add("event_id", StringType())
    .add("product_id", StringType())
    .add("quantity", IntegerType())
    .add("price", DoubleType())
    .add("ts", LongType())
)
RECORD_SCHEMA = "topic STRING, key STRING, value STRING"
"""What both queries produce: the connector's sink columns."""


@dataclass(frozen=True)
class RetailTopics:
    sales: str = "sales"
    shipments: str = "shipments"
    stock: str = "stock"
    reorders: str = "reorders"
    price_adjustments: str = "price-adjustments"


@dataclass(frozen=True)
class RetailSettings:
    watermark: str = "1 minute"
    """How late an event may be and still count; longer than the generator's lateness."""
    velocity_window: str = "10 minutes"
    velocity_slide: str = "5 minutes"
    velocity_threshold: int = 100
    """Units of one product sold within one window that make it a fast seller."""
    velocity_change_pct: float = 10.0
    overstock_change_pct: float = -15.0


def adjusted_price(product: Product, change_pct: float) -> float:
    return round(product.price * (1 + change_pct / 100), 2)


def iso_utc(ms: int) -> str:
    """An event time as Spark's ``to_json`` writes timestamps in a UTC session."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def movements(spark: SparkSession, bootstrap: str, topic: str, kind: str,
              max_offsets: int | None) -> DataFrame:
    """The usable events of one topic as stock movements of ``kind``.

    Events of unknown products, without a positive quantity or without a time are left
    out: they cannot move any stock.
    """
    events = parse_json(read_stream(spark, bootstrap, [topic], max_offsets), EVENT_SCHEMA)
    usable = (F.col("product_id").isin(list(PRODUCTS)) & (F.col("quantity") > 0)
              & F.col("ts").isNotNull())
    return events.where(usable).select(
        "product_id", "event_time", F.col("ts").alias("time_ms"), F.lit(kind).alias("kind"),
        F.coalesce("event_id", F.lit("")).alias("event_id"), "quantity",
    )


@dataclass(frozen=True)
class StockKeeper:
    """The ``applyInPandasWithState`` function: called per product for each micro-batch
    with its movements, and when the watermark reaches its earliest held movement."""

    topics: RetailTopics
    settings: RetailSettings

    def __call__(self, key: tuple[str], frames: Iterator[pd.DataFrame],
                 state: GroupState) -> Iterator[pd.DataFrame]:
        product = PRODUCTS[key[0]]
        ledger = StockLedger.from_json(state.get[0]) if state.exists else StockLedger.opening(
            product)
        watermark = state.getCurrentWatermarkMs()
        for frame in frames:
            columns = (frame[c].tolist() for c in ("time_ms", "kind", "event_id", "quantity"))
            ledger.receive((StockMovement(*row) for row in zip(*columns, strict=True)),
                           watermark)
        settled = ledger.settle(watermark, product)
        state.update((ledger.to_json(),))
        due = ledger.next_due_ms()
        if due is not None:
            # An event-time timeout fires once the watermark is past the timestamp.
            state.setTimeoutTimestamp(due - 1)
        rows = [row for s in settled for row in self._records(s, product)]
        yield pd.DataFrame(rows, columns=["topic", "key", "value"])

    def _records(self, settled: Settled, product: Product) -> Iterator[tuple[str, str, str]]:
        movement = settled.movement
        cause = {"event_id": movement.event_id, "event_time": iso_utc(movement.time_ms)}
        yield self._record(self.topics.stock, product, stock=settled.stock,
                           change=movement.change, **cause)
        if settled.crossed == "reorder":
            yield self._record(
                self.topics.reorders, product, reorder_id=f"reorder-{movement.event_id}",
                stock=settled.stock, reorder_point=product.reorder_point,
                reorder_quantity=product.reorder_quantity, **cause)
        elif settled.crossed == "overstock":
            change = self.settings.overstock_change_pct
            yield self._record(
                self.topics.price_adjustments, product,
                adjustment_id=f"overstock-{movement.event_id}", reason="overstock",
                stock=settled.stock, overstock_level=product.overstock_level,
                price=product.price, change_pct=change,
                new_price=adjusted_price(product, change), **cause)

    @staticmethod
    def _record(topic: str, product: Product, **fields: Any) -> tuple[str, str, str]:
        value = {"product_id": product.product_id, **fields}
        return topic, product.product_id, json.dumps(value, separators=(",", ":"))


def stock_records(spark: SparkSession, bootstrap: str, topics: RetailTopics,
                  settings: RetailSettings, max_offsets: int | None) -> DataFrame:
    sales = movements(spark, bootstrap, topics.sales, SALE, max_offsets)
    shipments = movements(spark, bootstrap, topics.shipments, SHIPMENT, max_offsets)
    both = sales.withWatermark("event_time", settings.watermark).unionByName(shipments)
    return both.groupBy("product_id").applyInPandasWithState(
        StockKeeper(topics, settings), RECORD_SCHEMA, "ledger STRING", "append",
        GroupStateTimeout.EventTimeTimeout)


def velocity_records(spark: SparkSession, bootstrap: str, topics: RetailTopics,
                     settings: RetailSettings, max_offsets: int | None) -> DataFrame:
    sales = movements(spark, bootstrap, topics.sales, SALE, max_offsets).withWatermark(
        "event_time", settings.watermark)
    window = F.window("event_time", settings.velocity_window, settings.velocity_slide)
    fast = (
        sales.groupBy(window.alias("window"), "product_id")
        .agg(F.sum("quantity").alias("units_sold"))
        .where(F.col("units_sold") >= settings.velocity_threshold)
    )
    change = settings.velocity_change_pct

    def per_product(values: dict[str, float]) -> Column:
        return F.element_at(F.create_map(*[F.lit(x) for item in values.items() for x in item]),
                            F.col("product_id"))

    value = F.struct(
        F.concat_ws("-", F.lit("velocity"), "product_id",
                    F.unix_millis("window.start").cast("string")).alias("adjustment_id"),
        "product_id", F.lit("sales-velocity").alias("reason"), "units_sold",
        F.lit(settings.velocity_threshold).alias("threshold"),
        F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
        per_product({p.product_id: p.price for p in CATALOG}).alias("price"),
        F.lit(change).alias("change_pct"),
        per_product({p.product_id: adjusted_price(p, change) for p in CATALOG}).alias(
            "new_price"),
    )
    return fast.select(F.lit(topics.price_adjustments).alias("topic"),
                       F.col("product_id").alias("key"), F.to_json(value).alias("value"))


def _start_query(records: DataFrame, name: str, bootstrap: str, checkpoint: Path,
                 available_now: bool) -> StreamingQuery:
    """Straight into the connector's stream sink: both queries run in append mode, the
    only one Spark allows for a Python data source's sink, and the ``topic`` column
    routes each record."""
    writer = (
        records.writeStream.format("gregor").outputMode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(checkpoint / name))
    )
    return with_trigger(writer, available_now).queryName(f"retail-{name}").start()


def start(spark: SparkSession, bootstrap: str, checkpoint: Path,
          topics: RetailTopics = RetailTopics(), settings: RetailSettings = RetailSettings(),
          available_now: bool = False, max_offsets: int | None = None) -> list[StreamingQuery]:
    """Both queries, each with its own directory under ``checkpoint``."""
    ensure_topics(bootstrap, [topics.stock, topics.reorders, topics.price_adjustments])
    return [
        _start_query(stock_records(spark, bootstrap, topics, settings, max_offsets), "stock",
                     bootstrap, checkpoint, available_now),
        _start_query(velocity_records(spark, bootstrap, topics, settings, max_offsets),
                     "velocity", bootstrap, checkpoint, available_now),
    ]
