"""One load generator per protocol: Kafka (librdkafka), Redis Streams (RESP), NATS JetStream.

Every client offers the same operations so that a workload runs unchanged
against any system:

- ``create(name, partitions)`` / ``delete(name, partitions)``: the topic, its
  streams or its keys;
- ``produce(name, partitions, records, acks, watch) -> Window``: send every
  record, round-robin over partitions, timed from the first send to the last
  acknowledgement;
- ``consume(name, partitions, records, watch) -> Window``: read them all back
  from the start and verify that each partition gave back its records once
  each, in order, unaltered (:meth:`bench.records.Tally.verify`);
- ``produce_at_rate(name, filler, rate, count) -> list[bytes]``: send numbered,
  time-stamped values at a fixed rate to one partition (end-to-end latency);
- ``latency_consumer``: a module-level function run in a child process that
  consumes ``count`` probe values and sends back their latencies and a tally.
"""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Protocol

from bench.cpu import Stopwatch, Window
from bench.records import RecordSet

# (address, name, count, ready, conn): consume ``count`` probe values of the
# one-partition topic ``name``, set ``ready`` once reading, then send
# ``(latencies_ns_bytes, tally)`` through ``conn``.
LatencyConsumer = Callable[[str, str, int, object, Connection], None]


class StreamClient(Protocol):
    # Whether acks=1 and acks=all are different settings for this system.
    distinguishes_acks: bool
    latency_consumer: LatencyConsumer
    # What the latency consumer, in its own process, connects to.
    address: str

    def create(self, name: str, partitions: int) -> None: ...

    def delete(self, name: str, partitions: int) -> None: ...

    def produce(self, name: str, partitions: int, records: RecordSet, acks: str,
                watch: Stopwatch) -> Window: ...

    def consume(self, name: str, partitions: int, records: RecordSet,
                watch: Stopwatch) -> Window: ...

    def produce_at_rate(self, name: str, filler: bytes, rate: float,
                        count: int) -> list[bytes]: ...
