"""Kafka-protocol load generator (confluent-kafka / librdkafka) for gregor and Tansu.

The same settings go to every Kafka-protocol system. librdkafka pauses fetching
for ``fetch.queue.backoff.ms`` (1 s by default) once ~100k records are queued in
the client, which would make consumers of small records stall and measure the
client rather than the broker; hence the two consumer settings below.
"""

from __future__ import annotations

import itertools
import logging
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.clients.kafka_fetch import KafkaFetcher
from bench.cpu import Stopwatch, Window
from bench.pacing import paced
from bench.records import RecordSet, Tally, VerificationError, probe, sent_at

LOAD_GENERATOR = "librdkafka (C) through confluent-kafka, records handed over in batches"
_QUEUE_LIMIT = 1_000_000
PRODUCER_CONFIG: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": _QUEUE_LIMIT,
    "queue.buffering.max.kbytes": 1_048_576,
    "enable.idempotence": False,
    "compression.type": "none",
    # Only failures produce delivery reports: one Python callback per record
    # would cost the load generator more than the broker spends on it.
    "delivery.report.only.error": True,
}
CONSUMER_CONFIG: dict[str, Any] = {
    "group.id": "bench",  # required by the client; offsets are assigned, never committed
    "enable.auto.commit": False,
    "enable.partition.eof": False,
    "fetch.queue.backoff.ms": 10,
    "queued.min.messages": 1_000_000,
}
# Latency runs send a trickle, so batching delay would dominate: linger 1 ms.
LATENCY_PRODUCER_CONFIG: dict[str, Any] = {**PRODUCER_CONFIG, "linger.ms": 1, "acks": "1"}
_CONSUME_BATCH = 10_000
_BATCH = 4096  # records handed to librdkafka per round of produce_batch calls
_STALL_TIMEOUT_S = 30.0

_librdkafka_log = logging.getLogger("bench.librdkafka")


def _common(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "logger": _librdkafka_log}


class KafkaClient:
    distinguishes_acks = True

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = self.address = bootstrap
        self.admin = AdminClient(_common(bootstrap))

    def create(self, name: str, partitions: int) -> None:
        for future in self.admin.create_topics(
                [NewTopic(name, partitions, 1)], operation_timeout=30).values():
            future.result(timeout=30)
        self._await_leaders(name, partitions)

    def _await_leaders(self, name: str, partitions: int) -> None:
        """Metadata must show every partition led before producing to a fixed partition."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            topic = self.admin.list_topics(name, timeout=10).topics.get(name)
            if (topic is not None and topic.error is None and len(topic.partitions) == partitions
                    and all(p.leader >= 0 for p in topic.partitions.values())):
                return
            time.sleep(0.1)
        raise RuntimeError(f"topic {name} has no leaders after 30 s")

    def delete(self, name: str, partitions: int) -> None:
        for future in self.admin.delete_topics([name], operation_timeout=30).values():
            try:
                future.result(timeout=30)
            except KafkaException as exc:
                _librdkafka_log.warning("deleting %s: %s", name, exc)

    def produce(self, name: str, partitions: int, records: RecordSet, acks: str,
                watch: Stopwatch, settings: dict[str, Any] | None = None) -> Window:
        """``settings`` override PRODUCER_CONFIG (bench.txn_bench: an idempotent producer)."""
        failures: list[KafkaError] = []

        def on_delivery(error: KafkaError | None, _msg: Message) -> None:
            if error is not None:
                failures.append(error)

        producer = Producer({**_common(self.bootstrap), **PRODUCER_CONFIG, "acks": acks,
                             **(settings or {}), "on_delivery": on_delivery})
        producer.list_topics(name, timeout=10)  # connect before the clock starts
        # produce_batch() takes a list of messages in one C call: with produce()
        # per record the Python load generator, not the broker, sets the pace. It
        # ignores a message's own "partition" (confluent-kafka 2.16: the sticky
        # partitioner put every record of a run on one or two partitions), so each
        # partition's records are handed over in calls of their own, a slice of
        # its lane at a time, every partition in turn.
        lanes = [[{"value": value} for value in lane] for lane in records.partitions(partitions)]
        per_call = max(1, _BATCH // partitions)
        watch.start()
        for start in range(0, len(lanes[0]), per_call):
            for partition, lane in enumerate(lanes):
                batch = lane[start:start + per_call]
                while len(producer) + len(batch) > _QUEUE_LIMIT:
                    producer.poll(0.001)
                accepted = producer.produce_batch(name, batch, partition=partition)
                if accepted != len(batch):
                    raise VerificationError(f"{name}: producer queue refused "
                                            f"{len(batch) - accepted} records")
            producer.poll(0)
        remaining = producer.flush(_STALL_TIMEOUT_S)
        window = watch.stop()
        if remaining or failures:
            raise VerificationError(
                f"{name}: {remaining} records unacknowledged, {len(failures)} failed "
                f"({failures[0] if failures else ''})")
        return window

    def consume(self, name: str, partitions: int, records: RecordSet,
                watch: Stopwatch, settings: dict[str, Any] | None = None,
                expected: list[list[bytes]] | None = None) -> Window:
        """``settings`` override CONSUMER_CONFIG; ``expected`` (per partition) replaces
        ``records`` as what must come back, when not all of them should (bench.txn_bench:
        aborted transactions at read_committed)."""
        wanted = records.partitions(partitions) if expected is None else expected
        consumer = Consumer({**_common(self.bootstrap), **CONSUMER_CONFIG, **(settings or {})})
        try:
            watch.start()
            consumer.assign([TopicPartition(name, p, 0) for p in range(partitions)])
            batches = _drain(consumer, sum(map(len, wanted)))
            window = watch.stop()
        finally:
            consumer.close()
        _tally(batches).verify(wanted, name)
        return window

    def consume_bare(self, name: str, partitions: int, records: RecordSet,
                     watch: Stopwatch) -> Window:
        """Read the records back with bare Fetch requests: the broker's fetch path alone."""
        fetcher = KafkaFetcher(self.bootstrap)
        try:
            watch.start()
            count = fetcher.read_all(name, partitions, records.count)
            window = watch.stop()
        finally:
            fetcher.close()
        if count != records.count:
            raise VerificationError(f"{name}: fetched {count} records, produced {records.count}")
        return window

    def produce_at_rate(self, name: str, filler: bytes, rate: float, count: int) -> list[bytes]:
        producer = Producer({**_common(self.bootstrap), **LATENCY_PRODUCER_CONFIG})
        producer.list_topics(name, timeout=10)
        sent: list[bytes] = []
        for due in paced(rate, count):
            values = [probe(filler, seq, time.monotonic_ns())
                      for seq in range(len(sent), len(sent) + due)]
            for value in values:
                producer.produce(name, value, partition=0)
            producer.poll(0)
            sent += values
        if producer.flush(_STALL_TIMEOUT_S):
            raise VerificationError(f"{name}: latency records left unacknowledged")
        return sent

    @staticmethod
    def latency_consumer(bootstrap: str, name: str, count: int, ready: Any,
                         conn: Connection) -> None:
        consumer = Consumer({**_common(bootstrap), **CONSUMER_CONFIG})
        consumer.assign([TopicPartition(name, 0, 0)])
        consumer.consume(1, 0.5)  # connected and fetching before the producer starts
        ready.set()
        latencies = bytearray()
        batches = _drain(consumer, count, latencies)
        consumer.close()
        conn.send((bytes(latencies), _tally(batches)))


def _drain(consumer: Consumer, count: int,
           latencies: bytearray | None = None) -> list[list[Message]]:
    """Consume until ``count`` records arrived; fail on an error or a 30 s stall.

    ``consume(n, timeout)`` waits for all ``n`` records or the whole timeout, which
    would add up to a second at the end of a run and to every latency figure; so
    block for one record, then take whatever else is queued without waiting. The
    messages are kept as they came: taking out each one's value and partition
    is left to :func:`_tally`, after the clock.
    """
    batches: list[list[Message]] = []
    got = 0
    last_progress = time.monotonic()
    while got < count:
        first = consumer.poll(1.0)
        if first is None:
            if time.monotonic() - last_progress > _STALL_TIMEOUT_S:
                raise VerificationError(f"consumer stalled at {got} of {count} records")
            continue
        last_progress = time.monotonic()
        messages = [first, *consumer.consume(min(_CONSUME_BATCH, count - got), 0)]
        now_ns = time.monotonic_ns()
        if any(map(Message.error, messages)):
            error = next(m.error() for m in messages if m.error())
            raise VerificationError(f"consumer error: {error}")
        batches.append(messages)
        got += len(messages)
        if latencies is not None:
            latencies += b"".join((now_ns - sent_at(m.value())).to_bytes(8, "little")
                                  for m in messages)
    return batches


def _tally(batches: list[list[Message]]) -> Tally:
    """The consumed values by partition; librdkafka hands over runs of one partition."""
    tally = Tally()
    for messages in batches:
        for partition, run in itertools.groupby(messages, Message.partition):
            tally.add(list(map(Message.value, run)), partition)
    return tally


def write_librdkafka_log(path: Path) -> None:
    """Send librdkafka's own log lines to a file instead of the terminal."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    _librdkafka_log.addHandler(handler)
    _librdkafka_log.propagate = False
