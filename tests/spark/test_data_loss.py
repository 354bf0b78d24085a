"""Records deleted under a streaming query before it read them (what retention does),
seen end to end through ``readStream.format("gregor")`` with a checkpoint.

The query runs with ``trigger(availableNow=True)`` from one checkpoint several times:
records are deleted with DeleteRecords between two runs, so the deletion is certain to
fall on records the query has not read yet, with no race against a running trigger.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

Row = tuple[int, int, bytes]
"""(partition, offset, value) of a record."""


def create_topic(bootstrap: str) -> str:
    topic = f"loss-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    return topic


def produce(bootstrap: str, topic: str, first: int, count: int) -> list[Row]:
    """``count`` records alternating between partitions 0 and 1, as delivered."""
    delivered: list[Row] = []

    def on_delivery(error: Any, message: Any) -> None:
        assert error is None, error
        delivered.append((message.partition(), message.offset(), message.value()))

    producer = Producer({"bootstrap.servers": bootstrap})
    for index in range(first, first + count):
        producer.produce(topic, f"v{index}".encode(), partition=index % 2, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    return delivered


def delete_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, partition, offset)]).values():
        future.result(30)


def run(
    spark: SparkSession, bootstrap: str, topic: str, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    """One availableNow run of the query from its checkpoint into Parquet."""
    query = (
        spark.readStream.format("gregor")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
        .load()
        .selectExpr("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)


def output(spark: SparkSession, tmp_path: Path) -> list[Row]:
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    return sorted((r.partition, r.offset, bytes(r.value)) for r in rows)


def lose_unread_records(spark: SparkSession, bootstrap: str, tmp_path: Path, fail: bool) -> Any:
    """Read 40 records, then produce 40 more and delete partition 0 below offset 30
    (offsets 20-29 there were never read), then produce 20 more.  Returns the topic and
    everything that survives in it."""
    topic = create_topic(bootstrap)
    produced = produce(bootstrap, topic, 0, 40)
    run(spark, bootstrap, topic, tmp_path, fail)
    assert output(spark, tmp_path) == sorted(produced)

    produced += produce(bootstrap, topic, 40, 40)
    delete_before(bootstrap, topic, 0, 30)
    produced += produce(bootstrap, topic, 80, 20)
    read_before = {(p, o) for p, o, _ in output(spark, tmp_path)}
    surviving = [r for r in produced if r[0] != 0 or r[1] >= 30 or (r[0], r[1]) in read_before]
    return topic, sorted(surviving)


def test_fail_on_data_loss_stops_the_query_naming_topic_partition_and_offsets(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    topic, _ = lose_unread_records(spark, broker.bootstrap, tmp_path, fail=True)
    with pytest.raises(StreamingQueryException) as failure:
        run(spark, broker.bootstrap, topic, tmp_path, fail_on_data_loss=True)
    message = str(failure.value)
    assert f"{topic}-0: expected to read from offset 20" in message
    assert "earliest available offset is 30" in message
    assert "failOnDataLoss=false" in message


def test_tolerated_data_loss_skips_to_the_earliest_offset_and_delivers_the_rest(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    topic, surviving = lose_unread_records(spark, broker.bootstrap, tmp_path, fail=False)
    run(spark, broker.bootstrap, topic, tmp_path, fail_on_data_loss=False)
    assert output(spark, tmp_path) == surviving

    # The query goes on from where it is, not from the deleted offsets.
    more = produce(broker.bootstrap, topic, 100, 10)
    run(spark, broker.bootstrap, topic, tmp_path, fail_on_data_loss=False)
    assert output(spark, tmp_path) == sorted(surviving + more)
