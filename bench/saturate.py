"""Load that keeps a broker's core busy: the broker alone on one core, clients on the other.

With librdkafka as the load generator the client sets the pace on two cores: it spends
more CPU per record than the broker (a produce of 100 B records cost the broker 0.17 µs
a record and the client several times that), so records/s says little about the broker.
Here the broker process and all its threads are pinned to one core and the load comes
from :data:`WORKERS` processes pinned to the other, each with its own connection, each
speaking the wire protocol with requests built once. They are :data:`GROUPS`
applications of the same size, each spreading the topic's partitions over its clients
(two producers writing each partition, two consumer groups reading it), so that enough
requests are in flight for the broker never to wait for a client:

- produce: Produce v9 requests at acks=1 of one prebuilt batch of
  :data:`BATCH_BYTES` per partition, :data:`IN_FLIGHT` requests in flight, every
  answer checked for errors. The broker does for them what it does for librdkafka's
  batches (checks, offsets, append), and the client only writes bytes it already has.
- fetch: Fetch v4 requests of the worker's partitions at librdkafka's default sizes
  (1 MiB a partition), one in flight, as a consumer sends them; the records of every
  whole batch counted from its header (``bench.clients.kafka_fetch``; its CRC32C is not
  checked: at gigabytes a second that would take a sixth of the clients' core); a
  partition read to its end is read again from offset 0, so a run can last as long as
  it must.

Each worker adds the records acknowledged or fetched to a counter of its own in shared
memory, which the harness reads at the start and end of a measured window.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import multiprocessing
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event

from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from bench.clients.kafka_fetch import KafkaFetcher, _whole_batches
from bench.cpu import cpu_seconds
from bench.records import RecordSet, VerificationError
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import decode_response, encode_request
from gregor.protocol.record_codec import Record, encode_batch

BROKER_CPU = 0
CLIENT_CPU = 1
WORKERS = 8
GROUPS = 2
BATCH_BYTES = 64 * 1024
IN_FLIGHT = 5  # what Kafka allows an idempotent producer per connection
_PRODUCE_VERSION = 9
# librdkafka's defaults: max.partition.fetch.bytes and fetch.max.bytes
FETCH_PARTITION_MAX_BYTES = 1024 * 1024
FETCH_MAX_BYTES = 52_428_800


def pin(pid: int, cpu: int) -> None:
    """Put every thread of ``pid`` on ``cpu``; threads it starts later inherit it."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), {cpu})


@dataclass(frozen=True)
class Job:
    """What every worker does in one run: ``kind`` "produce" or "fetch", against the
    broker at ``bootstrap``; ``requests`` per worker, or 0 to run until stopped (produce);
    ``end`` the records each partition holds (fetch); ``acks`` what produce requests ask
    for (-1: every in-sync replica, on a cluster whose partitions ``bootstrap`` leads),
    in batches of ``batch_bytes``. A worker given ``only`` writes those partitions (each
    worker its own job: ``Load.running_each``) rather than its share of them all;
    ``sticky`` sends one partition's batch a request, partition after partition, as a
    producer without keys fills one partition's batch at a time, rather than a batch
    for every partition in each request. ``security``: librdkafka's settings for a
    TLS or SASL listener (``security.protocol``, ``ssl.*``, ``sasl.*``), none for
    PLAINTEXT."""

    kind: str
    bootstrap: str
    topic: str
    partitions: int
    size: int
    requests: int = 0
    end: int = 0
    acks: int = 1
    batch_bytes: int = BATCH_BYTES
    only: tuple[int, ...] | None = None
    sticky: bool = False
    security: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Sample:
    at: float
    records: int
    broker_cpu: float
    broker_runnable: float  # seconds the broker's event loop ran or waited for a core
    client_cpu: float


def runnable_seconds(pid: int) -> float:
    """How long the main thread of ``pid`` (the broker's event loop) has been on a core
    or waiting in its run queue: a loop always runnable is never idle, so it is the
    bottleneck, however much of its core other work takes."""
    with open(f"/proc/{pid}/schedstat") as stats:
        on_cpu, waiting, _ = stats.read().split()
    return (int(on_cpu) + int(waiting)) / 1e9


class Load:
    """:data:`WORKERS` client processes on :data:`CLIENT_CPU`, started once, given one
    job at a time (``running``)."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._counts = [context.RawValue("q", 0) for _ in range(WORKERS)]
        self._pipes: list[Connection] = []
        self._processes = []
        for index in range(WORKERS):
            ours, theirs = context.Pipe()
            process = context.Process(target=_work, daemon=True, args=(
                index, theirs, self._counts[index], self._stop))
            process.start()
            self._pipes.append(ours)
            self._processes.append(process)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._processes if p.pid is not None]

    def sample(self, broker_pid: int) -> Sample:
        return Sample(time.perf_counter(), sum(int(c.value) for c in self._counts),
                      cpu_seconds([broker_pid]), runnable_seconds(broker_pid),
                      cpu_seconds(self.pids, descendants=False))

    def complete(self, job: Job) -> None:
        """Every worker on ``job`` until each has sent its ``job.requests``."""
        self._stop.clear()
        for pipe in self._pipes:
            pipe.send(job)
        for pipe in self._pipes:
            _answer(pipe)  # ready
        for pipe in self._pipes:
            _answer(pipe)  # done

    @contextlib.contextmanager
    def running(self, job: Job) -> Iterator[None]:
        """Every worker on ``job`` until the block ends; raises a worker's failure."""
        with self.running_each([job] * WORKERS):
            yield

    @contextlib.contextmanager
    def running_each(self, jobs: list[Job]) -> Iterator[None]:
        """Worker ``i`` on ``jobs[i]`` until the block ends; raises a worker's failure."""
        self._stop.clear()
        for pipe, job in zip(self._pipes, jobs, strict=True):
            pipe.send(job)
        for pipe in self._pipes:  # connected, first requests built
            _answer(pipe)
        try:
            yield
        finally:
            self._stop.set()
            for pipe in self._pipes:
                _answer(pipe)

    def close(self) -> None:
        for pipe in self._pipes:
            with contextlib.suppress(OSError):  # a worker that died has closed its end
                pipe.send(None)
        for process in self._processes:
            process.join(10)
            if process.is_alive():
                process.kill()


def _answer(pipe: Connection) -> None:
    message = pipe.recv()
    if message is not None:
        raise VerificationError(f"load worker: {message}")


def _work(index: int, pipe: Connection, count: Synchronized[int], stop: Event) -> None:
    os.sched_setaffinity(0, {CLIENT_CPU})
    socket.setdefaulttimeout(30)  # a broker gone fails the run instead of hanging it
    while (job := pipe.recv()) is not None:
        mine = (list(job.only) if job.only is not None
                else list(range(index % (WORKERS // GROUPS), job.partitions, WORKERS // GROUPS)))
        try:
            if not mine:  # fewer partitions than workers per group: this one idles
                pipe.send(None)
            elif job.kind == "produce":
                _produce(job, mine, count, stop, pipe)
            else:
                _fetch(job, mine, count, stop, pipe)
            pipe.send(None)
        except Exception as exc:  # reported to the harness, which stops the benchmark
            pipe.send(f"{type(exc).__name__}: {exc}")


def records_per_batch(size: int, batch_bytes: int = BATCH_BYTES) -> int:
    return max(1, batch_bytes // size)


def filled(size: int, requests: int) -> int:
    """Records each partition holds once every worker has sent ``requests`` produce
    requests to an empty topic."""
    return GROUPS * requests * records_per_batch(size)


def _produce(job: Job, partitions: list[int], count: Synchronized[int], stop: Event,
             ready: Connection) -> None:
    per_batch = records_per_batch(job.size, job.batch_bytes)
    now = int(time.time() * 1000)
    batch = encode_batch([Record(i, now, None, value)
                          for i, value in enumerate(RecordSet(job.size, per_batch).values())])
    def request_for(written: list[int]) -> bytes:
        return encode_request(ApiKey.PRODUCE, _PRODUCE_VERSION, 0, "bench", ProduceRequest(
            transactional_id=None, acks=job.acks, timeout=datetime.timedelta(seconds=30),
            topic_data=(TopicProduceData(name=job.topic, partition_data=tuple(
                PartitionProduceData(index=p, records=batch) for p in written)),)))

    if job.sticky:
        # Built as they go: one request a partition would be too many to hold.
        turns = itertools.cycle(partitions)
        requests: Iterator[bytes] = (request_for([next(turns)]) for _ in itertools.count())
        per_request = per_batch
    else:
        requests = itertools.repeat(request_for(partitions))
        per_request = per_batch * len(partitions)
    fetcher = KafkaFetcher(job.bootstrap, dict(job.security))  # its socket and frame reader
    try:
        ready.send(None)
        in_flight = 0
        left = job.requests or -1
        while True:
            while in_flight < IN_FLIGHT and left and not stop.is_set():
                fetcher.sock.sendall(next(requests))
                in_flight += 1
                left -= 1
            if not in_flight:
                return
            _, answer = decode_response(ApiKey.PRODUCE, _PRODUCE_VERSION,
                                        bytes(fetcher._read_frame()))
            in_flight -= 1
            for topic in answer.responses:
                for partition in topic.partition_responses:
                    if partition.error_code:
                        raise VerificationError(f"produce to {job.topic}-{partition.index} "
                                                f"failed with error {partition.error_code}")
            count.value += per_request
    finally:
        fetcher.close()


def _fetch(job: Job, partitions: list[int], count: Synchronized[int], stop: Event,
           ready: Connection) -> None:
    fetcher = KafkaFetcher(job.bootstrap, dict(job.security))
    offsets = dict.fromkeys(partitions, 0)
    try:
        ready.send(None)
        while not stop.is_set():
            fetcher.sock.sendall(fetcher._request(job.topic, offsets, FETCH_PARTITION_MAX_BYTES,
                                                  FETCH_MAX_BYTES))
            for partition, records in fetcher._answer(fetcher._read_frame()).items():
                got, offsets[partition] = _whole_batches(records, offsets[partition],
                                                         check_crc=False)
                if not got:
                    raise VerificationError(f"fetch of {job.topic}-{partition} at "
                                            f"{offsets[partition]} found nothing")
                if offsets[partition] >= job.end:
                    offsets[partition] = 0
                count.value += got
    finally:
        fetcher.close()
