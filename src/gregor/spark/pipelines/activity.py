"""The activity pipeline: site events (page views, clicks, searches) from ``activity``;
per-page counts per minute and per-user sessions out to ``activity-summaries``.

Two streaming aggregations in append mode, each emitting a result once the watermark
(event time minus ``watermark_delay``) has passed the end of its window, so late
events up to that delay are counted and every result is final when it is written:

* ``page-window``: events per page in tumbling event-time windows, keyed by page;
* ``user-session``: a user's events in a session window that closes after
  ``session_gap`` without activity, keyed by user.

Events later than the watermark are dropped, as Spark does.  The offline copy of the
raw events is :mod:`activity_warehouse`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from gregor.spark.pipelines.activity_events import ACTIVITY_TOPIC
from gregor.spark.pipelines.streams import (
    StreamSettings,
    ensure_topics,
    json_value,
    parse_json,
    read_topics,
    write_topic,
)

SUMMARIES_TOPIC = "activity-summaries"
ACTIVITY_FIELDS = (
    "event_id STRING, user_id STRING, type STRING, page STRING, referrer STRING, "
    "element STRING, query STRING, device STRING, event_time TIMESTAMP"
)
EVENT_TYPES = {"page_view": "page_views", "click": "clicks", "search": "searches"}
"""Event types, and the name of their count in the summaries."""


@dataclass(frozen=True)
class ActivitySettings:
    watermark_delay: str = "1 minute"
    page_window: str = "1 minute"
    session_gap: str = "2 minutes"


def start(
    spark: SparkSession, streams: StreamSettings, activity: ActivitySettings | None = None
) -> list[StreamingQuery]:
    activity = activity or ActivitySettings()
    ensure_topics(streams, [ACTIVITY_TOPIC, SUMMARIES_TOPIC])
    summaries = streams.topic(SUMMARIES_TOPIC)
    return [
        write_topic(
            _page_windows(site_events(spark, streams, activity), activity, summaries),
            streams,
            "activity-pages",
        ),
        write_topic(
            _sessions(site_events(spark, streams, activity), activity, summaries),
            streams,
            "activity-sessions",
        ),
    ]


def site_events(
    spark: SparkSession, streams: StreamSettings, activity: ActivitySettings
) -> DataFrame:
    """Well-formed site events with a watermark on their event time."""
    events = parse_json(read_topics(spark, streams, [ACTIVITY_TOPIC]), ACTIVITY_FIELDS)
    return events.where(
        F.col("user_id").isNotNull()
        & F.col("page").isNotNull()
        & F.col("type").isin(list(EVENT_TYPES))
        & F.col("event_time").isNotNull()
    ).withWatermark("event_time", activity.watermark_delay)


def _counts_by_type() -> list[Column]:
    return [F.count("*").alias("events")] + [
        F.count_if(F.col("type") == kind).alias(name) for kind, name in EVENT_TYPES.items()
    ]


def _page_windows(events: DataFrame, activity: ActivitySettings, topic: str) -> DataFrame:
    windows = events.groupBy(F.window("event_time", activity.page_window), "page").agg(
        *_counts_by_type()
    )
    start_ms = F.unix_millis("window.start").cast("string")
    return windows.select(
        F.lit(topic).alias("topic"),
        F.col("page").alias("key"),
        json_value(
            F.concat_ws("-", F.lit("page"), "page", start_ms).alias("summary_id"),
            F.lit("page-window").alias("kind"),
            "page",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "events",
            *EVENT_TYPES.values(),
        ).alias("value"),
    )


def _sessions(events: DataFrame, activity: ActivitySettings, topic: str) -> DataFrame:
    sessions = events.groupBy(
        F.session_window("event_time", activity.session_gap).alias("session"), "user_id"
    ).agg(
        *_counts_by_type(),
        F.size(F.collect_set("page")).alias("distinct_pages"),
        F.max("event_time").alias("last_event_time"),
    )
    start_ms = F.unix_millis("session.start").cast("string")
    return sessions.select(
        F.lit(topic).alias("topic"),
        F.col("user_id").alias("key"),
        json_value(
            F.concat_ws("-", F.lit("session"), "user_id", start_ms).alias("summary_id"),
            F.lit("user-session").alias("kind"),
            "user_id",
            F.col("session.start").alias("session_start"),
            F.col("session.end").alias("session_end"),
            "events",
            *EVENT_TYPES.values(),
            "distinct_pages",
            "last_event_time",
        ).alias("value"),
    )
