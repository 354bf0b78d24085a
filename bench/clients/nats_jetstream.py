"""NATS JetStream load generator (nats-py): async publish with acks, pull consumers.

A topic of N partitions is N file-backed streams ``<name>-<p>`` (subject
``<name>.<p>``): a stream, like a partition, is JetStream's unit of ordering and
storage. Publishing is asynchronous with one acknowledgement per message,
counted on a reply inbox and checked for errors, with at most a bounded window
unacknowledged. Consuming uses a pull consumer, driven by the JetStream API's
``CONSUMER.MSG.NEXT`` requests with two batches (of at most 8 MB) outstanding; nats-py's own
``fetch()`` helper creates a task per message and would cap the figure at a
fraction of what server and client can do.

nats-py is pure Python: every message published, acknowledged or delivered
passes through Python code, so the client, not nats-server, sets the pace of
every figure here (about one core of client against well under one of server).
No native NATS load generator can be installed on the benchmark's machines:
Debian packages nats-server but not the ``nats`` CLI and its ``nats bench``, and
neither PyPI nor npm carries it.
"""

from __future__ import annotations

import asyncio
import json
import time
from multiprocessing.connection import Connection
from typing import Any

import nats
from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from bench.cpu import Stopwatch, Window
from bench.pacing import paced
from bench.records import RecordSet, Tally, VerificationError, probe, sent_at

LOAD_GENERATOR = ("nats-py, pure Python: every message and ack handled in Python "
                  "(no native NATS load generator is installable here)")
_CONSUMER = "bench"
_PULL_BATCH = 5000
# nats-server disconnects a client with more than 64 MB waiting to be sent to it
# (a "slow consumer"); all pull requests outstanding together stay well below.
_PULL_BYTES = 8 * 1024 * 1024
_MAX_UNACKED = 20_000
_STALL_TIMEOUT_S = 30.0


def _streams(name: str, partitions: int) -> list[tuple[str, str]]:
    """``(stream, subject)`` per partition."""
    return [(f"{name}-{p}", f"{name}.{p}") for p in range(partitions)]


def _share(count: int, partitions: int, p: int) -> int:
    """Records that round-robin sends to partition ``p``."""
    return count // partitions + (1 if p < count % partitions else 0)


async def _connect(url: str) -> NatsConnection:
    return await nats.connect(url, skip_subject_validation=True, pending_size=8 * 1024 * 1024,
                              allow_reconnect=False)


class NatsJetStreamClient:
    distinguishes_acks = False

    def __init__(self, url: str) -> None:
        self.address = url

    def create(self, name: str, partitions: int) -> None:
        asyncio.run(self._create(name, partitions))

    async def _create(self, name: str, partitions: int) -> None:
        nc = await _connect(self.address)
        try:
            js = nc.jetstream()
            for stream, subject in _streams(name, partitions):
                await js.add_stream(StreamConfig(name=stream, subjects=[subject],
                                                 storage=StorageType.FILE))
                await js.add_consumer(stream, ConsumerConfig(
                    durable_name=_CONSUMER, ack_policy=AckPolicy.NONE,
                    deliver_policy=DeliverPolicy.ALL))
        finally:
            await nc.close()

    def delete(self, name: str, partitions: int) -> None:
        asyncio.run(self._delete(name, partitions))

    async def _delete(self, name: str, partitions: int) -> None:
        nc = await _connect(self.address)
        try:
            js = nc.jetstream()
            for stream, _ in _streams(name, partitions):
                await js.delete_stream(stream)
        finally:
            await nc.close()

    def produce(self, name: str, partitions: int, records: RecordSet, acks: str,
                watch: Stopwatch) -> Window:
        return asyncio.run(self._produce(name, partitions, records, watch))

    async def _produce(self, name: str, partitions: int, records: RecordSet,
                       watch: Stopwatch) -> Window:
        nc = await _connect(self.address)
        try:
            acks = _AckCounter(records.count)
            inbox = nc.new_inbox()
            await nc.subscribe(inbox, cb=acks.on_ack)
            await nc.flush()
            subjects = [subject for _, subject in _streams(name, partitions)]
            publish = nc.publish
            watch.start()
            p = 0
            for sent, value in enumerate(records.values(), 1):
                await publish(subjects[p], value, reply=inbox)
                p = p + 1 if p + 1 < partitions else 0
                if sent - acks.count > _MAX_UNACKED:
                    await nc.flush()
                    await acks.wait_for(sent - _MAX_UNACKED // 2)
            await nc.flush()
            await acks.wait_for(records.count)
            window = watch.stop()
        finally:
            await nc.close()
        acks.check(name)
        return window

    def consume(self, name: str, partitions: int, records: RecordSet,
                watch: Stopwatch) -> Window:
        tally = Tally()
        batch = max(100, min(_PULL_BATCH, _PULL_BYTES // (partitions * records.size)))
        window = asyncio.run(self._consume(name, partitions, batch, records.count, tally, watch))
        tally.verify(records.partitions(partitions), name)
        return window

    async def _consume(self, name: str, partitions: int, batch: int, count: int, tally: Tally,
                       watch: Stopwatch | None, latencies: bytearray | None = None,
                       ready: Any = None) -> Window | None:
        nc = await _connect(self.address)
        try:
            pullers = [_Puller(nc, stream, p, _share(count, partitions, p), batch, tally,
                               latencies)
                       for p, (stream, _) in enumerate(_streams(name, partitions))]
            for puller in pullers:
                await puller.subscribe()
            if ready is not None:
                ready.set()
            if watch is not None:
                watch.start()
            for puller in pullers:
                await puller.refill()
            await asyncio.gather(*(puller.wait() for puller in pullers))
            return watch.stop() if watch is not None else None
        finally:
            await nc.close()

    def produce_at_rate(self, name: str, filler: bytes, rate: float, count: int) -> list[bytes]:
        return asyncio.run(self._produce_at_rate(name, filler, rate, count))

    async def _produce_at_rate(self, name: str, filler: bytes, rate: float,
                               count: int) -> list[bytes]:
        nc = await _connect(self.address)
        sent: list[bytes] = []
        try:
            acks = _AckCounter(count)
            inbox = nc.new_inbox()
            await nc.subscribe(inbox, cb=acks.on_ack)
            subject = _streams(name, 1)[0][1]
            for due in paced(rate, count):
                values = [probe(filler, seq, time.monotonic_ns())
                          for seq in range(len(sent), len(sent) + due)]
                for value in values:
                    await nc.publish(subject, value, reply=inbox)
                # Let the flusher write and acks be read; paced() sleeps blocking
                # between ticks, and nc.flush() would wait a round trip each tick.
                await asyncio.sleep(0)
                sent += values
            await acks.wait_for(count)
        finally:
            await nc.close()
        acks.check(name)
        return sent

    @staticmethod
    def latency_consumer(url: str, name: str, count: int, ready: Any,
                         conn: Connection) -> None:
        tally = Tally()
        latencies = bytearray()
        client = NatsJetStreamClient(url)
        asyncio.run(client._consume(name, 1, _PULL_BATCH, count, tally, None, latencies, ready))
        conn.send((bytes(latencies), tally))


class _AckCounter:
    """Publish acknowledgements arriving on one inbox; any error voids the run."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.errors: list[bytes] = []
        self._progress = asyncio.Event()

    async def on_ack(self, msg: Msg) -> None:
        self.count += 1
        if b'"error"' in msg.data:
            self.errors.append(msg.data)
        self._progress.set()

    async def wait_for(self, count: int) -> None:
        while self.count < count:
            self._progress.clear()
            try:
                await asyncio.wait_for(self._progress.wait(), _STALL_TIMEOUT_S)
            except TimeoutError:
                raise VerificationError(f"publish acks stalled at {self.count}") from None

    def check(self, name: str) -> None:
        if self.errors or self.count != self.expected:
            raise VerificationError(f"{name}: {self.count} acks of {self.expected}, "
                                    f"{len(self.errors)} errors ({self.errors[:1]})")


class _Puller:
    """One stream's pull consumer: keeps two batches requested until all records came."""

    def __init__(self, nc: NatsConnection, stream: str, partition: int, expected: int,
                 batch: int, tally: Tally, latencies: bytearray | None) -> None:
        self.nc = nc
        self.partition = partition
        self.expected = expected
        self.batch = batch
        self.tally = tally
        self.latencies = latencies
        self.next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{_CONSUMER}"
        self.inbox = nc.new_inbox()
        self.requested = 0
        self.received = 0
        self.values: list[bytes] = []
        self.done = asyncio.Event()
        self.progress = time.monotonic()

    async def subscribe(self) -> None:
        await self.nc.subscribe(self.inbox, cb=self.on_msg)
        if self.expected == 0:
            self.done.set()

    async def refill(self) -> None:
        while self.requested - self.received <= self.batch and self.requested < self.expected:
            batch = min(self.batch, self.expected - self.requested)
            request = json.dumps({"batch": batch, "expires": 5_000_000_000}).encode()
            await self.nc.publish(self.next_subject, request, reply=self.inbox)
            self.requested += batch

    async def on_msg(self, msg: Msg) -> None:
        if msg.headers and msg.headers.get("Status"):
            # The request ended (expired, or nothing more to deliver): ask again.
            self.requested = self.received
            await self.refill()
            return
        data = msg.data
        if self.latencies is not None:
            self.latencies += (time.monotonic_ns() - sent_at(data)).to_bytes(8, "little")
        self.values.append(data)
        self.received += 1
        if len(self.values) >= 1000 or self.received >= self.expected:
            self.tally.add(self.values, self.partition)
            self.values = []
        if self.received >= self.expected:
            self.done.set()
        elif self.requested - self.received <= self.batch:
            await self.refill()

    async def wait(self) -> None:
        while not self.done.is_set():
            try:
                await asyncio.wait_for(self.done.wait(), _STALL_TIMEOUT_S)
            except TimeoutError:
                raise VerificationError(
                    f"{self.next_subject}: stalled at {self.received} of {self.expected}") from None
