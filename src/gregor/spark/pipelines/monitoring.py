"""The monitoring pipeline: records per topic and minute, against what producers reported
sending; ``lag``, ``loss`` and ``excess`` alerts out to ``monitoring-alerts``.

Producers (the generators of ``gregor pipeline generate``) publish on
``producer-reports`` how many records they sent into each topic per minute of record
timestamps.  This query reads the monitored topics and the reports as one stream, counts
both per (topic, minute) as streaming state (``applyInPandasWithState``), and judges
each window twice as the watermark passes its deadlines (see :mod:`window_audit`).
Records are counted by their Kafka timestamp, so the job needs nothing of their content.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from gregor.spark.pipelines.activity_events import ACTIVITY_TOPIC
from gregor.spark.pipelines.event_publisher import REPORT_WINDOW_MS, REPORTS_TOPIC
from gregor.spark.pipelines.event_time import iso_utc
from gregor.spark.pipelines.retail_events import SALES_TOPIC, SHIPMENTS_TOPIC
from gregor.spark.pipelines.streams import (
    JSON_OPTIONS,
    StreamSettings,
    ensure_topics,
    read_topics,
    write_topic,
)
from gregor.spark.pipelines.window_audit import Deadlines, WindowAudit, next_check_ms, review

ALERTS_TOPIC = "monitoring-alerts"
REPORT_FIELDS = (
    "producer STRING, topic STRING, window_start TIMESTAMP, window_end TIMESTAMP, records LONG"
)
OUTPUT_SCHEMA = "topic STRING, key STRING, value STRING"
STATE_SCHEMA = "observed LONG, reported LONG, lag_checked BOOLEAN"


@dataclass(frozen=True)
class MonitoringSettings:
    topics: tuple[str, ...] = (SALES_TOPIC, SHIPMENTS_TOPIC, ACTIVITY_TOPIC)
    """Topics to audit (before the topic prefix)."""
    lag_after_ms: int = 60_000
    """Records still missing this long after their window ended are lagging..."""
    loss_after_ms: int = 120_000
    """...and lost if still missing after this long (the watermark delay)."""

    @property
    def deadlines(self) -> Deadlines:
        return Deadlines(self.lag_after_ms, self.loss_after_ms)


def start(
    spark: SparkSession, streams: StreamSettings, monitoring: MonitoringSettings | None = None
) -> list[StreamingQuery]:
    monitoring = monitoring or MonitoringSettings()
    deadlines = monitoring.deadlines
    ensure_topics(streams, [*monitoring.topics, REPORTS_TOPIC, ALERTS_TOPIC])
    audited = [streams.topic(t) for t in monitoring.topics]
    records = read_topics(spark, streams, [*monitoring.topics, REPORTS_TOPIC])
    is_report = F.col("topic") == streams.topic(REPORTS_TOPIC)
    report = F.from_json(F.col("value").cast("string"), REPORT_FIELDS, JSON_OPTIONS)
    time_ms = F.when(is_report, F.unix_millis(report["window_start"])).otherwise(
        F.unix_millis("timestamp")
    )
    counts = records.select(
        F.when(is_report, report["topic"]).otherwise(F.col("topic")).alias("audited_topic"),
        (time_ms - time_ms % REPORT_WINDOW_MS).alias("window_start_ms"),
        F.when(is_report, 0).otherwise(1).cast("long").alias("observed"),
        F.when(is_report, F.coalesce(report["records"], F.lit(0))).otherwise(0).alias("reported"),
        F.col("timestamp").alias("event_time"),
        F.unix_millis("timestamp").alias("time_ms"),
    ).where(F.col("audited_topic").isin(audited) & F.col("window_start_ms").isNotNull())
    alerts = (
        counts.withWatermark("event_time", f"{deadlines.loss_after_ms} milliseconds")
        .groupBy("audited_topic", "window_start_ms")
        .applyInPandasWithState(
            Auditor(streams.topic(ALERTS_TOPIC), deadlines),
            OUTPUT_SCHEMA,
            STATE_SCHEMA,
            "append",
            GroupStateTimeout.EventTimeTimeout,
        )
    )
    return [write_topic(alerts, streams, "monitoring")]


@dataclass(frozen=True)
class Auditor:
    """The ``applyInPandasWithState`` function, keyed by (topic, window start)."""

    alerts_topic: str
    deadlines: Deadlines

    def __call__(
        self, key: tuple[str, int], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        topic, start_ms = key[0], int(key[1])
        end_ms = start_ms + REPORT_WINDOW_MS
        audit = WindowAudit(*state.get) if state.exists else WindowAudit()
        watermark = state.getCurrentWatermarkMs()
        for frame in frames:
            # Spark drops rows behind the watermark before they get here; rows exactly
            # at it are dropped too, so that a closed window never reopens.
            on_time = frame[frame["time_ms"] > watermark]
            audit.observed += int(on_time["observed"].sum())
            audit.reported += int(on_time["reported"].sum())
        kinds, final = review(audit, end_ms, watermark, self.deadlines)
        if final:
            state.remove()
        else:
            state.update((audit.observed, audit.reported, audit.lag_checked))
            # Event-time timeouts fire once the watermark is *past* the timestamp.
            state.setTimeoutTimestamp(next_check_ms(audit, end_ms, self.deadlines) - 1)
        rows = [
            (
                self.alerts_topic,
                topic,
                json.dumps(
                    {
                        "alert_id": f"{kind}-{topic}-{start_ms}",
                        "kind": kind,
                        "topic": topic,
                        "window_start": iso_utc(start_ms),
                        "window_end": iso_utc(end_ms),
                        "reported": audit.reported,
                        "observed": audit.observed,
                        "missing": audit.reported - audit.observed,
                    },
                    separators=(",", ":"),
                ),
            )
            for kind in kinds
        ]
        yield pd.DataFrame(rows, columns=["topic", "key", "value"])
