"""The source's output, record by record, against librdkafka's reading of the same topics:
every codec, CreateTime and LogAppendTime, null keys and values, headers, and a compacted
topic with gaps, read whole and in a range that starts inside a batch and ends in a gap;
each through both paths of the source, the JVM one and the Python one.

The broker is this module's own, with a cleaner that looks for work every 100 ms.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from pyspark.sql import SparkSession

from gregor.broker.process import BrokerProcess

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
FORMATS = ["gregor", "gregor_python"]
"""The JVM source (when set-up built it) and the Python data source: both read each topic."""
PARTITIONS = 2
Row = tuple[str, int, int, int, int, bytes | None, bytes | None, tuple | None]
"""topic, partition, offset, timestamp ms, timestamp type, key, value, headers"""


@pytest.fixture(scope="module")
def cleaning_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("exact") / "data",
                            overrides={"log.cleaner.backoff.ms": "100"})
    process.start()
    yield process
    process.stop()


def create(bootstrap: str, name: str, partitions: int = PARTITIONS, **config: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)
    return name


def produce_mixed(bootstrap: str, topic: str, codec: str, count: int, seed: int) -> None:
    """Keys, values and headers of every shape, in batches of several sizes."""
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                         "linger.ms": 5, "batch.size": rng.choice([2000, 20000, 200000])})
    headers_choices: list[list[tuple[str, bytes | None]] | None] = [
        None, None, [("h", b"x")], [("trace", rng.randbytes(16)), ("empty", b""), ("n", None)],
        [("ключ", "значение".encode())],
    ]
    for i in range(count):
        producer.produce(
            topic,
            None if i % 11 == 0 else rng.randbytes(rng.randrange(0, 2000)),
            None if i % 7 == 0 else b"key-%d" % rng.randrange(50),
            partition=i % PARTITIONS,
            timestamp=1_700_000_000_000 + rng.randrange(-10**6, 10**6),
            headers=rng.choice(headers_choices),
        )
        if i % 400 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def librdkafka_rows(bootstrap: str, topics: dict[str, int],
                    ranges: dict[tuple[str, int], tuple[int, int]] | None = None,
                    isolation: str = "read_uncommitted") -> list[Row]:
    """Every record of ``topics`` (name: partition count) up to the log end, or of
    ``ranges`` [start, end) per partition, as a librdkafka consumer hands them out."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "enable.partition.eof": True, "enable.auto.commit": False,
                         "isolation.level": isolation})
    if ranges is None:
        ranges = {}
        for topic, count in topics.items():
            for p in range(count):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), 30)
                ranges[(topic, p)] = (low, high)
    wanted = {tp: r for tp, r in ranges.items() if r[0] < r[1]}
    consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in wanted.items()])
    rows: list[Row] = []
    open_parts = set(wanted)
    deadline = time.monotonic() + 60
    while open_parts and time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.5):
            tp = (m.topic(), m.partition())
            error = m.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                open_parts.discard(tp)
                continue
            offset = m.offset()
            assert offset is not None
            if offset >= wanted[tp][1]:
                open_parts.discard(tp)
                continue
            kind, ms = m.timestamp()
            headers = m.headers()
            rows.append((tp[0], tp[1], offset, ms, kind - 1, m.key(), m.value(),
                         None if headers is None else tuple(headers)))
    consumer.close()
    assert not open_parts, f"librdkafka did not reach the end of {open_parts}"
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


def spark_rows(spark: SparkSession, bootstrap: str, source_format: str,
               **options: str) -> list[Row]:
    df = (spark.read.format(source_format).option("kafka.bootstrap.servers", bootstrap)
          .option("includeHeaders", "true").options(**options).load())
    rows = df.selectExpr("topic", "partition", "offset", "unix_millis(timestamp) AS ms",
                         "timestampType", "key", "value", "headers").collect()

    def blob(value: Any) -> bytes | None:
        return None if value is None else bytes(value)

    out: list[Row] = [
        (r.topic, r.partition, r.offset, r.ms, r.timestampType, blob(r.key), blob(r.value),
         None if r.headers is None else tuple((h.key, blob(h.value)) for h in r.headers))
        for r in rows
    ]
    return sorted(out, key=lambda r: (r[0], r[1], r[2]))


def test_every_codec_and_timestamp_type_matches_librdkafka(spark: SparkSession,
                                                           cleaning_broker: BrokerProcess) -> None:
    bootstrap = cleaning_broker.bootstrap
    prefix = f"exact-{uuid.uuid4().hex[:6]}"
    topics = {}
    for seed, codec in enumerate(CODECS):
        name = create(bootstrap, f"{prefix}-{codec}")
        produce_mixed(bootstrap, name, codec, 1500, seed)
        topics[name] = PARTITIONS
    appended = create(bootstrap, f"{prefix}-append", **{"message.timestamp.type": "LogAppendTime"})
    produce_mixed(bootstrap, appended, "lz4", 500, 99)
    topics[appended] = PARTITIONS

    expected = librdkafka_rows(bootstrap, topics)
    for source_format in FORMATS:
        got = spark_rows(spark, bootstrap, source_format, subscribePattern=f"{prefix}-.*")
        assert len(got) == len(expected) == 5 * 1500 + 500
        assert {r[4] for r in got if r[0] == appended} == {1}
        assert got == expected, source_format


def compact_with_gaps(bootstrap: str, data_dir: Path) -> str:
    """A compacted topic whose cleaned part has gaps, then set back to ``delete`` so that
    nothing changes it while two clients read it."""
    topic = create(bootstrap, f"exact-compacted-{uuid.uuid4().hex[:6]}", partitions=1, **{
        "cleanup.policy": "compact", "segment.bytes": "4096",
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1000,
                         "compression.type": "zstd"})
    for i in range(3000):
        # Every fifth key is written once and stays; the others are overwritten.
        key = b"once-%d" % i if i % 5 == 0 else b"key-%d" % (i % 40)
        producer.produce(topic, None if i % 97 == 0 else b"value-%d" % i, key,
                         headers=[("i", b"%d" % i)] if i % 3 == 0 else None)
        if i % 500 == 0:
            producer.flush(15)
    assert producer.flush(30) == 0
    deadline = time.monotonic() + 60
    while len(librdkafka_rows(bootstrap, {topic: 1})) > 1500:
        assert time.monotonic() < deadline, "the cleaner did not compact the topic"
        time.sleep(0.5)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    # A pass under way when the policy changed still finishes: wait until reads agree.
    previous = None
    while (rows := librdkafka_rows(bootstrap, {topic: 1})) != previous:
        previous = rows
        time.sleep(0.5)
    return topic


def test_compacted_topic_with_gaps_matches_librdkafka(spark: SparkSession,
                                                      cleaning_broker: BrokerProcess) -> None:
    bootstrap = cleaning_broker.bootstrap
    topic = compact_with_gaps(bootstrap, cleaning_broker.data_dir)
    everything = librdkafka_rows(bootstrap, {topic: 1})
    offsets = [r[2] for r in everything]
    assert offsets[-1] - offsets[0] + 1 > 2 * len(offsets), "no gaps to read over"
    for source_format in FORMATS:
        assert spark_rows(spark, bootstrap, source_format, subscribe=topic) == everything

    # Start at a present offset inside the first batch, and end where the last offsets of
    # the range were removed by compaction.
    start = offsets[3]
    gap_ends = [b for a, b in zip(offsets, offsets[1:], strict=False) if b - a > 3]
    end = gap_ends[len(gap_ends) // 2] - 1
    expected = librdkafka_rows(bootstrap, {topic: 1}, {(topic, 0): (start, end)})
    assert expected and expected[-1][2] < end - 1
    for source_format in FORMATS:
        got = spark_rows(spark, bootstrap, source_format, subscribe=topic,
                         startingOffsets=f'{{"{topic}": {{"0": {start}}}}}',
                         endingOffsets=f'{{"{topic}": {{"0": {end}}}}}')
        assert got == expected, source_format


def test_transactions_match_librdkafka_at_both_isolation_levels(
        spark: SparkSession, cleaning_broker: BrokerProcess) -> None:
    """Committed and aborted transactions with plain records between them: read_committed
    leaves the aborted ones out, read_uncommitted keeps them, neither shows a marker."""
    bootstrap = cleaning_broker.bootstrap
    topic = create(bootstrap, f"exact-txn-{uuid.uuid4().hex[:6]}")
    transactional = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                              "transactional.id": uuid.uuid4().hex, "compression.type": "lz4"})
    plain = Producer({"bootstrap.servers": bootstrap})
    transactional.init_transactions(30)
    for index, commit in enumerate([True, False, False, True, False, True]):
        transactional.begin_transaction()
        for i in range(150):
            transactional.produce(topic, b"txn-%d-%d" % (index, i), partition=i % PARTITIONS,
                                  headers=[("txn", b"%d" % index)])
            if i % 50 == 0:
                plain.produce(topic, b"plain-%d-%d" % (index, i), partition=i % PARTITIONS)
                plain.flush(30)
        # Sent before the abort, or librdkafka drops them unsent and the log has none.
        assert transactional.flush(30) == 0
        if commit:
            transactional.commit_transaction(30)
        else:
            transactional.abort_transaction(30)
    for level in ("read_committed", "read_uncommitted"):
        expected = librdkafka_rows(bootstrap, {topic: PARTITIONS}, isolation=level)
        committed = 3 * 150 + 6 * 3
        assert len(expected) == (committed if level == "read_committed"
                                 else committed + 3 * 150)
        for source_format in FORMATS:
            got = spark_rows(spark, bootstrap, source_format, subscribe=topic,
                             **{"kafka.isolation.level": level})
            assert got == expected, (level, source_format)
