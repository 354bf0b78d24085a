"""activity: page views, clicks and searches in ``activity``; windowed per-page counts and
per-user sessions out to ``activity-summaries``, told apart by a ``kind`` field.

* ``page_counts``: events per page and action in tumbling 1-minute event-time windows.
* ``session``: a user's events separated by less than the session gap (5 minutes).

Both are event-time aggregations with a 2-minute watermark: an event more than two
minutes older than the newest event seen may be dropped, and its window's state is
released. Page counts use output mode update, so a count is published early and again as
it grows: the latest record per (page, window start) is the current one. Sessions use
append mode (the only one Spark supports for session windows): a session is published
once, when the watermark passes its end, i.e. 2 minutes after it timed out. Delivery
into the summaries topic is at-least-once, as with Spark's Kafka sink.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StringType, StructType

from gregor.pipelines.topic_io import (
    ensure_topics,
    parse_json,
    read_stream,
    with_trigger,
    write_json,
)

EVENT_SCHEMA = (
    StructType()
    .add("user_id", StringType())
    .add("page", StringType())
    .add("action", StringType())
    .add("ts", LongType())
)


@dataclass(frozen=True)
class ActivitySettings:
    activity_topic: str = "activity"
    summaries_topic: str = "activity-summaries"
    window: str = "1 minute"
    watermark: str = "2 minutes"
    session_gap: str = "5 minutes"


def _events(spark: SparkSession, bootstrap: str, settings: ActivitySettings,
            max_offsets: int | None) -> DataFrame:
    raw = read_stream(spark, bootstrap, [settings.activity_topic], max_offsets)
    return parse_json(raw, EVENT_SCHEMA).withWatermark("event_time", settings.watermark)


def page_counts(events: DataFrame, settings: ActivitySettings) -> DataFrame:
    counts = events.groupBy(F.window("event_time", settings.window), "page").agg(
        F.count("*").alias("events"),
        *(F.count_if(F.col("action") == action).alias(column)
          for action, column in (("view", "views"), ("click", "clicks"), ("search", "searches"))),
    )
    return counts.select(
        F.lit("page_counts").alias("kind"), "page",
        F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
        "events", "views", "clicks", "searches",
    )


def sessions(events: DataFrame, settings: ActivitySettings) -> DataFrame:
    per_user = events.groupBy(F.session_window("event_time", settings.session_gap), "user_id")
    summary = per_user.agg(F.count("*").alias("events"), F.collect_set("page").alias("pages"))
    return summary.select(
        F.lit("session").alias("kind"), "user_id",
        F.col("session_window.start").alias("session_start"),
        F.col("session_window.end").alias("session_end"),
        "events", F.array_sort("pages").alias("pages"),
    )


def _start_query(summaries: DataFrame, key: str, mode: str, name: str, bootstrap: str,
                 checkpoint: Path, settings: ActivitySettings, available_now: bool,
                 ) -> StreamingQuery:
    """Written by foreachBatch because Spark accepts only append mode for a Python data
    source's stream writer; the connector's batch writer takes any micro-batch."""

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        write_json(batch, bootstrap, settings.summaries_topic, F.col(key))

    writer = (
        summaries.writeStream.outputMode(mode).foreachBatch(write_batch)
        .option("checkpointLocation", str(checkpoint / name))
    )
    return with_trigger(writer, available_now).queryName(f"activity-{name}").start()


def start(spark: SparkSession, bootstrap: str, checkpoint: Path,
          settings: ActivitySettings = ActivitySettings(), available_now: bool = False,
          max_offsets: int | None = None) -> list[StreamingQuery]:
    """Two queries (Spark runs one stateful aggregation per query), each with its own
    directory under ``checkpoint``."""
    ensure_topics(bootstrap, [settings.summaries_topic])
    events = _events(spark, bootstrap, settings, max_offsets)
    return [
        _start_query(page_counts(events, settings), "page", "update", "page-counts", bootstrap,
                     checkpoint, settings, available_now),
        _start_query(sessions(events, settings), "user_id", "append", "sessions", bootstrap,
                     checkpoint, settings, available_now),
    ]
