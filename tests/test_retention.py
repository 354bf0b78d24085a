"""Retention through real clients: whole segments deleted by retention.ms and
retention.bytes, the log start offset moving (ListOffsets earliest, DeleteRecords),
consumers below it getting OFFSET_OUT_OF_RANGE and resetting per auto.offset.reset,
segments rolling on segment.bytes and segment.ms, and the log start offset surviving
a clean restart and a ``kill -9``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clients import TIMEOUT, confluent_consume, confluent_consumer
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from gregor.broker.process import BrokerProcess

SEGMENT_BYTES = 4096
VALUE = b"x" * 200
HOUR_MS = 3600_000


@pytest.fixture
def retention_broker(fresh_broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """A broker with small segments whose retention runs every 200 ms."""
    fresh_broker.overrides.update({"log.segment.bytes": str(SEGMENT_BYTES),
                                   "log.retention.check.interval.ms": "200"})
    yield fresh_broker.start()


def create_topic(bootstrap: str, name: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(TIMEOUT)


def produce(bootstrap: str, topic: str, count: int, timestamp: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    for i in range(count):
        # One record per request keeps batches small, so segments roll often.
        producer.produce(topic, value=VALUE, key=b"%d" % i, partition=0,
                         timestamp=timestamp or 0)
        producer.flush(TIMEOUT)


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = confluent_consumer(bootstrap)
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT, cached=False)
    finally:
        consumer.close()


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def segment_bases(broker: BrokerProcess, topic: str) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (broker.data_dir / f"{topic}-0").glob("*.log"))


def base_of_segment_holding(broker: BrokerProcess, topic: str, offset: int) -> int:
    """The base offset of the segment that holds ``offset`` (retention never deletes a
    segment holding a record still within retention, so this is where the log will
    start once retention is done)."""
    return max(base for base in segment_bases(broker, topic) if base <= offset)


def first_event(consumer: Consumer) -> Message:
    """The first record or event (an error, a partition EOF) the consumer hands out."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        messages = consumer.consume(1, 0.5)
        if messages:
            return messages[0]
    raise AssertionError(f"nothing consumed in {TIMEOUT}s")


def first_offset_after_reset(bootstrap: str, topic: str, reset: str) -> int:
    """Where a consumer asking for offset 0 ends up once the broker says it is gone."""
    consumer = confluent_consumer(bootstrap, **{"auto.offset.reset": reset})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        return confluent_consume(consumer, 1)[0].offset()
    finally:
        consumer.close()


def test_retention_ms_deletes_expired_segments_and_consumers_reset(
        retention_broker: BrokerProcess, topic_name: str) -> None:
    bootstrap = retention_broker.bootstrap
    create_topic(bootstrap, topic_name, **{"retention.ms": str(HOUR_MS)})
    now = int(time.time() * 1000)
    produce(bootstrap, topic_name, 60, timestamp=now - 3 * HOUR_MS)
    produce(bootstrap, topic_name, 20, timestamp=now)
    # Every segment holding only old records goes; the first with a new one stays.
    low = base_of_segment_holding(retention_broker, topic_name, 60)
    assert 40 < low <= 60  # ~15 records a segment: the segments before it are old
    wait_for(lambda: watermarks(bootstrap, topic_name) == (low, 80), "retention")
    assert segment_bases(retention_broker, topic_name)[0] == low

    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic_name, 0)
    earliest = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(TIMEOUT)
    assert earliest.offset == low

    # Offset 0 is gone: OFFSET_OUT_OF_RANGE, then the reset policy decides.
    assert first_offset_after_reset(bootstrap, topic_name, "earliest") == low
    consumer = confluent_consumer(bootstrap, **{"auto.offset.reset": "latest",
                                                 "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    # Reset to the log end, it hears first that it reached the end, at 80: no record.
    reached_end = first_event(consumer)
    assert reached_end.error() is not None
    assert reached_end.error().code() == KafkaError._PARTITION_EOF
    assert reached_end.offset() == 80
    produce(bootstrap, topic_name, 1, timestamp=now)
    assert confluent_consume(consumer, 1)[0].offset() == 80
    consumer.close()
    consumer = confluent_consumer(bootstrap, **{"auto.offset.reset": "error"})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    errors = []
    deadline = time.monotonic() + TIMEOUT
    while not errors and time.monotonic() < deadline:
        errors = [m.error() for m in consumer.consume(10, 0.5) if m.error() is not None]
    consumer.close()
    assert errors and errors[0].code() == KafkaError._AUTO_OFFSET_RESET
    assert "out of range" in errors[0].str().lower()


def test_retention_bytes_keeps_the_newest_segments(retention_broker: BrokerProcess,
                                                   topic_name: str) -> None:
    bootstrap = retention_broker.bootstrap
    create_topic(bootstrap, topic_name, **{"retention.bytes": str(3 * SEGMENT_BYTES)})
    produce(bootstrap, topic_name, 150)
    directory = retention_broker.data_dir / f"{topic_name}-0"

    def done() -> bool:
        """Kafka's end state: dropping the oldest segment would go below retention.bytes."""
        sizes = [p.stat().st_size for p in sorted(directory.glob("*.log"))]
        return sum(sizes) - sizes[0] < 3 * SEGMENT_BYTES

    wait_for(done, "retention.bytes")
    low, high = watermarks(bootstrap, topic_name)
    assert high == 150 and low == segment_bases(retention_broker, topic_name)[0] > 0
    consumer = confluent_consumer(bootstrap)
    consumer.assign([TopicPartition(topic_name, 0, low)])
    assert [m.offset() for m in confluent_consume(consumer, high - low)] == list(range(low, high))
    consumer.close()


def test_segments_roll_on_segment_bytes_and_segment_ms(retention_broker: BrokerProcess,
                                                       topic_name: str) -> None:
    bootstrap = retention_broker.bootstrap
    create_topic(bootstrap, topic_name, **{"segment.bytes": "2048"})
    produce(bootstrap, topic_name, 40)
    directory = retention_broker.data_dir / f"{topic_name}-0"
    sizes = [p.stat().st_size for p in sorted(directory.glob("*.log"))]
    assert len(sizes) > 4 and all(size <= 2048 for size in sizes)

    # segment.ms is measured, as Kafka does, by record timestamps: from the segment's
    # first batch to the incoming one, so the test sets the time instead of waiting.
    timed = topic_name + "-ms"
    create_topic(bootstrap, timed, **{"segment.ms": str(HOUR_MS)})
    start = int(time.time() * 1000)
    produce(bootstrap, timed, 3, timestamp=start)
    produce(bootstrap, timed, 1, timestamp=start + HOUR_MS)  # exactly segment.ms: no roll
    assert segment_bases(retention_broker, timed) == [0]
    produce(bootstrap, timed, 1, timestamp=start + HOUR_MS + 1)
    assert segment_bases(retention_broker, timed) == [0, 4]


@pytest.mark.parametrize("restart", ["clean", "kill -9"])
def test_delete_records_moves_the_log_start_for_good(fresh_broker: BrokerProcess,
                                                     topic_name: str, restart: str) -> None:
    fresh_broker.overrides["log.segment.bytes"] = str(SEGMENT_BYTES)
    fresh_broker.start()
    bootstrap = fresh_broker.bootstrap
    create_topic(bootstrap, topic_name)
    produce(bootstrap, topic_name, 50)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic_name, 0, 37)
    deleted = admin.delete_records([tp])[tp].result(TIMEOUT)
    assert deleted.low_watermark == 37
    assert watermarks(bootstrap, topic_name) == (37, 50)
    # Whole segments below the new start are gone; the one holding it stays.
    assert segment_bases(fresh_broker, topic_name)[0] <= 37
    assert segment_bases(fresh_broker, topic_name)[0] > 0
    assert first_offset_after_reset(bootstrap, topic_name, "earliest") == 37

    if restart == "clean":
        fresh_broker.stop()
    else:
        fresh_broker.kill()
    fresh_broker.start()
    bootstrap = fresh_broker.bootstrap
    assert watermarks(bootstrap, topic_name) == (37, 50)
    assert first_offset_after_reset(bootstrap, topic_name, "earliest") == 37
    admin = AdminClient({"bootstrap.servers": bootstrap})
    earliest = admin.list_offsets({TopicPartition(topic_name, 0): OffsetSpec.earliest()})
    assert next(iter(earliest.values())).result(TIMEOUT).offset == 37


def test_retention_survives_a_kill_9(retention_broker: BrokerProcess, topic_name: str) -> None:
    bootstrap = retention_broker.bootstrap
    create_topic(bootstrap, topic_name, **{"retention.ms": str(HOUR_MS)})
    produce(bootstrap, topic_name, 40, timestamp=int(time.time() * 1000) - 2 * HOUR_MS)
    produce(bootstrap, topic_name, 5)
    # Every segment of old records goes; the one holding the first new record stays.
    low = base_of_segment_holding(retention_broker, topic_name, 40)
    assert low > 0
    wait_for(lambda: watermarks(bootstrap, topic_name) == (low, 45), "retention")
    retention_broker.kill()
    retention_broker.start()
    assert watermarks(retention_broker.bootstrap, topic_name) == (low, 45)
    assert not any(Path(p).name.endswith(".index") and not Path(p).with_suffix(".log").exists()
                   for p in (retention_broker.data_dir / f"{topic_name}-0").iterdir())
