"""monitoring: records received per topic and 1-minute window, compared with what the
producers reported sending; shortfalls go to ``monitoring-alerts``.

Producers (see :func:`gregor.pipelines.generators.publish`) publish
``{topic, window_start, sent}`` to ``producer-reports`` once a window is over. One query
reads the watched topics and the reports together and sums, per (topic, window), a 1 for
each record (by record timestamp) and the ``sent`` of each report: the sums are the
streaming state, so counts survive restarts. Whenever a window's sums change and fewer
records arrived than were sent, an alert ``{topic, window: {start, end}, sent, received,
status}`` is written: ``lag`` while the window ended less than ``grace`` ago (records may
still be on their way), ``loss`` after that. Delivery of alerts is at-least-once.

Alerts are JSON, or, given a schema registry (``registry_url``), typed records in
Confluent's framing: Avro of :data:`ALERT_SCHEMA`, registered under the subject
``<alerts topic>-value`` when the query starts, which confluent-kafka's
``AvroDeserializer`` (or ``from_confluent_avro`` in Spark) reads as they are.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StringType, StructType

from gregor.pipelines.generators import REPORT_WINDOW_MS
from gregor.pipelines.topic_io import (
    ensure_topics,
    read_stream,
    with_trigger,
    write_avro,
    write_json,
)

_MILLIS = {"type": "long", "logicalType": "timestamp-millis"}
ALERT_SCHEMA = {"type": "record", "name": "Alert", "namespace": "gregor.monitoring", "fields": [
    {"name": "topic", "type": "string"},
    {"name": "window", "type": {"type": "record", "name": "Window", "fields": [
        {"name": "start", "type": _MILLIS}, {"name": "end", "type": _MILLIS}]}},
    {"name": "sent", "type": "long"},
    {"name": "received", "type": "long"},
    {"name": "status", "type": {"type": "enum", "name": "Status",
                                "symbols": ["lag", "loss"]}}]}
"""An alert as Avro, when alerts go through a schema registry."""

REPORT_SCHEMA = (
    StructType().add("topic", StringType()).add("window_start", LongType()).add("sent", LongType())
)


@dataclass(frozen=True)
class MonitoringSettings:
    topics: tuple[str, ...]
    reports_topic: str = "producer-reports"
    alerts_topic: str = "monitoring-alerts"
    grace_ms: int = 2 * 60_000
    watermark: str = "30 minutes"
    """How late a record or report may come and still be counted in its window."""
    registry_url: str | None = None
    """A schema registry: alerts are then Avro in Confluent's framing, not JSON."""


def window_counts(raw: DataFrame, settings: MonitoringSettings) -> DataFrame:
    """Per (topic, window_start): records ``received`` and records reported ``sent``."""
    is_report = F.col("topic") == settings.reports_topic
    report = F.from_json(F.col("value").cast("string"), REPORT_SCHEMA)

    def pick(for_report: Column, for_record: Column) -> Column:
        return F.when(is_report, for_report).otherwise(for_record)

    rows = raw.select(
        pick(report.topic, F.col("topic")).alias("topic"),
        pick(F.timestamp_millis(report.window_start),
             F.date_trunc("minute", "timestamp")).alias("window_start"),
        pick(F.lit(0), F.lit(1)).alias("received"),
        pick(report.sent, F.lit(0)).alias("sent"),
    )
    return (
        rows.withWatermark("window_start", settings.watermark)
        .groupBy("topic", "window_start")
        .agg(F.sum("sent").alias("sent"), F.sum("received").alias("received"))
    )


def alerts(counts: DataFrame, grace_ms: int, now_ms: int) -> DataFrame:
    window_end_ms = F.unix_millis("window_start") + REPORT_WINDOW_MS
    return counts.where(F.col("received") < F.col("sent")).select(
        "topic",
        F.struct(F.col("window_start").alias("start"),
                 F.timestamp_millis(window_end_ms).alias("end")).alias("window"),
        "sent", "received",
        F.when(window_end_ms + grace_ms < now_ms, "loss").otherwise("lag").alias("status"),
    )


def start(spark: SparkSession, bootstrap: str, checkpoint: Path, settings: MonitoringSettings,
          available_now: bool = False, max_offsets: int | None = None) -> StreamingQuery:
    ensure_topics(bootstrap, [settings.alerts_topic])
    raw = read_stream(spark, bootstrap, [*settings.topics, settings.reports_topic], max_offsets)
    subject = f"{settings.alerts_topic}-value"
    if settings.registry_url is not None:
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        SchemaRegistryClient({"url": settings.registry_url}).register_schema(
            subject, Schema(json.dumps(ALERT_SCHEMA), "AVRO"))

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        found = alerts(batch, settings.grace_ms, int(time.time() * 1000))
        if settings.registry_url is None:
            write_json(found, bootstrap, settings.alerts_topic, F.col("topic"))
        else:
            write_avro(found, bootstrap, settings.alerts_topic, F.col("topic"),
                       settings.registry_url, subject)

    writer = (window_counts(raw, settings).writeStream.outputMode("update")
              .foreachBatch(write_batch).option("checkpointLocation", str(checkpoint)))
    return with_trigger(writer, available_now).queryName("monitoring").start()
