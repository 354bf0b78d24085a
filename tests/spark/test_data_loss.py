"""Records deleted under a streaming query before it read them (what retention does),
seen end to end through ``readStream.format("gregor")`` with a checkpoint.

The first tests run the query with ``trigger(availableNow=True)`` from one checkpoint
several times: records are deleted with DeleteRecords between two runs, so the deletion
is certain to fall on records the query has not read yet, with no race against a running
trigger.

The retention tests delete records the way production does, by the broker's retention
(a broker of their own that checks retention every 200 ms), under a query that is
running: its first micro-batch is held in ``foreachBatch`` until retention has deleted
the records right after it, so the deletion is certain to hit records the query has not
read yet, without a race and without sleeping.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from gregor.broker.process import BrokerProcess

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


# --- Retention under a running query -------------------------------------------------

TIMEOUT_S = 60.0
HOUR_MS = 3600_000
OLD_RECORDS = 60
"""Partition 0 starts with this many records three hours old, which retention.ms=1h
deletes once it is turned on; its later records and all of partition 1 are new."""


@pytest.fixture(scope="module")
def retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The shared test broker checks retention every 5 minutes (Kafka's default), which
    would never fire within a test; this one checks every 200 ms."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("retention-broker") / "data",
        overrides={"log.retention.check.interval.ms": "200"},
    )
    process.start()
    yield process
    process.stop()


def produce_at(
    bootstrap: str, topic: str, partition: int, values: list[bytes], timestamp_ms: int
) -> list[Row]:
    """``values`` into one partition with the given record timestamp, as delivered."""
    delivered: list[Row] = []

    def on_delivery(error: Any, message: Any) -> None:
        assert error is None, error
        delivered.append((message.partition(), message.offset(), message.value()))

    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(
            topic, value, partition=partition, timestamp=timestamp_ms, on_delivery=on_delivery
        )
    assert producer.flush(30) == 0
    return delivered


def aged_topic(bootstrap: str) -> tuple[str, list[Row]]:
    """A topic whose partition 0 holds ``OLD_RECORDS`` records from three hours ago in
    one segment, followed by 20 new ones in the next, and partition 1 holds 40 new ones.

    ``segment.ms=1h`` is measured on record timestamps (as in Kafka), so the first new
    record rolls a segment exactly at offset ``OLD_RECORDS``: once retention.ms=1h is
    set, retention deletes offsets ``[0, OLD_RECORDS)`` of partition 0 and nothing else.
    Until then the topic keeps everything (the default retention.ms is 7 days).
    """
    topic = f"retention-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"segment.ms": str(HOUR_MS)}
    admin.create_topics([NewTopic(topic, 2, 1, config=configs)])[topic].result(30)
    now = int(time.time() * 1000)
    old = [f"old{i}".encode() for i in range(OLD_RECORDS)]
    produced = produce_at(bootstrap, topic, 0, old, now - 3 * HOUR_MS)
    produced += produce_at(bootstrap, topic, 0, [f"new0-{i}".encode() for i in range(20)], now)
    produced += produce_at(bootstrap, topic, 1, [f"new1-{i}".encode() for i in range(40)], now)
    return topic, produced


def expire_old_records(bootstrap: str, topic: str) -> None:
    """Turn on retention.ms=1h and wait until the broker's retention has deleted the old
    segment of partition 0 (nothing else is old enough to go)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(
        "retention.ms", str(HOUR_MS), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    wait_until(
        lambda: log_starts(bootstrap, topic) == (OLD_RECORDS, 0),
        f"retention to delete offsets below {OLD_RECORDS} of {topic}-0",
    )


def log_starts(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "log-starts"})
    try:
        low = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), 30, cached=False)[0]
            for p in (0, 1)
        ]
    finally:
        consumer.close()
    return low[0], low[1]


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class HeldSink:
    """``foreachBatch`` target (it runs in this process): keeps every row delivered, and
    holds the first micro-batch until :meth:`release`, so that retention can delete the
    records right after it while the query is running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: list[Row] = []
        self.first_batch_written = threading.Event()
        self._released = threading.Event()

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        rows = [(r.partition, r.offset, bytes(r.value)) for r in frame.collect()]
        with self._lock:
            self._rows.extend(rows)
        if not self.first_batch_written.is_set():
            self.first_batch_written.set()
            if not self._released.wait(TIMEOUT_S):
                raise TimeoutError("the test never released the first micro-batch")

    def release(self) -> None:
        self._released.set()

    @property
    def rows(self) -> list[Row]:
        with self._lock:
            return sorted(self._rows)


def start_slow_query(
    spark: SparkSession, bootstrap: str, topic: str, tmp_path: Path, fail: bool, sink: HeldSink
) -> StreamingQuery:
    """A query reading 10 offsets per micro-batch (5 per partition) with a processing-time
    trigger, so the first batch reads offsets 0-4 of each partition and no more."""
    return (
        spark.readStream.format("gregor")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10")
        .option("failOnDataLoss", str(fail).lower())
        .load()
        .selectExpr("partition", "offset", "value")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def expire_under_running_query(
    spark: SparkSession, bootstrap: str, tmp_path: Path, fail: bool
) -> tuple[str, list[Row], StreamingQuery, HeldSink]:
    """Start the query, let its first micro-batch read offsets 0-4 of each partition,
    have retention delete offsets 0-59 of partition 0 while that batch is held, then
    let the query go on."""
    topic, produced = aged_topic(bootstrap)
    sink = HeldSink()
    query = start_slow_query(spark, bootstrap, topic, tmp_path, fail, sink)
    try:
        assert sink.first_batch_written.wait(TIMEOUT_S), query.exception()
        assert sink.rows == sorted(r for r in produced if r[1] < 5)
        expire_old_records(bootstrap, topic)
    except BaseException:
        query.stop()
        raise
    finally:
        sink.release()
    return topic, produced, query, sink


def test_retention_under_a_running_query_fails_it_naming_topic_partition_and_offsets(
    spark: SparkSession, retention_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic, _, query, sink = expire_under_running_query(
        spark, retention_broker.bootstrap, tmp_path, fail=True
    )
    try:
        with pytest.raises(StreamingQueryException) as failure:
            query.awaitTermination(TIMEOUT_S)
    finally:
        query.stop()
    message = str(failure.value)
    assert (
        f"{topic}-0: expected to read from offset 5, but the earliest available offset is "
        f"{OLD_RECORDS}" in message
    )
    assert "failOnDataLoss=false" in message
    # Nothing past the first batch of partition 0 was delivered.
    assert all(offset < 5 for partition, offset, _ in sink.rows if partition == 0)


def test_retention_under_a_running_query_is_skipped_and_logged_with_fail_on_data_loss_false(
    spark: SparkSession,
    retention_broker: BrokerProcess,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    bootstrap = retention_broker.bootstrap
    topic, produced, query, sink = expire_under_running_query(
        spark, bootstrap, tmp_path, fail=False
    )
    try:
        surviving = sorted(r for r in produced if r[0] == 1 or r[1] < 5 or r[1] >= OLD_RECORDS)
        wait_until(lambda: len(sink.rows) >= len(surviving) or not query.isActive,
                   "the query to deliver the surviving records")
        assert query.exception() is None
        assert sink.rows == surviving
        # The query goes on after the skip.
        more = produce_at(bootstrap, topic, 0, [b"later"], int(time.time() * 1000))
        wait_until(lambda: len(sink.rows) > len(surviving) or not query.isActive,
                   "the query to deliver a record produced after the skip")
        assert sink.rows == sorted(surviving + more)
    finally:
        query.stop()
    # One warning, for the one skip: offsets 5-59 are not crept through batch by batch.
    # (The JVM source logs it through log4j, after a time and the logger's name.)
    warnings = [line[line.find(f"{topic}-"):] for line in spark_stderr(request)
                if "failOnDataLoss=false" in line]
    assert warnings == [
        f"{topic}-0: expected to read from offset 5, but the earliest available offset is "
        f"{OLD_RECORDS}; skipping the missing records (failOnDataLoss=false)"
    ]


def spark_stderr(request: pytest.FixtureRequest) -> list[str]:
    """Lines the JVM (and so the connector's warnings from Spark's Python workers) wrote
    to stderr during this test so far, still shown in pytest's report.

    The JVM was started in module setup and writes to pytest's global fd capture, which
    ``capfd`` does not see; without fd capture (``-s``) the check cannot be made.
    """
    if request.config.getoption("capture") != "fd":
        pytest.skip("checking Spark's log needs pytest's default --capture=fd")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    err = capture.read_global_capture().err
    sys.stderr.write(err)
    return err.splitlines()
