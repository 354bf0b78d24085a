"""Proof that no acknowledged record was lost, moved or duplicated, whatever failed.

A ``LoadGenerator`` produces unique values (``<prefix>-<sequence number>``) with an
idempotent, acks=all confluent-kafka producer in a thread, and remembers every
acknowledgement: partition, offset, value. ``read_partitions`` then reads every
partition from its start to its high watermark, and ``find_anomalies`` compares the
two and reports Jepsen's anomalies (its Kafka/Redpanda/Bufstream analyses):

- lost: acknowledged, yet not read at all;
- moved: read, but not at the offset it was acknowledged at (an acknowledgement
  without an offset, -1, shows here too: nothing proves where it was written);
- duplicated: one value read at more than one offset;
- conflicting: two values for one offset (two acknowledgements, or an
  acknowledgement and the log, disagree on what is there);
- nonmonotonic: offsets that go backwards, in a partition's read (in poll order) or
  in its acknowledgements (in send order: an idempotent producer keeps a
  partition's records in the order it sent them).

Values are unique across the whole history, so any value read twice is a duplicate,
acknowledged or not (an idempotent producer must not duplicate a record even when
it never learnt whether it was written).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

# Where a value sits: (partition, offset).
Place = tuple[int, int]
# One partition's records as read, in poll order: (offset, value).
Read = dict[int, list[tuple[int, bytes]]]


@dataclass(frozen=True)
class Acked:
    partition: int
    offset: int
    value: bytes


@dataclass
class Anomalies:
    lost: list[Acked] = field(default_factory=list)
    moved: list[tuple[Acked, list[Place]]] = field(default_factory=list)
    duplicated: dict[bytes, list[Place]] = field(default_factory=dict)
    conflicting: dict[Place, list[bytes]] = field(default_factory=dict)
    # (partition, what went backwards, the offset before, the offset after)
    nonmonotonic: list[tuple[int, str, int, int]] = field(default_factory=list)

    @property
    def none(self) -> bool:
        return not (self.lost or self.moved or self.duplicated or self.conflicting
                    or self.nonmonotonic)


def sequence(value: bytes) -> int:
    """The sequence number of a ``LoadGenerator`` value: the order it was sent in."""
    return int(value.rsplit(b"-", 1)[1])


def find_anomalies(acked: list[Acked], read: Read) -> Anomalies:
    """Compare what was acknowledged with what each partition holds."""
    found = Anomalies()
    places: dict[bytes, list[Place]] = {}
    values: dict[Place, list[bytes]] = {}
    for partition, records in sorted(read.items()):
        for (before, _), (after, _) in zip(records, records[1:], strict=False):
            if after <= before:
                found.nonmonotonic.append((partition, "read", before, after))
        for offset, value in records:
            # A place read twice (a read going backwards, reported above) is one copy.
            if (partition, offset) not in places.setdefault(value, []):
                places[value].append((partition, offset))
            if value not in values.setdefault((partition, offset), []):
                values[(partition, offset)].append(value)
    found.duplicated = {value: where for value, where in places.items() if len(where) > 1}

    for ack in acked:
        where = places.get(ack.value, [])
        if not where:
            found.lost.append(ack)
        elif (ack.partition, ack.offset) not in where:
            found.moved.append((ack, where))
        if ack.offset >= 0:
            at = values.setdefault((ack.partition, ack.offset), [])
            if ack.value not in at:
                at.append(ack.value)
    found.conflicting = {place: sorted(at) for place, at in values.items() if len(at) > 1}

    by_partition: dict[int, list[Acked]] = {}
    for ack in sorted(acked, key=lambda a: sequence(a.value)):
        by_partition.setdefault(ack.partition, []).append(ack)
    for partition, acks in sorted(by_partition.items()):
        for before, after in zip(acks, acks[1:], strict=False):
            if after.offset <= before.offset and after.offset >= 0:
                found.nonmonotonic.append((partition, "acknowledged", before.offset,
                                           after.offset))
    return found


def read_partitions(bootstrap: str, topic: str, partitions: int,
                    timeout: float = 60.0, isolation: str = "read_uncommitted") -> Read:
    """Every record of every partition, from its log start to the high watermark it had
    when the read began, in the order the consumer delivered them (read_committed: the
    committed ones, once every transaction below that watermark has ended)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"checker-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "enable.partition.eof": True, "isolation.level": isolation,
        "log_level": 0})
    read: Read = {p: [] for p in range(partitions)}
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        unfinished = {p for p, end in ends.items() if end > 0}
        errors: list[KafkaError] = []  # passing ones (a broker still restarting) are retried
        deadline = time.monotonic() + timeout
        while unfinished:
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} up to {ends}: partitions "
                                     f"{sorted(unfinished)} unfinished; errors {errors[-5:]}")
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is None:
                read[message.partition()].append((message.offset(), message.value()))
            elif error.code() == KafkaError._PARTITION_EOF:
                if message.offset() >= ends[message.partition()]:
                    unfinished.discard(message.partition())
            else:
                errors.append(error)
    finally:
        consumer.close()
    return read


class LoadGenerator:
    """Produces ``<prefix>-<n>`` values at ``rate`` per second until stopped, recording
    every acknowledgement (and counting the errors of records that failed)."""

    def __init__(self, bootstrap: str, topic: str, prefix: str = "v", rate: int = 2000,
                 **config: object) -> None:
        self.topic = topic
        self.prefix = prefix
        self.rate = rate
        self.acked: list[Acked] = []
        self.errors: Counter[str] = Counter()
        self.ack_times: list[float] = []
        self._stop = threading.Event()
        self._producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 60000, "log_level": 0,
            "topic.metadata.refresh.interval.ms": 500, **config})
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LoadGenerator:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.errors[error.name()] += 1
            return
        self.acked.append(Acked(message.partition(), message.offset(), message.value()))
        self.ack_times.append(time.monotonic())

    def _run(self) -> None:
        sent = 0
        started = time.monotonic()
        while not self._stop.is_set():
            if sent >= (time.monotonic() - started) * self.rate:
                self._producer.poll(0.005)
                continue
            try:
                self._producer.produce(self.topic, f"{self.prefix}-{sent}".encode(),
                                       on_delivery=self._delivered)
                sent += 1
            except BufferError:
                self._producer.poll(0.05)
            self._producer.poll(0)

    def wait_for_acks(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {len(self.acked)} of {count} acknowledged; "
                                     f"errors {dict(self.errors)}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop sending and wait until every record sent is acknowledged or failed."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
        remaining = self._producer.flush(90)
        assert remaining == 0, f"{remaining} records neither acknowledged nor failed"

    def longest_gap(self) -> float:
        """The longest time between two acknowledgements: how long writes stalled."""
        times = sorted(self.ack_times)
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)
