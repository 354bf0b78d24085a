"""retail: stock per product from ``sales`` and ``shipments``; ``reorders`` and
``price-adjustments`` out.

Two streaming queries over the same input topics, because Spark allows one stateful
aggregation per query:

* stock: the union of shipments (+quantity) and sales (-quantity), summed per product
  (the sum is the streaming state; output mode update). Each micro-batch writes every
  product whose stock changed to ``stock`` (a changelog: the latest record per key is the
  current stock) and, when stock is below the product's reorder point, to ``reorders``.
* prices: units sold per product in sliding event-time windows; when a window reaches
  ``threshold`` units, a price raise goes to ``price-adjustments``. Update mode reports a
  window again each time its count grows: the latest record per (product, window) counts.

Outputs are written with foreachBatch by the connector's batch writer, so they are
at-least-once: a micro-batch replayed after a crash writes its records again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructType

from gregor.pipelines.generators import CATALOG
from gregor.pipelines.topic_io import parse_json, read_stream, with_trigger, write_json

EVENT_SCHEMA = (
    StructType()
    .add("product_id", StringType())
    .add("quantity", IntegerType())
    .add("price", DoubleType())
    .add("ts", LongType())
)


@dataclass(frozen=True)
class RetailTopics:
    sales: str = "sales"
    shipments: str = "shipments"
    stock: str = "stock"
    reorders: str = "reorders"
    price_adjustments: str = "price-adjustments"


@dataclass(frozen=True)
class PriceRule:
    """Raise the price by ``raise_by`` when ``threshold`` units sell within one window."""

    window: str = "10 minutes"
    slide: str = "5 minutes"
    watermark: str = "10 minutes"
    threshold: int = 40
    raise_by: float = 0.10


def catalog(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(
        [(p.product_id, p.price, p.initial_stock, p.reorder_point, p.reorder_quantity)
         for p in CATALOG],
        "product_id STRING, price DOUBLE, initial_stock INT, reorder_point INT, "
        "reorder_quantity INT",
    )


def _events(spark: SparkSession, bootstrap: str, topics: RetailTopics,
            max_offsets: int | None) -> DataFrame:
    raw = read_stream(spark, bootstrap, [topics.sales, topics.shipments], max_offsets)
    return parse_json(raw, EVENT_SCHEMA)


def start_stock(spark: SparkSession, bootstrap: str, checkpoint: Path, topics: RetailTopics,
                available_now: bool = False, max_offsets: int | None = None) -> StreamingQuery:
    events = _events(spark, bootstrap, topics, max_offsets)
    signed = F.when(F.col("topic") == topics.sales, -F.col("quantity")).otherwise(F.col("quantity"))
    changes = events.groupBy("product_id").agg(F.sum(signed).alias("net_change"))
    products = F.broadcast(catalog(spark))

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        stock = (
            batch.join(products, "product_id")
            .select("product_id", (F.col("initial_stock") + F.col("net_change")).alias("stock"),
                    "reorder_point", "reorder_quantity")
            .cache()
        )
        write_json(stock.select("product_id", "stock"), bootstrap, topics.stock,
                   F.col("product_id"))
        write_json(stock.where("stock < reorder_point"), bootstrap, topics.reorders,
                   F.col("product_id"))
        stock.unpersist()

    writer = (changes.writeStream.outputMode("update").foreachBatch(write_batch)
              .option("checkpointLocation", str(checkpoint / "stock")))
    return with_trigger(writer, available_now).queryName("retail-stock").start()


def start_prices(spark: SparkSession, bootstrap: str, checkpoint: Path, topics: RetailTopics,
                 rule: PriceRule = PriceRule(), available_now: bool = False,
                 max_offsets: int | None = None) -> StreamingQuery:
    sales = (_events(spark, bootstrap, topics, max_offsets)
             .where(F.col("topic") == topics.sales)
             .withWatermark("event_time", rule.watermark))
    sold = sales.groupBy(
        F.window("event_time", rule.window, rule.slide), "product_id"
    ).agg(F.sum("quantity").alias("units_sold"))
    products = F.broadcast(catalog(spark))

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        adjustments = (
            batch.where(F.col("units_sold") >= rule.threshold)
            .join(products, "product_id")
            .select("product_id", F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"), "units_sold", "price",
                    F.round(F.col("price") * (1 + rule.raise_by), 2).alias("new_price"))
        )
        write_json(adjustments, bootstrap, topics.price_adjustments, F.col("product_id"))

    writer = (sold.writeStream.outputMode("update").foreachBatch(write_batch)
              .option("checkpointLocation", str(checkpoint / "prices")))
    return with_trigger(writer, available_now).queryName("retail-prices").start()


def start(spark: SparkSession, bootstrap: str, checkpoint: Path,
          topics: RetailTopics = RetailTopics(), rule: PriceRule = PriceRule(),
          available_now: bool = False, max_offsets: int | None = None) -> list[StreamingQuery]:
    """Both queries, each with its own directory under ``checkpoint``."""
    return [
        start_stock(spark, bootstrap, checkpoint, topics, available_now, max_offsets),
        start_prices(spark, bootstrap, checkpoint, topics, rule, available_now, max_offsets),
    ]
