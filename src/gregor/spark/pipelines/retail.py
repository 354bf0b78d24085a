"""The retail pipeline: stock levels from ``sales`` and ``shipments``; ``reorders`` and
``price-adjustments`` out, keyed by product.

Two streaming queries:

* ``stock``: per-product stock as streaming state (``applyInPandasWithState`` keyed by
  product, see :mod:`stock_ledger`).  A sale that takes the stock below the product's
  reorder point raises a reorder; a shipment that piles it above the overstock level
  raises a discount on ``price-adjustments``.
* ``velocity``: units sold per product in a sliding event-time window; a window that
  reaches the threshold raises a price increase on ``price-adjustments``.

Both wait for the watermark (event time minus ``watermark_delay``) before they decide,
so late events up to that delay count, and the output does not depend on how the input
was cut into micro-batches or where the query was stopped and restarted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from gregor.spark.pipelines.event_time import iso_utc
from gregor.spark.pipelines.retail_catalog import PRODUCTS, PRODUCTS_BY_ID, Product
from gregor.spark.pipelines.retail_events import SALES_TOPIC, SHIPMENTS_TOPIC
from gregor.spark.pipelines.stock_ledger import (
    SALE,
    SHIPMENT,
    StockAlert,
    StockLedger,
    StockMovement,
)
from gregor.spark.pipelines.streams import (
    StreamSettings,
    ensure_topics,
    json_value,
    parse_json,
    read_topics,
    write_topic,
)

REORDERS_TOPIC = "reorders"
PRICE_ADJUSTMENTS_TOPIC = "price-adjustments"
MOVEMENT_FIELDS = (
    "sale_id STRING, shipment_id STRING, product_id STRING, quantity INT, event_time TIMESTAMP"
)
OUTPUT_SCHEMA = "topic STRING, key STRING, value STRING"


@dataclass(frozen=True)
class RetailSettings:
    watermark_delay: str = "1 minute"
    velocity_window: str = "10 minutes"
    velocity_slide: str = "5 minutes"
    velocity_threshold: int = 120
    """Units of one product sold within one window that make it a fast seller."""
    velocity_change_pct: float = 10.0
    overstock_change_pct: float = -15.0


def start(
    spark: SparkSession, streams: StreamSettings, retail: RetailSettings | None = None
) -> list[StreamingQuery]:
    retail = retail or RetailSettings()
    ensure_topics(
        streams, [SALES_TOPIC, SHIPMENTS_TOPIC, REORDERS_TOPIC, PRICE_ADJUSTMENTS_TOPIC]
    )
    movements = _movements(spark, streams)
    keeper = StockKeeper(
        streams.topic(REORDERS_TOPIC),
        streams.topic(PRICE_ADJUSTMENTS_TOPIC),
        retail.overstock_change_pct,
    )
    alerts = (
        movements.withWatermark("event_time", retail.watermark_delay)
        .groupBy("product_id")
        .applyInPandasWithState(
            keeper, OUTPUT_SCHEMA, "ledger STRING", "append", GroupStateTimeout.EventTimeTimeout
        )
    )
    return [
        write_topic(alerts, streams, "retail-stock"),
        write_topic(_fast_sellers(spark, streams, retail), streams, "retail-velocity"),
    ]


def _movements(spark: SparkSession, streams: StreamSettings) -> DataFrame:
    """Sales and shipments of catalogue products as one stream of stock movements."""
    records = read_topics(spark, streams, [SALES_TOPIC, SHIPMENTS_TOPIC])
    events = parse_json(records, MOVEMENT_FIELDS)
    is_sale = F.col("topic") == streams.topic(SALES_TOPIC)
    return events.where(_valid(events)).select(
        "product_id",
        "event_time",
        F.unix_millis("event_time").alias("time_ms"),
        F.when(is_sale, F.lit(SALE)).otherwise(F.lit(SHIPMENT)).alias("kind"),
        F.when(is_sale, F.col("sale_id")).otherwise(F.col("shipment_id")).alias("event_id"),
        "quantity",
    )


def _fast_sellers(
    spark: SparkSession, streams: StreamSettings, retail: RetailSettings
) -> DataFrame:
    sales = parse_json(read_topics(spark, streams, [SALES_TOPIC]), MOVEMENT_FIELDS)
    window = F.window("event_time", retail.velocity_window, retail.velocity_slide)
    velocity = (
        sales.where(_valid(sales) & F.col("sale_id").isNotNull())
        .withWatermark("event_time", retail.watermark_delay)
        .groupBy(window.alias("window"), "product_id")
        .agg(F.sum("quantity").alias("units_sold"))
        .where(F.col("units_sold") >= retail.velocity_threshold)
    )
    prices = F.create_map(*[F.lit(x) for p in PRODUCTS for x in (p.product_id, p.unit_price)])
    change = retail.velocity_change_pct
    window_ms = F.unix_millis("window.start").cast("string")
    return velocity.select(
        F.lit(streams.topic(PRICE_ADJUSTMENTS_TOPIC)).alias("topic"),
        F.col("product_id").alias("key"),
        json_value(
            F.concat_ws("-", F.lit("velocity"), "product_id", window_ms).alias("adjustment_id"),
            "product_id",
            F.lit("sales-velocity").alias("reason"),
            "units_sold",
            F.lit(retail.velocity_threshold).alias("threshold"),
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            F.lit(change).alias("change_pct"),
            F.round(F.element_at(prices, F.col("product_id")) * (1 + change / 100), 2).alias(
                "new_price"
            ),
        ).alias("value"),
    )


def _valid(events: DataFrame) -> Column:
    """Rows the pipeline can use: a known product, a positive quantity, an event time."""
    return (
        F.col("product_id").isin(list(PRODUCTS_BY_ID))
        & (F.col("quantity") > 0)
        & F.col("event_time").isNotNull()
    )


@dataclass(frozen=True)
class StockKeeper:
    """The ``applyInPandasWithState`` function: one call per product per micro-batch that
    has its events, and one whenever the watermark passes its earliest held event."""

    reorders_topic: str
    adjustments_topic: str
    overstock_change_pct: float

    def __call__(
        self, key: tuple[str], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        product = PRODUCTS_BY_ID[key[0]]
        ledger = (
            StockLedger.from_json(state.get[0]) if state.exists else StockLedger.opening(product)
        )
        watermark = state.getCurrentWatermarkMs()
        for frame in frames:
            columns = (frame[c].tolist() for c in ("time_ms", "kind", "event_id", "quantity"))
            ledger.receive(
                (StockMovement(*row) for row in zip(*columns, strict=True)), watermark
            )
        alerts = ledger.settle(watermark, product)
        state.update((ledger.to_json(),))
        due = ledger.next_due_ms()
        if due is not None:
            # Event-time timeouts fire once the watermark is *past* the timestamp.
            state.setTimeoutTimestamp(due - 1)
        rows = [self._record(alert, product) for alert in alerts]
        yield pd.DataFrame(rows, columns=["topic", "key", "value"])

    def _record(self, alert: StockAlert, product: Product) -> tuple[str, str, str]:
        movement = alert.movement
        common = {"product_id": product.product_id, "stock": alert.stock}
        if alert.kind == "reorder":
            topic = self.reorders_topic
            value = {
                "reorder_id": f"reorder-{movement.event_id}",
                **common,
                "reorder_point": product.reorder_point,
                "quantity": product.reorder_quantity,
                "sale_id": movement.event_id,
                "event_time": iso_utc(movement.time_ms),
            }
        else:
            topic = self.adjustments_topic
            change = self.overstock_change_pct
            value = {
                "adjustment_id": f"overstock-{movement.event_id}",
                **common,
                "reason": "overstock",
                "overstock_level": product.overstock_level,
                "shipment_id": movement.event_id,
                "change_pct": change,
                "new_price": round(product.unit_price * (1 + change / 100), 2),
                "event_time": iso_utc(movement.time_ms),
            }
        return topic, product.product_id, json.dumps(value, separators=(",", ":"))
