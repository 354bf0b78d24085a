"""Proof that no acknowledged record was lost or duplicated, whatever failed meanwhile.

A ``LoadGenerator`` produces unique values (a sequence number each) with an
idempotent, acks=all confluent-kafka producer in a thread, and remembers every
acknowledgement: partition, offset, value. ``check`` then reads every partition
from its start to its end and reports Jepsen's anomalies:

- lost: acknowledged, yet not found at the offset it was acknowledged at;
- moved: found, but at another offset than acknowledged;
- duplicated: one value at two offsets;
- reordered: one partition's acknowledged values not in the order they were sent.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


@dataclass
class Acked:
    partition: int
    offset: int
    value: bytes


@dataclass
class Anomalies:
    lost: list[Acked] = field(default_factory=list)
    moved: list[tuple[Acked, int]] = field(default_factory=list)
    duplicated: list[bytes] = field(default_factory=list)
    reordered: list[tuple[int, bytes, bytes]] = field(default_factory=list)

    @property
    def none(self) -> bool:
        return not (self.lost or self.moved or self.duplicated or self.reordered)


def find_anomalies(acked: list[Acked], stored: dict[int, list[tuple[int, bytes]]]
                   ) -> Anomalies:
    """Compare what was acknowledged with what each partition holds (offset, value)."""
    found = Anomalies()
    where: dict[bytes, list[tuple[int, int]]] = {}
    for partition, records in stored.items():
        for offset, value in records:
            where.setdefault(value, []).append((partition, offset))
    found.duplicated = sorted(v for v, places in where.items() if len(places) > 1)
    for ack in acked:
        places = where.get(ack.value, [])
        if (ack.partition, ack.offset) in places:
            continue
        if places:
            found.moved.append((ack, places[0][1]))
        else:
            found.lost.append(ack)
    by_partition: dict[int, list[Acked]] = {}
    for ack in sorted(acked, key=lambda a: (a.partition, a.offset)):
        by_partition.setdefault(ack.partition, []).append(ack)
    for partition, acks in by_partition.items():
        for before, after in zip(acks, acks[1:], strict=False):
            if sequence(before.value) > sequence(after.value):
                found.reordered.append((partition, before.value, after.value))
    return found


def sequence(value: bytes) -> int:
    return int(value.split(b"-")[1])


def read_partitions(bootstrap: str, topic: str, partitions: int,
                    timeout: float = 60.0) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition, from its log start to its high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "log_level": 0})
    stored: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while any((stored[p][-1][0] + 1 if stored[p] else 0) < ends[p] for p in stored):
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} up to {ends}")
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            stored[message.partition()].append((message.offset(), message.value()))
    finally:
        consumer.close()
    return stored


class LoadGenerator:
    """Produces ``prefix-<n>`` values until stopped, recording every acknowledgement."""

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

    def _delivered(self, error: KafkaError | None, message) -> None:
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
