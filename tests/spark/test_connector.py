"""The ``gregor`` Spark data source against a real broker and a real local SparkSession.

Every test makes its own topics and compares what Spark sees with what was produced,
computed in plain Python from the producer's delivery reports.
"""

from __future__ import annotations

import shutil
import time
import uuid
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from gregor.spark import JAR, PythonSourceWarning, jvm_source_loaded, register
from gregor.spark.partition_leader import FetchSettings
from gregor.spark.partition_range import DataLossError, PartitionRange, ReadSettings
from gregor.spark.partition_reader import read_range

T0 = (int(time.time()) - 3600) * 1000
"""Base CreateTime (ms) of produced records, so timestamp options have known answers.
Recent on purpose: records older than the broker's retention (7 days) get deleted."""


@dataclass(frozen=True)
class Record:
    """A record as the test expects to read it back."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int
    headers: tuple[tuple[str, bytes], ...] | None


def new_topic(bootstrap: str, partitions: int = 3, name: str | None = None) -> str:
    topic = name or f"spark-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    return topic


def produce(
    bootstrap: str, topic: str, count: int, partitions: int = 3, first: int = 0
) -> list[Record]:
    """``count`` records spread unevenly over the partitions, every third with headers and
    every fifth without key; CreateTime = T0 + 1000 * index."""
    delivered: list[Record] = []

    def on_delivery(error: Any, message: Any) -> None:
        assert error is None, error
        delivered.append(
            Record(
                topic,
                message.partition(),
                message.offset(),
                message.key(),
                message.value(),
                message.timestamp()[1],
                sent_headers[(message.partition(), message.value())],
            )
        )

    sent_headers: dict[tuple[int, bytes], tuple[tuple[str, bytes], ...] | None] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for index in range(first, first + count):
        partition = (index % 7) % partitions
        value = f"value-{index}".encode() * (1 + index % 4)
        headers = (("n", str(index).encode()), ("kind", b"third")) if index % 3 == 0 else None
        sent_headers[(partition, value)] = headers
        producer.produce(
            topic,
            value=value,
            key=None if index % 5 == 0 else f"key-{index}".encode(),
            partition=partition,
            timestamp=T0 + 1000 * index,
            headers=list(headers) if headers else None,
            on_delivery=on_delivery,
        )
    assert producer.flush(30) == 0
    return sorted(delivered, key=lambda r: (r.partition, r.offset))


def source(spark: SparkSession, bootstrap: str, source_format: str = "gregor",
           **options: str) -> DataFrame:
    reader = spark.read.format(source_format).option("kafka.bootstrap.servers", bootstrap)
    return reader.options(**options).load()


def as_records(df: DataFrame) -> list[Record]:
    """Spark rows in the shape of :class:`Record` (timestamps back to epoch ms)."""
    with_headers = "headers" in df.columns
    columns = ["topic", "partition", "offset", "key", "value", "unix_millis(timestamp) AS ts"]
    rows = df.selectExpr(*columns, "headers" if with_headers else "NULL AS headers").collect()
    return sorted(
        (
            Record(
                r.topic,
                r.partition,
                r.offset,
                None if r.key is None else bytes(r.key),
                bytes(r.value),
                r.ts,
                None if r.headers is None else tuple((h.key, bytes(h.value)) for h in r.headers),
            )
            for r in rows
        ),
        key=lambda r: (r.topic, r.partition, r.offset),
    )


def without_headers(records: list[Record]) -> list[Record]:
    return [Record(**{**r.__dict__, "headers": None}) for r in records]


def test_batch_read_returns_exactly_what_was_produced(spark: SparkSession, broker: Any,
                                                     source_format: str) -> None:
    topic = new_topic(broker.bootstrap)
    produced = produce(broker.bootstrap, topic, 3000)

    df = source(spark, broker.bootstrap, source_format, subscribe=topic, includeHeaders="true")

    assert as_records(df) == produced
    timestamp_types = df.groupBy("timestampType").count().collect()
    assert [(r.timestampType, r["count"]) for r in timestamp_types] == [(0, 3000)]


def executed_plan(df: DataFrame) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_format_gregor_reads_through_the_jvm_source(spark: SparkSession, broker: Any,
                                                    tmp_path: Path) -> None:
    """What every other test's ``format("gregor")`` runs, batch and streaming: the JVM
    source, wherever set-up could build it; ``gregor_python`` stays the Python source."""
    if not JAR.exists():
        if shutil.which("javac"):
            pytest.fail(f"a JDK is here but set-up built no {JAR} (scripts/build-spark-jar.sh)")
        pytest.skip("no JDK: the JVM source was not built, format('gregor') is Python's")
    assert jvm_source_loaded(spark)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PythonSourceWarning)
        register(spark)
    topic = new_topic(broker.bootstrap, partitions=2)
    produce(broker.bootstrap, topic, 10, partitions=2)

    plan = executed_plan(source(spark, broker.bootstrap, subscribe=topic))
    assert "GregorScan(key, value, topic" in plan and "(Python)" not in plan
    assert "(Python)" in executed_plan(
        source(spark, broker.bootstrap, "gregor_python", subscribe=topic))
    # Only the columns a query uses are read.
    assert "GregorScan(offset)" in executed_plan(
        source(spark, broker.bootstrap, subscribe=topic).select("offset"))

    query = (stream(spark, broker.bootstrap, subscribe=topic).writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    description = query.lastProgress["sources"][0]["description"]
    assert description == f"GregorMicroBatchStream[subscribe=[{topic}]]"


def test_a_query_checkpointed_by_one_path_resumes_on_the_other(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    """Both paths keep the same offsets text in the checkpoint, so a query started on the
    Python source (a machine without a JDK, or before the JVM source) goes on where it
    was on the JVM source, and back."""
    topic = new_topic(broker.bootstrap)
    produced = produce(broker.bootstrap, topic, 300)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    for first, source_format in enumerate(["gregor_python", "gregor", "gregor_python"]):
        df = stream(spark, broker.bootstrap, source_format, subscribe=topic)
        assert sum(run_available_now(df, out, checkpoint)) == (100 if first else 300)
        produced += produce(broker.bootstrap, topic, 100, first=300 + 100 * first)
    assert sink_keys(spark, out) == keys(produced[:-100])


def test_aggregation_through_the_source_matches_plain_python(
    spark: SparkSession, broker: Any
) -> None:
    topic = new_topic(broker.bootstrap)
    produced = produce(broker.bootstrap, topic, 2000)
    expected = {
        p: (
            sum(1 for r in produced if r.partition == p),
            sum(len(r.value) for r in produced if r.partition == p),
            sum(1 for r in produced if r.partition == p and r.key is None),
        )
        for p in range(3)
    }

    df = source(spark, broker.bootstrap, subscribe=topic, minPartitions="6")
    totals = (
        df.selectExpr("partition", "length(value) AS size", "CAST(key IS NULL AS INT) AS keyless")
        .groupBy("partition")
        .agg({"*": "count", "size": "sum", "keyless": "sum"})
    )
    got = {
        r.partition: (r["count(1)"], r["sum(size)"], r["sum(keyless)"]) for r in totals.collect()
    }

    assert got == expected
    assert df.rdd.getNumPartitions() >= 6


def test_schema_is_that_of_sparks_kafka_source(spark: SparkSession, broker: Any) -> None:
    topic = new_topic(broker.bootstrap, partitions=1)
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    expected = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
        ]
    )

    assert source(spark, broker.bootstrap, subscribe=topic).schema == expected
    with_headers = source(spark, broker.bootstrap, subscribe=topic, includeHeaders="true")
    assert with_headers.schema == StructType(
        [*expected.fields, StructField("headers", ArrayType(header))]
    )
    assert with_headers.count() == 0


def test_offset_ranges_assign_and_pattern(spark: SparkSession, broker: Any) -> None:
    prefix = f"spark-{uuid.uuid4().hex[:8]}"
    topic = new_topic(broker.bootstrap, name=f"{prefix}-a")
    other = new_topic(broker.bootstrap, partitions=1, name=f"{prefix}-b")
    produced = produce(broker.bootstrap, topic, 600)
    produced_other = produce(broker.bootstrap, other, 50, partitions=1)

    ranged = source(
        spark,
        broker.bootstrap,
        subscribe=topic,
        startingOffsets=f'{{"{topic}": {{"0": 5, "1": -2, "2": 7}}}}',
        endingOffsets=f'{{"{topic}": {{"0": 10, "1": -1, "2": 8}}}}',
    )
    expected = [
        r
        for r in produced
        if (r.partition == 0 and 5 <= r.offset < 10)
        or r.partition == 1
        or (r.partition == 2 and r.offset == 7)
    ]
    assert as_records(ranged) == without_headers(expected)

    assigned = source(spark, broker.bootstrap, assign=f'{{"{topic}": [1]}}')
    assert as_records(assigned) == without_headers([r for r in produced if r.partition == 1])

    pattern = source(spark, broker.bootstrap, subscribePattern=f"{prefix}-.*")
    assert as_records(pattern) == without_headers(produced + produced_other)


def test_per_partition_offsets_must_name_every_partition(spark: SparkSession, broker: Any) -> None:
    topic = new_topic(broker.bootstrap)
    df = source(
        spark, broker.bootstrap, subscribe=topic, startingOffsets=f'{{"{topic}": {{"0": 0}}}}'
    )
    with pytest.raises(Exception, match="must name every subscribed partition"):
        df.collect()


def test_timestamp_bounds(spark: SparkSession, broker: Any) -> None:
    topic = new_topic(broker.bootstrap)
    produced = produce(broker.bootstrap, topic, 300)
    low, high = T0 + 100_000, T0 + 200_000

    df = source(
        spark,
        broker.bootstrap,
        subscribe=topic,
        startingTimestamp=str(low),
        endingTimestamp=str(high),
    )
    assert as_records(df) == without_headers([r for r in produced if low <= r.timestamp < high])

    per_partition = source(
        spark,
        broker.bootstrap,
        subscribe=topic,
        startingOffsetsByTimestamp=f'{{"{topic}": {{"0": {low}, "1": {high}, "2": 0}}}}',
    )
    starts = {0: low, 1: high, 2: 0}
    expected = [r for r in produced if r.timestamp >= starts[r.partition]]
    assert as_records(per_partition) == without_headers(expected)

    future = str(T0 + 10**9)
    with pytest.raises(Exception, match="no record at or after the starting timestamp"):
        source(spark, broker.bootstrap, subscribe=topic, startingTimestamp=future).collect()
    at_end = source(
        spark,
        broker.bootstrap,
        subscribe=topic,
        startingTimestamp=future,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert at_end.count() == 0


def test_deleted_offsets_are_reported_as_data_loss(spark: SparkSession, broker: Any) -> None:
    topic = new_topic(broker.bootstrap, partitions=1)
    produced = produce(broker.bootstrap, topic, 40, partitions=1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    deleted = admin.delete_records([KafkaTopicPartition(topic, 0, 15)])
    for future in deleted.values():
        future.result(30)
    from_zero = {"startingOffsets": f'{{"{topic}": {{"0": 0}}}}'}

    with pytest.raises(Exception, match=rf"{topic}-0: expected to read from offset 0.* is 15"):
        source(spark, broker.bootstrap, subscribe=topic, **from_zero).collect()
    tolerant = source(spark, broker.bootstrap, subscribe=topic, failOnDataLoss="false", **from_zero)
    assert as_records(tolerant) == without_headers(produced[15:])

    # The same check on the executor side, for offsets deleted after planning.
    fetch = FetchSettings.from_config({"bootstrap.servers": broker.bootstrap})
    settings = ReadSettings(fetch, False, True, 10_000)
    with pytest.raises(DataLossError, match=rf"{topic}-0: .*offset 3.*available offsets are 15"):
        list(read_range(PartitionRange(topic, 0, 3, 30, settings)))
    lenient = ReadSettings(fetch, False, False, 10_000)
    batches = list(read_range(PartitionRange(topic, 0, 3, 30, lenient)))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(15, 30))


def test_batch_write_then_read_back(spark: SparkSession, broker: Any) -> None:
    topic = new_topic(broker.bootstrap)
    rows = [
        (
            f"k{i}" if i % 4 else None,
            f"payload {i}".encode(),
            i % 3 if i % 2 else None,
            [(f"h{i}", bytes([i % 256]))] if i % 5 == 0 else None,
        )
        for i in range(500)
    ]
    schema = (
        "key STRING, value BINARY, partition INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
    )
    spark.createDataFrame(rows, schema).repartition(2).write.format("gregor").mode("append").option(
        "kafka.bootstrap.servers", broker.bootstrap
    ).option("topic", topic).save()

    back = as_records(source(spark, broker.bootstrap, subscribe=topic, includeHeaders="true"))
    got = Counter(
        (r.key.decode() if r.key else None, r.value, r.headers and tuple(r.headers)) for r in back
    )
    want = Counter((k, v, tuple(h) if h else None) for k, v, _p, h in rows)
    assert got == want
    chosen = {r.value: r.partition for r in back}
    assert all(chosen[v] == p for _k, v, p, _h in rows if p is not None)


def test_topic_column_routes_rows_and_missing_topic_is_an_error(
    spark: SparkSession, broker: Any
) -> None:
    first, second = new_topic(broker.bootstrap, 1), new_topic(broker.bootstrap, 1)
    df = spark.createDataFrame(
        [(first if i % 3 else second, f"v{i}") for i in range(60)], "topic STRING, value STRING"
    )
    df.write.format("gregor").mode("append").option(
        "kafka.bootstrap.servers", broker.bootstrap
    ).save()
    assert source(spark, broker.bootstrap, subscribe=first).count() == 40
    assert source(spark, broker.bootstrap, subscribe=second).count() == 20

    with pytest.raises(Exception, match="'topic' option or provide a string column"):
        df.select("value").write.format("gregor").mode("append").option(
            "kafka.bootstrap.servers", broker.bootstrap
        ).save()


def stream(spark: SparkSession, bootstrap: str, source_format: str = "gregor",
           **options: str) -> DataFrame:
    reader = spark.readStream.format(source_format).option("kafka.bootstrap.servers", bootstrap)
    return reader.option("startingOffsets", "earliest").options(**options).load()


def run_available_now(df: DataFrame, out: Path, checkpoint: Path) -> list[int]:
    """Run to the end of what is available now; return the input rows per micro-batch."""
    query = (
        df.selectExpr("topic", "partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def sink_keys(spark: SparkSession, out: Path) -> list[tuple[str, int, int]]:
    rows = spark.read.parquet(str(out)).select("topic", "partition", "offset").collect()
    return sorted((r.topic, r.partition, r.offset) for r in rows)


def keys(records: list[Record]) -> list[tuple[str, int, int]]:
    return sorted((r.topic, r.partition, r.offset) for r in records)


def test_available_now_with_max_offsets_per_trigger_resumes_from_checkpoint(
    spark: SparkSession, broker: Any, tmp_path: Path, source_format: str
) -> None:
    topic = new_topic(broker.bootstrap)
    produced = produce(broker.bootstrap, topic, 900)
    df = stream(spark, broker.bootstrap, source_format, subscribe=topic,
                maxOffsetsPerTrigger="250")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    batches = run_available_now(df, out, checkpoint)
    assert sum(batches) == 900
    assert max(batches) <= 250 and len(batches) == 4
    assert sink_keys(spark, out) == keys(produced)

    produced += produce(broker.bootstrap, topic, 100, first=900)
    assert sum(run_available_now(df, out, checkpoint)) == 100
    assert sink_keys(spark, out) == keys(produced)


def test_pattern_subscription_picks_up_new_topics_from_earliest(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    prefix = f"spark-{uuid.uuid4().hex[:8]}"
    first = new_topic(broker.bootstrap, partitions=1, name=f"{prefix}-1")
    produce(broker.bootstrap, first, 30, partitions=1)
    # startingOffsets=latest: what is there at the start is skipped, but partitions
    # discovered later are read from their earliest offset.
    df = (
        spark.readStream.format("gregor")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribePattern", f"{prefix}-[0-9]+")
        .load()
    )
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert run_available_now(df, out, checkpoint) == []

    second = new_topic(broker.bootstrap, partitions=2, name=f"{prefix}-2")
    new_records = produce(broker.bootstrap, second, 40, partitions=2)
    new_records += produce(broker.bootstrap, first, 5, partitions=1, first=30)
    assert sum(run_available_now(df, out, checkpoint)) == 45
    assert sink_keys(spark, out) == keys(new_records)


def test_partitions_added_to_a_topic_are_read_from_their_earliest_offset(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    topic = new_topic(broker.bootstrap, partitions=1)
    produced = produce(broker.bootstrap, topic, 20, partitions=1)
    df = stream(spark, broker.bootstrap, subscribe=topic)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert sum(run_available_now(df, out, checkpoint)) == 20

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    produced += produce(broker.bootstrap, topic, 30, partitions=3, first=20)
    assert {r.partition for r in produced} == {0, 1, 2}
    assert sum(run_available_now(df, out, checkpoint)) == 30
    assert sink_keys(spark, out) == keys(produced)


def test_stop_and_restart_from_checkpoint_loses_and_duplicates_nothing(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    topic = new_topic(broker.bootstrap)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = stream(spark, broker.bootstrap, subscribe=topic, maxOffsetsPerTrigger="200")

    def start() -> Any:
        return (
            df.selectExpr("topic", "partition", "offset", "value")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    produced = produce(broker.bootstrap, topic, 500)
    query = start()
    query.processAllAvailable()
    produced += produce(broker.bootstrap, topic, 700, first=500)
    query.stop()  # most likely in the middle of the 200-row batches of the second burst

    query = start()
    produced += produce(broker.bootstrap, topic, 300, first=1200)
    query.processAllAvailable()
    query.stop()

    assert sink_keys(spark, out) == keys(produced)


def test_stream_to_stream_through_the_sink(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    source_topic, target_topic = new_topic(broker.bootstrap), new_topic(broker.bootstrap)
    produced = produce(broker.bootstrap, source_topic, 400)

    query = (
        stream(spark, broker.bootstrap, subscribe=source_topic, includeHeaders="true")
        .selectExpr("key", "upper(CAST(value AS STRING)) AS value", "headers", "partition")
        .writeStream.format("gregor")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", target_topic)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None

    back = as_records(
        source(spark, broker.bootstrap, subscribe=target_topic, includeHeaders="true")
    )
    assert Counter((r.partition, r.key, r.value, r.headers) for r in back) == Counter(
        (r.partition, r.key, r.value.upper(), r.headers) for r in produced
    )


def counts_per_partition(df: DataFrame) -> DataFrame:
    """A streaming aggregation as sink rows: key = partition, value = records so far."""
    counts = df.groupBy("partition").count()
    return counts.selectExpr("CAST(partition AS STRING) AS key", "CAST(count AS STRING) AS value")


def aggregate_rows(records: list[Record], partitions: set[int] | None = None) -> Counter:
    """The (key, value) rows of :func:`counts_per_partition` after ``records``, for the
    given partitions only (all by default)."""
    counts = Counter(r.partition for r in records)
    return Counter(
        (str(p).encode(), str(n).encode())
        for p, n in counts.items()
        if partitions is None or p in partitions
    )


def written_rows(spark: SparkSession, bootstrap: str, topic: str) -> Counter:
    return Counter((r.key, r.value) for r in as_records(source(spark, bootstrap, subscribe=topic)))


def run_aggregation(query: Any) -> None:
    assert query.awaitTermination(120)
    assert query.exception() is None


def test_complete_mode_appends_the_whole_aggregate_at_every_micro_batch(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    source_topic, target_topic = new_topic(broker.bootstrap), new_topic(broker.bootstrap)
    writer = (
        counts_per_partition(stream(spark, broker.bootstrap, subscribe=source_topic))
        .writeStream.format("gregor")
        .outputMode("complete")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", target_topic)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
    )
    first = produce(broker.bootstrap, source_topic, 200)
    run_aggregation(writer.start())
    # Only partition 0 changes, but Complete mode writes every partition's count again.
    second = first + produce(broker.bootstrap, source_topic, 50, partitions=1, first=200)
    run_aggregation(writer.start())

    expected = aggregate_rows(first) + aggregate_rows(second)
    assert written_rows(spark, broker.bootstrap, target_topic) == expected


def test_update_mode_writes_the_changed_rows_and_the_python_sink_needs_foreach_batch(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    """Update mode as Spark's Kafka sink: each micro-batch appends the rows it changed.
    The JVM source's table takes it; the Python data source alone is refused by Spark, and
    ``foreachBatch`` with the batch writer does the same there."""
    source_topic, direct_topic, target_topic = (new_topic(broker.bootstrap) for _ in range(3))
    counts = counts_per_partition(stream(spark, broker.bootstrap, subscribe=source_topic))

    def update_mode(sink_format: str, name: str, topic: str) -> Any:
        return (counts.writeStream.format(sink_format)
                .outputMode("update")
                .option("kafka.bootstrap.servers", broker.bootstrap)
                .option("topic", topic)
                .option("checkpointLocation", str(tmp_path / name))
                .trigger(availableNow=True))

    refused = update_mode("gregor_python", "refused", target_topic).start()
    # Spark's own check (V2Writes.buildWriteForMicroBatch); see the writer module.
    with pytest.raises(StreamingQueryException,
                       match="gregor_python does not support Update mode"):
        refused.awaitTermination(120)

    def write_batch(batch: DataFrame, _batch_id: int) -> None:
        batch.write.format("gregor").mode("append").option(
            "kafka.bootstrap.servers", broker.bootstrap
        ).option("topic", target_topic).save()

    workaround = (
        counts.writeStream.foreachBatch(write_batch)
        .outputMode("update")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
    )
    direct = update_mode("gregor", "direct", direct_topic) if JAR.exists() else None
    first = produce(broker.bootstrap, source_topic, 200)
    for writer in (workaround, direct):
        if writer is not None:
            run_aggregation(writer.start())
    second = first + produce(broker.bootstrap, source_topic, 50, partitions=1, first=200)
    for writer in (workaround, direct):
        if writer is not None:
            run_aggregation(writer.start())

    # Update mode writes only the rows that changed: partition 0's.
    expected = aggregate_rows(first) + aggregate_rows(second, partitions={0})
    assert written_rows(spark, broker.bootstrap, target_topic) == expected
    if direct is not None:
        assert written_rows(spark, broker.bootstrap, direct_topic) == expected
