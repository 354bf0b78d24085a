"""warehouse: a topic's records into Parquet partitioned by date, the offline-warehouse path.

Exactly-once per unit of work: each unit (a batch run over a time range, or a micro-batch
of the streaming variant) is written into a hidden temporary directory, which Spark's
readers ignore, and renamed into place in one atomic step. A unit whose directory exists
is skipped, so re-running a range or replaying a micro-batch after a crash adds no rows.
Overlapping ranges are different units: load each record's time once.

Layout: ``OUTPUT/range=FROM-TO/date=YYYY-MM-DD/part-*.parquet`` for batch runs (FROM and
TO in epoch milliseconds), ``OUTPUT/batch=N/date=.../`` for the stream; reading
``OUTPUT`` with ``spark.read.parquet`` gives every record once with ``date`` as a column
(give batch runs and the stream different OUTPUT directories).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from gregor.pipelines.topic_io import read_stream, with_trigger


def warehouse_rows(records: DataFrame) -> DataFrame:
    """Kafka-schema rows as warehouse rows: key and value as text (the pipelines' events
    are JSON), the record's coordinates, and ``date`` (UTC) from the record timestamp."""
    return records.select(
        F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value"),
        "topic", "partition", "offset", "timestamp", F.to_date("timestamp").alias("date"),
    )


def write_once(rows: DataFrame, target: Path) -> bool:
    """Write ``rows`` as date-partitioned Parquet to ``target`` unless it exists; False if
    it did (the unit was written before)."""
    if target.exists():
        return False
    temporary = target.parent / f".tmp-{target.name}-{uuid.uuid4().hex}"
    rows.write.partitionBy("date").parquet(str(temporary))
    try:
        temporary.rename(target)
    except OSError:
        # Another run of the same unit won the rename: its copy stands.
        shutil.rmtree(temporary, ignore_errors=True)
        return False
    return True


def export_range(spark: SparkSession, bootstrap: str, topic: str, start_ms: int, end_ms: int,
                 output: Path) -> bool:
    """Records of ``topic`` with timestamps in [start_ms, end_ms) into ``output``; False
    if this range was exported before."""
    records = (
        spark.read.format("gregor")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingTimestamp", str(start_ms))
        .option("endingTimestamp", str(end_ms))
        .load()
    )
    # Offsets bound the range per partition; a record timestamped out of order can fall
    # inside those offsets, so the timestamps are checked as well.
    in_range = records.where(
        (F.unix_millis("timestamp") >= start_ms) & (F.unix_millis("timestamp") < end_ms))
    output.mkdir(parents=True, exist_ok=True)
    return write_once(warehouse_rows(in_range), output / f"range={start_ms}-{end_ms}")


def start_streaming(spark: SparkSession, bootstrap: str, topic: str, output: Path,
                    checkpoint: Path, available_now: bool = False,
                    max_offsets: int | None = None) -> StreamingQuery:
    """The stream variant: every micro-batch into its own ``batch=N`` directory."""
    output.mkdir(parents=True, exist_ok=True)

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        write_once(warehouse_rows(batch), output / f"batch={batch_id}")

    writer = (read_stream(spark, bootstrap, [topic], max_offsets).writeStream
              .foreachBatch(write_batch).option("checkpointLocation", str(checkpoint)))
    return with_trigger(writer, available_now).queryName("warehouse").start()
