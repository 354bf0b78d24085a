"""Jobs written for Spark's Kafka source, run with ``format("gregor")``: the options and
behaviours of https://spark.apache.org/docs/latest/streaming/structured-streaming-kafka-integration.html
where the source had differed from what such a job expects.

Each test makes its own small topics on the shared broker; streaming tests run one
micro-batch at a time (``trigger(once=True)`` or ``availableNow``) into Parquet.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from confluent_kafka.error import KafkaException
from pyspark.errors import IllegalArgumentException, StreamingQueryException
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql.streaming import StreamingQuery

from gregor.spark import JAR


def create_topic(bootstrap: str, partitions: int, name: str | None = None) -> str:
    """A topic of ``partitions``; a name just deleted is taken again as soon as the broker
    has let it go."""
    topic = name or f"opts-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
            return topic
        except KafkaException:
            if time.monotonic() > deadline:
                raise


def delete_topic(bootstrap: str, topic: str) -> None:
    """Deleted, and gone from metadata, which is what the source asks."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} still in metadata"


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    """``counts[p]`` records into partition ``p``, values naming partition and index."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for partition, count in counts.items():
        for index in range(count):
            producer.produce(topic, value=f"{partition}-{index}".encode(), partition=partition)
    assert producer.flush(30) == 0


def offsets(df: DataFrame) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())


def run_once(spark: SparkSession, source_format: str, bootstrap: str, work: Path,
             available_now: bool = False, **options: str) -> StreamingQuery:
    """One run of a stream from ``work``'s checkpoint into ``work``'s Parquet files,
    ended (or failed: awaitTermination raises)."""
    stream = (spark.readStream.format(source_format)
              .option("kafka.bootstrap.servers", bootstrap).options(**options).load())
    writer = (stream.select("partition", "offset").writeStream.format("parquet")
              .option("path", str(work / "out"))
              .option("checkpointLocation", str(work / "checkpoint")))
    query = (writer.trigger(availableNow=True) if available_now
             else writer.trigger(once=True)).start()
    query.awaitTermination(120)
    assert not query.isActive
    return query


def written(spark: SparkSession, work: Path) -> list[tuple[int, int]]:
    return offsets(spark.read.parquet(str(work / "out")))


@pytest.fixture
def jvm_only() -> None:
    if not JAR.exists():
        pytest.skip("no JDK: the JVM source was not built")


def test_bad_options_fail_when_the_dataframe_is_made(
    spark: SparkSession, broker: Any, jvm_only: None
) -> None:
    """Spark's Kafka source refuses bad options in load(), before any query runs."""
    topic = create_topic(broker.bootstrap, 1)

    def load(stream: bool, **options: str) -> DataFrame:
        reader = spark.readStream if stream else spark.read
        return reader.format("gregor").options(**options).load()

    given = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic}
    with pytest.raises(IllegalArgumentException, match="'startingOffsets': invalid per-part"):
        load(False, **given, startingOffsets='{"t": [1]}')
    with pytest.raises(IllegalArgumentException, match="'kafka.auto.offset.reset' is not supp"):
        load(True, **given, **{"kafka.auto.offset.reset": "earliest"})
    with pytest.raises(IllegalArgumentException, match="'kafka.bootstrap.servers' is required"):
        load(True, subscribe=topic)
    with pytest.raises(IllegalArgumentException, match="exactly one of"):
        load(False, **given, subscribePattern="opts-.*")
    # What only one kind of query refuses waits until it is known which kind this is.
    batch_only = load(False, **given, endingOffsets="latest")
    assert batch_only.count() == 0
    with pytest.raises(StreamingQueryException, match="'endingOffsets' is not valid for stream"):
        stream = load(True, **given, endingOffsets="latest")
        stream.writeStream.format("noop").trigger(once=True).start().awaitTermination(60)


def test_a_schema_given_to_the_reader_is_refused(
    spark: SparkSession, broker: Any, jvm_only: None
) -> None:
    topic = create_topic(broker.bootstrap, 1)
    produce(broker.bootstrap, topic, {0: 3})

    def reader() -> DataFrameReader:
        return spark.read.format("gregor").option(
            "kafka.bootstrap.servers", broker.bootstrap).option("subscribe", topic)

    with pytest.raises(IllegalArgumentException, match="fixed schema"):
        reader().schema("value string").load().collect()
    same = reader().load().schema
    assert [bytes(r.value) for r in reader().schema(same).load().collect()] == [
        b"0-0", b"0-1", b"0-2"]


@pytest.mark.parametrize("source_format", ["gregor", "gregor_python"], ids=["jvm", "python"])
def test_subscribe_pattern_selects_the_topics_it_is_found_in(
    spark: SparkSession, broker: Any, source_format: str
) -> None:
    """Spark's Kafka source searches the pattern in topic names (SubscribePatternStrategy:
    findFirstIn), so "orders" also selects "orders-eu"; anchors select one topic."""
    prefix = f"opts-{uuid.uuid4().hex[:8]}"
    names = [f"{prefix}-orders", f"{prefix}-orders-eu", f"x{prefix}-orders"]
    for index, name in enumerate(names):
        create_topic(broker.bootstrap, 1, name=name)
        produce(broker.bootstrap, name, {0: index + 1})

    def topics(pattern: str) -> list[str]:
        df = (spark.read.format(source_format).option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribePattern", pattern).load())
        return sorted(r.topic for r in df.select("topic").collect())

    assert topics(f"{prefix}-orders") == sorted([names[0]] + [names[1]] * 2 + [names[2]] * 3)
    assert topics(f" ^{prefix}-orders$ ") == [names[0]]


@pytest.mark.parametrize("source_format", ["gregor", "gregor_python"], ids=["jvm", "python"])
def test_max_records_per_partition_and_min_partitions_cut_tasks_as_spark(
    spark: SparkSession, broker: Any, source_format: str
) -> None:
    """Spark's KafkaOffsetRangeCalculator: maxRecordsPerPartition cuts every range into
    ceil(size / max) tasks; minPartitions leaves ranges too small to split whole and shares
    the rest of its count among the large ones (50, 3, 3 offsets at minPartitions=10:
    8 + 1 + 1 tasks, where sharing among all would give 9 + 1 + 1)."""
    topic = create_topic(broker.bootstrap, 3)
    produce(broker.bootstrap, topic, {0: 50, 1: 3, 2: 3})
    expected = [(0, o) for o in range(50)] + [(1, o) for o in range(3)] + [
        (2, o) for o in range(3)]

    def reader() -> DataFrameReader:
        return spark.read.format(source_format).option(
            "kafka.bootstrap.servers", broker.bootstrap).option("subscribe", topic)

    capped = reader().option("maxRecordsPerPartition", "4").load().select("partition", "offset")
    sizes = capped.rdd.glom().map(len).collect()
    assert sorted(sizes) == [3] * 4 + [4] * 11, sizes  # 50 = 3 + 3 + 11 * 4; 3; 3
    assert offsets(capped) == expected

    spread = reader().option("minPartitions", "10").load().select("partition", "offset")
    assert sorted(spread.rdd.glom().map(len).collect()) == [3, 3, 6, 6, 6, 6, 6, 6, 7, 7]
    assert offsets(spread) == expected


@pytest.mark.parametrize("source_format", ["gregor", "gregor_python"], ids=["jvm", "python"])
def test_a_topic_created_again_below_the_checkpoint_is_data_loss(
    spark: SparkSession, broker: Any, source_format: str, tmp_path: Path
) -> None:
    """A topic deleted and created again under a stream ends before the checkpointed
    offsets: Spark reports the change as data loss (failOnDataLoss) and, when told to go
    on, reads on from the new log end; a stream that waited for the old offsets would
    skip the new records below them without a word."""
    topic = create_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, {0: 10, 1: 10})
    common = {"subscribe": topic, "fetchOffset.retryIntervalMs": "10"}
    run_once(spark, source_format, broker.bootstrap, tmp_path, startingOffsets="earliest",
             **common)
    assert len(written(spark, tmp_path)) == 20

    delete_topic(broker.bootstrap, topic)
    create_topic(broker.bootstrap, 2, name=topic)
    produce(broker.bootstrap, topic, {0: 3, 1: 3})
    with pytest.raises(StreamingQueryException, match=rf"{topic}-0: offset was changed from "
                       r"10 to 3.*failOnDataLoss=false"):
        run_once(spark, source_format, broker.bootstrap, tmp_path, **common)

    query = run_once(spark, source_format, broker.bootstrap, tmp_path, failOnDataLoss="false",
                     **common)
    assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {
        topic: {"0": 3, "1": 3}}
    produce(broker.bootstrap, topic, {0: 2, 1: 2})
    run_once(spark, source_format, broker.bootstrap, tmp_path, failOnDataLoss="false", **common)
    assert written(spark, tmp_path) == sorted(
        [(p, o) for p in (0, 1) for o in range(10)] + [(p, o) for p in (0, 1) for o in (3, 4)])


@pytest.mark.parametrize("source_format", ["gregor", "gregor_python"], ids=["jvm", "python"])
def test_available_now_reports_a_deleted_topic(
    spark: SparkSession, broker: Any, source_format: str, tmp_path: Path
) -> None:
    """Spark's availableNow run fails on a subscribed topic deleted since the last run
    (failOnDataLoss), and with failOnDataLoss=false forgets it, as a running stream does."""
    kept, deleted = create_topic(broker.bootstrap, 1), create_topic(broker.bootstrap, 1)
    produce(broker.bootstrap, kept, {0: 4})
    produce(broker.bootstrap, deleted, {0: 5})
    common = {"subscribe": f"{kept},{deleted}", "startingOffsets": "earliest"}
    run_once(spark, source_format, broker.bootstrap, tmp_path, available_now=True, **common)
    assert len(written(spark, tmp_path)) == 9

    delete_topic(broker.bootstrap, deleted)
    with pytest.raises(StreamingQueryException, match=rf"{deleted}-0 no longer exist"):
        run_once(spark, source_format, broker.bootstrap, tmp_path, available_now=True, **common)
    produce(broker.bootstrap, kept, {0: 2})
    query = run_once(spark, source_format, broker.bootstrap, tmp_path, available_now=True,
                     failOnDataLoss="false", **common)
    assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {kept: {"0": 6}}
    assert len(written(spark, tmp_path)) == 11


@pytest.mark.parametrize("source_format", ["gregor", "gregor_python"], ids=["jvm", "python"])
def test_assign_reads_the_assigned_partitions_that_exist(
    spark: SparkSession, broker: Any, source_format: str
) -> None:
    """As Spark's AssignStrategy: a partition that does not exist (yet) is left out, not
    waited for as a leader that never comes."""
    topic = create_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, {0: 2, 1: 3})
    df = (spark.read.format(source_format).option("kafka.bootstrap.servers", broker.bootstrap)
          .option("assign", json.dumps({topic: [1, 5]})).load())
    assert offsets(df) == [(1, 0), (1, 1), (1, 2)]


@pytest.mark.parametrize("source_format", ["gregor", "gregor_python"], ids=["jvm", "python"])
def test_an_added_partition_whose_first_records_are_gone_is_data_loss(
    spark: SparkSession, broker: Any, source_format: str, tmp_path: Path
) -> None:
    """A stream reads a partition added under it from offset 0; if records were deleted
    before it saw the partition, Spark reports that (failOnDataLoss) or reads what is left."""
    topic = create_topic(broker.bootstrap, 1)
    produce(broker.bootstrap, topic, {0: 3})
    run_once(spark, source_format, broker.bootstrap, tmp_path, subscribe=topic,
             startingOffsets="earliest")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    produce(broker.bootstrap, topic, {1: 5})
    for future in admin.delete_records([KafkaTopicPartition(topic, 1, 2)]).values():
        future.result(30)

    with pytest.raises(StreamingQueryException,
                       match=rf"{topic}-1: added partition starts at offset 2, not 0"):
        run_once(spark, source_format, broker.bootstrap, tmp_path, subscribe=topic)
    run_once(spark, source_format, broker.bootstrap, tmp_path, subscribe=topic,
             failOnDataLoss="false")
    assert written(spark, tmp_path) == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 3), (1, 4)]


def test_progress_reports_offsets_behind_latest_as_spark(
    spark: SparkSession, broker: Any, jvm_only: None, tmp_path: Path
) -> None:
    """Spark's Kafka source puts how far each micro-batch ends behind the log ends in the
    query progress (sources[].metrics); monitoring written for it reads these names."""
    topic = create_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, {0: 10, 1: 2})
    query = run_once(spark, "gregor", broker.bootstrap, tmp_path, available_now=True,
                     subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="6")
    metrics = [p["sources"][0]["metrics"] for p in query.recentProgress if p["numInputRows"]]
    # Budgets of 6 shared max-min fairly: ends (4, 2), (10, 2).
    assert metrics == [
        {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "6",
         "avgOffsetsBehindLatest": "3.0"},
        {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "0",
         "avgOffsetsBehindLatest": "0.0"},
    ]


def test_a_batch_write_takes_sparks_default_save_mode(
    spark: SparkSession, broker: Any, jvm_only: None
) -> None:
    """The integration guide writes a batch without mode(): ErrorIfExists, Spark's default,
    which its Kafka sink takes as append; overwrite and ignore are refused."""
    topic = create_topic(broker.bootstrap, 1)
    rows = spark.range(3).selectExpr("CAST(id AS STRING) AS key",
                                     "CAST(id * 10 AS STRING) AS value")

    def writer(df: DataFrame) -> Any:
        return df.write.format("gregor").option(
            "kafka.bootstrap.servers", broker.bootstrap).option("topic", topic)

    writer(rows).save()
    writer(rows.limit(1)).mode("append").save()
    for refused in ("overwrite", "ignore"):
        with pytest.raises(IllegalArgumentException, match=f"save mode {refused} is not allowed"):
            writer(rows).mode(refused).save()
    read = (spark.read.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic).load().collect())
    assert sorted((bytes(r.key), bytes(r.value)) for r in read) == [
        (b"0", b"0"), (b"0", b"0"), (b"1", b"10"), (b"2", b"20")]
