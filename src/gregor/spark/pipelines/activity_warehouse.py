"""The offline-warehouse path: the activity topic's records in Parquet, partitioned by
the UTC date of their event time (``date=YYYY-MM-DD``).

* :func:`load_range` is a batch job: the records whose Kafka timestamp is in
  ``[from, to)``, committed as one unit labelled by the range; loading the same range
  again replaces that unit instead of adding to it.
* :func:`start` is the streaming loader: every micro-batch is committed as its own unit
  (``batch-<id>``) by ``foreachBatch``, exactly once even when Spark re-runs a batch
  after a crash (see :mod:`parquet_commit`).

Each row keeps its topic, partition and offset next to the event's fields, so the
warehouse can always be reconciled with the topic.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from gregor.spark.pipelines.activity import ACTIVITY_FIELDS
from gregor.spark.pipelines.activity_events import ACTIVITY_TOPIC
from gregor.spark.pipelines.event_publisher import MAX_LATENESS_MS
from gregor.spark.pipelines.parquet_commit import PARTITION_COLUMN, commit, is_committed
from gregor.spark.pipelines.streams import (
    JSON_OPTIONS,
    StreamSettings,
    ensure_topics,
    read_topics,
    with_trigger,
)

MS_PER_DAY = 86_400_000
QUERY_NAME = "activity-warehouse"
EVENT_FIELDS = [field.split()[0] for field in ACTIVITY_FIELDS.split(", ")]


def warehouse_rows(records: DataFrame) -> DataFrame:
    """Kafka coordinates, the event's fields and the ``date`` partition column.

    The date is computed from epoch milliseconds rather than with ``to_date`` so that it
    is the UTC date whatever the session's time zone.
    """
    event = F.from_json(F.col("value").cast("string"), ACTIVITY_FIELDS, JSON_OPTIONS)
    event_time = F.coalesce(event["event_time"], F.col("timestamp"))
    day = F.floor(F.unix_millis(event_time) / MS_PER_DAY).cast("int")
    return records.select(
        "topic",
        "partition",
        "offset",
        "timestamp",
        *[event[name].alias(name) for name in EVENT_FIELDS if name != "event_time"],
        event_time.alias("event_time"),
        F.date_from_unix_date(day).cast("string").alias(PARTITION_COLUMN),
    )


def load_range(
    spark: SparkSession,
    streams: StreamSettings,
    output: Path,
    from_ms: int,
    to_ms: int,
    lateness_ms: int = MAX_LATENESS_MS,
) -> list[str]:
    """Load the records with a timestamp in ``[from_ms, to_ms)``; returns the files written.

    The read starts at each partition's first record at or after ``from_ms``, and ends at
    its first record at or after ``to_ms + lateness_ms``, so that records written up to
    ``lateness_ms`` after younger ones (late events) are still found; the timestamp
    filter then keeps exactly the range.
    """
    if to_ms <= from_ms:
        raise ValueError(f"the range is empty: --to ({to_ms}) must be after --from ({from_ms})")
    records = (
        spark.read.format("gregor")
        .options(**streams.kafka_options())
        .option("subscribe", streams.topic(ACTIVITY_TOPIC))
        .option("startingTimestamp", str(from_ms))
        .option("startingOffsetsByTimestampStrategy", "latest")
        .option("endingTimestamp", str(to_ms + lateness_ms))
        .option("failOnDataLoss", str(streams.fail_on_data_loss).lower())
        .load()
    )
    timestamp_ms = F.unix_millis("timestamp")
    in_range = records.where((timestamp_ms >= from_ms) & (timestamp_ms < to_ms))
    return commit(warehouse_rows(in_range), output, f"range-{from_ms}-{to_ms}")


def start(
    spark: SparkSession, streams: StreamSettings, output: Path, from_ms: int | None = None
) -> list[StreamingQuery]:
    """Stream the topic into ``output``, from ``from_ms`` (a timestamp) the first time if
    given, else from ``streams.starting_offsets``."""
    ensure_topics(streams, [ACTIVITY_TOPIC])
    by_timestamp = (
        {}
        if from_ms is None
        else {"startingTimestamp": str(from_ms), "startingOffsetsByTimestampStrategy": "latest"}
    )
    records = read_topics(spark, streams, [ACTIVITY_TOPIC], **by_timestamp)

    def commit_batch(batch: DataFrame, batch_id: int) -> None:
        label = f"batch-{batch_id:012d}"
        if not is_committed(output, label):
            commit(warehouse_rows(batch), output, label)

    writer = records.writeStream.queryName(streams.topic(QUERY_NAME)).foreachBatch(commit_batch)
    return [with_trigger(writer, streams, QUERY_NAME).start()]
