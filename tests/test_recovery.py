"""``kill -9`` the broker while confluent-kafka streams into it, restart it on the same
data directory, and check that every acknowledged record is there exactly once, at
the offset it was acknowledged with, with no gap, no torn batch and no duplicate.

The consumer checks every batch's CRC (``check.crcs``), so a torn batch left in the
log would fail the test rather than be skipped.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from clients import TIMEOUT, confluent_consumer
from confluent_kafka import KafkaError, Message, Producer, TopicPartition
from group_clients import create_topic

from gregor.broker.process import BrokerProcess

PARTITIONS = 2
# Small segments so the stream rolls several of them (and producer-state snapshots).
SEGMENT_BYTES = 200_000


class Stream:
    """A producer thread sending numbered values until stopped; keeps what was acked."""

    def __init__(self, bootstrap: str, topic: str, **config: object) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2,
                                  "reconnect.backoff.max.ms": 200, **config})
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.acked[message.value()] = (message.partition(), message.offset())
        else:
            self.failed += 1

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, value=b"%08d" % n + b"." * 100,
                                      partition=n % PARTITIONS, on_delivery=self._on_delivery)
                n += 1
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)

    def start(self) -> Stream:
        self._thread.start()
        return self

    def wait_for_acks(self, count: int) -> None:
        deadline = time.monotonic() + TIMEOUT
        while len(self.acked) < count:
            assert time.monotonic() < deadline, f"only {len(self.acked)} acks in {TIMEOUT}s"
            time.sleep(0.05)

    def stop(self, flush_timeout: float) -> None:
        self._stop.set()
        self._thread.join()
        self.producer.flush(flush_timeout)


def consume_all(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition from the log start to the high watermark."""
    consumer = confluent_consumer(bootstrap, **{"enable.partition.eof": True})
    ends = {}
    for partition in range(PARTITIONS):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), TIMEOUT)
        assert low == 0
        ends[partition] = high
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    at_end = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + TIMEOUT
    while len(at_end) < PARTITIONS:
        assert time.monotonic() < deadline, "could not consume to the end"
        for message in consumer.consume(10_000, 0.5):
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, f"consumer error: {error}"
                if message.offset() >= ends[message.partition()]:
                    at_end.add(message.partition())
                continue
            got[message.partition()].append((message.offset(), message.value()))
    consumer.close()
    for partition, records in got.items():
        assert [offset for offset, _ in records] == list(range(ends[partition]))
    return got


def check_acked_records(stream: Stream, log: dict[int, list[tuple[int, bytes]]],
                        exactly_once: bool) -> None:
    stored = {(p, offset): value for p, records in log.items() for offset, value in records}
    for value, (partition, offset) in stream.acked.items():
        assert stored.get((partition, offset)) == value, f"acked {value!r} lost"
    if exactly_once:
        values = [value for records in log.values() for _, value in records]
        assert len(values) == len(set(values)), "a retried batch was written twice"


def produce_more(bootstrap: str, topic: str, log: dict[int, list[tuple[int, bytes]]]) -> None:
    """After the restart, the next record of each partition lands at its log end offset."""
    producer = Producer({"bootstrap.servers": bootstrap})
    offsets = {}

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        assert error is None, error
        offsets[message.partition()] = message.offset()

    for partition in range(PARTITIONS):
        producer.produce(topic, value=b"after", partition=partition, on_delivery=on_delivery)
    assert producer.flush(TIMEOUT) == 0
    assert offsets == {p: len(records) for p, records in log.items()}


def start_broker(broker: BrokerProcess, topic: str) -> None:
    broker.overrides.update({"log.segment.bytes": str(SEGMENT_BYTES)})
    broker.start()
    create_topic(broker.bootstrap, topic, PARTITIONS)


def test_kill_9_mid_stream_at_acks_1(fresh_broker: BrokerProcess, topic_name: str) -> None:
    start_broker(fresh_broker, topic_name)
    stream = Stream(fresh_broker.bootstrap, topic_name, acks=1, **{"message.timeout.ms": 2000,
                                                                     "retries": 0}).start()
    stream.wait_for_acks(5000)  # streaming: the kill lands with records in flight
    fresh_broker.kill()
    # Whatever was still in flight fails; what was acked must survive.
    stream.stop(flush_timeout=10)
    assert len(stream.acked) > 5000
    fresh_broker.start()
    log = consume_all(fresh_broker.bootstrap, topic_name)
    check_acked_records(stream, log, exactly_once=True)
    produce_more(fresh_broker.bootstrap, topic_name, log)


def test_kill_9_mid_stream_with_idempotence(fresh_broker: BrokerProcess,
                                             topic_name: str) -> None:
    """The producer outlives the broker: it resends what had no answer when the broker
    died, and the restarted broker, having rebuilt its producer state from the log,
    must drop the resends of batches it had already written."""
    start_broker(fresh_broker, topic_name)
    stream = Stream(fresh_broker.bootstrap, topic_name, **{"enable.idempotence": True,
                                                           "message.timeout.ms": 60_000}).start()
    stream.wait_for_acks(5000)  # streaming: the kill lands with records in flight
    fresh_broker.kill()
    killed_at = len(stream.acked)
    fresh_broker.start()
    stream.wait_for_acks(killed_at + 5000)
    stream.stop(flush_timeout=TIMEOUT)
    assert stream.failed == 0
    log = consume_all(fresh_broker.bootstrap, topic_name)
    check_acked_records(stream, log, exactly_once=True)
    assert sum(len(records) for records in log.values()) == len(stream.acked)
    produce_more(fresh_broker.bootstrap, topic_name, log)


def active_segment(data_dir: Path, topic: str, partition: int) -> Path:
    return max((data_dir / f"{topic}-{partition}").glob("*.log"))


@pytest.mark.parametrize("damage", ["garbage", "partial batch"])
def test_torn_write_at_the_log_end_is_cut_on_restart(fresh_broker: BrokerProcess,
                                                     topic_name: str, damage: str) -> None:
    start_broker(fresh_broker, topic_name)
    stream = Stream(fresh_broker.bootstrap, topic_name, acks=1).start()
    stream.wait_for_acks(3000)
    stream.stop(flush_timeout=TIMEOUT)
    assert stream.failed == 0
    fresh_broker.kill()
    for partition in range(PARTITIONS):
        segment = active_segment(fresh_broker.data_dir, topic_name, partition)
        data = segment.read_bytes()
        # A write cut short: the head of a copy of the segment's first batch, or noise.
        tail = (data[:300] if damage == "partial batch"
                else random.Random(partition).randbytes(5000))
        with open(segment, "ab") as handle:
            handle.write(tail)
        # The crash may have left the indexes behind too.
        segment.with_suffix(".index").unlink()
    fresh_broker.start()
    log = consume_all(fresh_broker.bootstrap, topic_name)
    check_acked_records(stream, log, exactly_once=True)
    assert sum(len(records) for records in log.values()) == len(stream.acked)
    produce_more(fresh_broker.bootstrap, topic_name, log)
