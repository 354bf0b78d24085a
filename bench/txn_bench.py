"""What transactions cost: transactional against idempotent produce, read_committed
against read_uncommitted consume.

Run with ``python -m bench.txn_bench`` (``--quick`` for a smoke run). Against one
broker process, in one run, 1 KiB records over :data:`PARTITIONS` partitions:

* produce, with each transactional client users have here (confluent-kafka, kafka-python,
  aiokafka, and KafkaJS where scripts/install-kafkajs.sh installed it:
  :data:`PRODUCE_RUNS`): one transactional producer sending transactions of 1,000
  records (``begin_transaction``, the records, ``commit_transaction``) against one
  idempotent producer (acks=all) of the same client and settings sending the same
  records as fast as it keeps them in order; target: at least 80% of the idempotent producer's
  records/s, for each client. Each run writes a fresh topic, and is read back at
  read_committed by librdkafka, every record checked.
* consume, with confluent-kafka: a topic written in transactions of 1,000 records,
  every tenth one aborted, read from the start at read_uncommitted (every record must
  come back, the aborted ones too) and at read_committed (exactly the committed ones,
  none of the aborted); target: read_committed at least 90% of read_uncommitted. Both
  read the same log, so the rate compared is the log's records per second of the read,
  delivered or not (records delivered per second are shown too: read_committed
  delivers 90% of them).

Where a transaction's time goes is printed beside the targets: per 1,000 records, each
producer's time handing them over and waiting for them, and its requests' time in the
broker (from the broker's request metrics, ``metrics.listener`` on for every run), the
rest being the client's; with, for reference, a librdkafka idempotent producer flushing
every 1,000 records (the most any producer reaches that waits for its records as
``commit_transaction`` does).

Each client's runs alternate in ABBA order (A, B, B, A, ...) so drift in the machine's
load falls on both alike, each after the page cache was written back (``sync``: a run
must not pay for the writeback of the one before); figures are medians, with the
broker's CPU per record. It prints a table, writes ``txn_bench.json`` and the plot
``txn_bench.png`` to ``bench/out/`` and, unless ``--quick``, ``docs/txn-benchmarks.md``
with the plot as
``docs/img/bench-txn.png`` and its table in a section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend
from aiokafka import AIOKafkaProducer  # noqa: E402
from confluent_kafka import KafkaError, Message, Producer, libversion  # noqa: E402
from kafka import KafkaProducer  # noqa: E402
from kafka.producer.future import FutureRecordMetadata  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bench.clients.kafka import PRODUCER_CONFIG, KafkaClient  # noqa: E402
from bench.cpu import Stopwatch, Window, collector_paused  # noqa: E402
from bench.node import NODE_MODULES, kafkajs_installed, node_command  # noqa: E402
from bench.records import RecordSet, VerificationError  # noqa: E402
from bench.run import settle  # noqa: E402
from bench.sections import write_section  # noqa: E402
from gregor.broker.process import BrokerProcess  # noqa: E402
from gregor.metrics import names  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
DOCS = Path(__file__).resolve().parent.parent / "docs"
RECORD = 1024
PARTITIONS = 4
TRANSACTION = 1000  # records per transaction
ABORT_EVERY = 10  # every tenth transaction of the consume topic is aborted
PRODUCE_TARGET, CONSUME_TARGET = 0.8, 0.9
IDEMPOTENT = {"enable.idempotence": True}
READ_COMMITTED = {"isolation.level": "read_committed"}
READ_UNCOMMITTED = {"isolation.level": "read_uncommitted"}
_TIMEOUT_S = 60
TRANSACTIONAL, IDEMPOTENT_RUN = "transactional produce", "idempotent produce"
FLUSHED = "idempotent produce, flushed every 1,000"
CONFLUENT, KAFKA_PYTHON, AIOKAFKA = "confluent-kafka", "kafka-python", "aiokafka"
KAFKAJS = "KafkaJS"
KAFKAJS_PRODUCER = Path(__file__).resolve().parent / "kafkajs_produce.js"
# Per client, the target's two sides; and for librdkafka the reference that tells the
# transactions' own cost from that of waiting for every 1,000 records (the client's
# flush in commit).
PRODUCE_RUNS = {CONFLUENT: (IDEMPOTENT_RUN, TRANSACTIONAL, FLUSHED),
                KAFKA_PYTHON: (IDEMPOTENT_RUN, TRANSACTIONAL),
                AIOKAFKA: (IDEMPOTENT_RUN, TRANSACTIONAL)}
# KafkaJS where scripts/install-kafkajs.sh installed it (scripts/test.sh does).
if kafkajs_installed():
    PRODUCE_RUNS[KAFKAJS] = (IDEMPOTENT_RUN, TRANSACTIONAL)
# The pure-Python clients' settings, the same for both of a client's producers: their
# defaults (16 KiB batches, no linger) would put 16 records in a batch, so librdkafka's
# (PRODUCER_CONFIG: linger 5 ms, batches up to 1 MB) where they have the setting.
KAFKA_PYTHON_CONFIG: dict[str, Any] = {"linger_ms": 5, "batch_size": 1_000_000}
AIOKAFKA_CONFIG: dict[str, Any] = {"linger_ms": 5, "max_batch_size": 1_000_000}
# Records per produce run: the pure-Python clients hand over each record with a Python
# call (tens of µs), so they get fewer records, to keep the bench's time in bounds.
RECORDS = {CONFLUENT: 400 * TRANSACTION, KAFKA_PYTHON: 50 * TRANSACTION,
           AIOKAFKA: 50 * TRANSACTION, KAFKAJS: 100 * TRANSACTION}
QUICK_RECORDS = 20 * TRANSACTION
# The requests of a transaction whose time in the broker (arrival to answer sent, from
# the broker's own request metrics) the breakdown shows, by Kafka's request names.
TIMED_REQUESTS = ("Produce", "AddPartitionsToTxn", "EndTxn")
# And those it counts, per 1,000 records: how many requests a client splits the records
# and the registration of their partitions into.
COUNTED_REQUESTS = {"Produce": "Produce requests",
                    "AddPartitionsToTxn": "AddPartitionsToTxn requests"}


@dataclass
class Run:
    workload: str  # "idempotent produce", "read_committed consume", ...
    records: int  # records of the log the run wrote or read
    delivered: int  # records it acknowledged or handed to the application
    seconds: float
    broker_cores: float
    client_cores: float
    # Per transaction (or flushed group of TRANSACTION records), means in ms; 0 if
    # the run has none.
    queue_ms: float = 0.0
    commit_ms: float = 0.0
    # Per TRANSACTION records, ms from each of TIMED_REQUESTS' arrival at the broker
    # to its answer sent, summed over the run's requests of that kind; and the number
    # of COUNTED_REQUESTS (by their values).
    broker_ms: dict[str, float] | None = None

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def broker_us_per_record(self) -> float:
        return self.broker_cores * self.seconds / self.records * 1e6


@dataclass
class Row:
    measured: str
    baseline: str
    measured_records_per_s: float
    baseline_records_per_s: float
    measured_delivered_per_s: float
    baseline_delivered_per_s: float
    measured_us: float
    baseline_us: float
    target: float
    runs: int

    @property
    def ratio(self) -> float:
        return self.measured_records_per_s / self.baseline_records_per_s

    @property
    def met(self) -> bool:
        return self.ratio >= self.target


@dataclass
class Phases:
    """Where one producer's transactions (or flushed groups of TRANSACTION records)
    spent their time, in seconds each: handing the records to the client
    (``begin_transaction`` and ``produce_batch``), and waiting for them to be written and
    the transaction committed (``commit_transaction``: the client's flush, then EndTxn)."""

    queue: list[float]
    commit: list[float]


def produce_in_transactions(bootstrap: str, topic: str, records: RecordSet,
                            watch: Stopwatch, aborted: Callable[[int], bool] = lambda _: False,
                            partitions: int = PARTITIONS, phases: Phases | None = None
                            ) -> Window:
    """One transactional producer: transaction ``i`` holds records ``i * TRANSACTION`` to
    ``(i + 1) * TRANSACTION - 1`` (round-robin over the partitions, as every bench
    producer sends them) and is aborted if ``aborted(i)``."""
    producer, failures = _verified_producer(
        bootstrap, {"transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(_TIMEOUT_S)  # finding the coordinator is not timed

    def end(number: int) -> None:
        if aborted(number):
            # Written first: abort_transaction would purge records still queued in the
            # client, and the log must hold aborted records for readers to skip.
            producer.flush(_TIMEOUT_S)
            producer.abort_transaction(_TIMEOUT_S)
        else:
            producer.commit_transaction(_TIMEOUT_S)

    return _send_batches_in_groups(producer, failures, topic, records, watch, partitions,
                                   producer.begin_transaction, end, phases)


def produce_flushed(bootstrap: str, topic: str, records: RecordSet, watch: Stopwatch,
                    phases: Phases) -> Window:
    """The transactional producer's records and pauses without a transaction: an
    idempotent producer (acks=all) that flushes after every TRANSACTION records. Not a
    target's baseline: what the transactions' own work (AddPartitionsToTxn, EndTxn,
    markers) adds to a producer that waits for every 1,000 records anyway."""
    producer, failures = _verified_producer(bootstrap, {})
    producer.list_topics(topic, timeout=10)  # connect before the clock starts

    def end(_number: int) -> None:
        if producer.flush(_TIMEOUT_S):
            raise VerificationError(f"{topic}: records left unacknowledged")

    return _send_batches_in_groups(producer, failures, topic, records, watch, PARTITIONS,
                                   lambda: None, end, phases)


def _verified_producer(bootstrap: str, extra: dict[str, str]
                       ) -> tuple[Producer, list[KafkaError]]:
    """An idempotent acks=all producer with the bench's settings, and the list its
    delivery reports put failures in."""
    failures: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _msg: Message) -> None:
        if error is not None:
            failures.append(error)

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG, **IDEMPOTENT,
                         "acks": "all", **extra, "on_delivery": on_delivery, "log_level": 0})
    return producer, failures


def _send_batches_in_groups(producer: Producer, failures: list[KafkaError], topic: str,
                            records: RecordSet, watch: Stopwatch, partitions: int,
                            begin: Callable[[], None], end: Callable[[int], None],
                            phases: Phases | None) -> Window:
    """:func:`_send_in_groups` with librdkafka: each partition's share of a group handed
    over with one ``produce_batch``, the one call that keeps the Python loop from setting
    the pace (see :meth:`bench.clients.kafka.KafkaClient.produce`)."""
    lanes = [[{"value": value} for value in lane] for lane in records.partitions(partitions)]

    def send(start: int, stop: int) -> None:
        for partition, lane in enumerate(lanes):
            batch = lane[start:stop]
            if producer.produce_batch(topic, batch, partition=partition) != len(batch):
                raise VerificationError(f"{topic}: producer queue refused records")
        producer.poll(0)

    window = _send_in_groups(send, len(lanes[0]), partitions, watch, begin, end, phases)
    if failures:
        raise VerificationError(f"{topic}: {len(failures)} records failed ({failures[0]})")
    return window


def _send_in_groups(send: Callable[[int, int], None], lane_length: int, partitions: int,
                    watch: Stopwatch, begin: Callable[[], None], end: Callable[[int], None],
                    phases: Phases | None, finish: Callable[[], None] = lambda: None
                    ) -> Window:
    """The records in groups of TRANSACTION, whatever the client: ``send(start, stop)``
    hands over each partition's records ``start`` to ``stop - 1``, ``begin()`` before and
    ``end(number)`` after each group, ``finish()`` after the last, all timed by ``watch``;
    the two phases of each group go to ``phases``."""
    per_lane = TRANSACTION // partitions
    watch.start()
    for number, start in enumerate(range(0, lane_length, per_lane)):
        began = time.perf_counter()
        begin()
        send(start, start + per_lane)
        queued = time.perf_counter()
        end(number)
        if phases is not None:
            phases.queue.append(queued - began)
            phases.commit.append(time.perf_counter() - queued)
    finish()
    return watch.stop()


def produce_kafka_python(bootstrap: str, topic: str, records: RecordSet, watch: Stopwatch,
                         transactional: bool, phases: Phases) -> Window:
    """kafka-python's producer, idempotent (acks=all) or transactional (``begin_transaction``,
    each record ``send``, ``commit_transaction``), with KAFKA_PYTHON_CONFIG; records in the
    transactional producer's groups either way, the idempotent one flushing only at the
    end."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, **KAFKA_PYTHON_CONFIG,
        transactional_id=f"bench-{uuid.uuid4().hex[:8]}" if transactional else None)
    lanes = records.partitions(PARTITIONS)
    futures: list[FutureRecordMetadata] = []

    def send(start: int, stop: int) -> None:
        for partition, lane in enumerate(lanes):
            futures.extend(producer.send(topic, value, partition=partition)
                           for value in lane[start:stop])

    try:
        if transactional:
            producer.init_transactions()  # finding the coordinator is not timed
            window = _send_in_groups(send, len(lanes[0]), PARTITIONS, watch,
                                     producer.begin_transaction,
                                     lambda _number: producer.commit_transaction(), phases)
        else:
            producer.partitions_for(topic)  # connect before the clock starts
            window = _send_in_groups(send, len(lanes[0]), PARTITIONS, watch, lambda: None,
                                     lambda _number: None, None, producer.flush)
    finally:
        producer.close()
    failed = [f for f in futures if not f.succeeded()]
    if failed:
        raise VerificationError(f"{topic}: {len(failed)} records failed ({failed[0].exception})")
    return window


def produce_aiokafka(bootstrap: str, topic: str, records: RecordSet, watch: Stopwatch,
                     transactional: bool, phases: Phases) -> Window:
    """aiokafka's producer, as :func:`produce_kafka_python`: each record ``await send``,
    transactions with ``begin_transaction`` and ``commit_transaction``. One event loop runs
    each step to completion, so that its groups go through the other clients' loop
    (:func:`_send_in_groups`); its producer's sender runs while a step is awaited, as in
    an application that does nothing else."""
    loop = asyncio.new_event_loop()
    run = loop.run_until_complete

    async def create() -> AIOKafkaProducer:  # it takes the loop it is created in
        return AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, **AIOKAFKA_CONFIG,
            transactional_id=f"bench-{uuid.uuid4().hex[:8]}" if transactional else None)

    producer = run(create())
    lanes = records.partitions(PARTITIONS)
    futures: list[asyncio.Future[Any]] = []

    async def send(start: int, stop: int) -> None:
        for partition, lane in enumerate(lanes):
            for value in lane[start:stop]:
                futures.append(await producer.send(topic, value, partition=partition))

    try:
        run(producer.start())  # connects and, if transactional, initialises: not timed
        if transactional:
            window = _send_in_groups(lambda start, stop: run(send(start, stop)), len(lanes[0]),
                                     PARTITIONS, watch, lambda: run(producer.begin_transaction()),
                                     lambda _number: run(producer.commit_transaction()), phases)
        else:
            run(producer.partitions_for(topic))
            window = _send_in_groups(lambda start, stop: run(send(start, stop)), len(lanes[0]),
                                     PARTITIONS, watch, lambda: None, lambda _number: None, None,
                                     lambda: run(producer.flush()))
    finally:
        run(producer.stop())
        loop.close()
    failed = [f for f in futures if not f.done() or f.exception() is not None]
    if failed:
        raise VerificationError(f"{topic}: {len(failed)} records failed "
                                f"({failed[0].exception() if failed[0].done() else 'pending'})")
    return window


PURE_PYTHON: dict[str, Callable[[str, str, RecordSet, Stopwatch, bool, Phases], Window]] = {
    KAFKA_PYTHON: produce_kafka_python, AIOKAFKA: produce_aiokafka}


def produce_kafkajs(broker: BrokerProcess, topic: str, records: RecordSet,
                    transactional: bool, phases: Phases) -> Window:
    """KafkaJS's producer in ``node`` (bench/kafkajs_produce.js), idempotent (acks=all) or
    transactional, each transaction's records in one ``sendBatch``; the idempotent one
    sends the same groups back to back. Timed from the go given to the program, once it
    is connected, to its last group acknowledged; the client's CPU is the program's."""
    with tempfile.NamedTemporaryFile(prefix="gregor-txn-bench-") as values:
        for lane in records.partitions(PARTITIONS):
            values.write(b"".join(lane))
        values.flush()
        command, env = node_command(
            KAFKAJS_PRODUCER, broker.bootstrap, topic, values.name, str(PARTITIONS),
            str(records.size), str(TRANSACTION // PARTITIONS),
            "transactional" if transactional else "idempotent")
        with subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) as program:
            assert program.stdin is not None and program.stdout is not None
            if program.stdout.readline() != "ready\n":
                raise VerificationError(f"{topic}: the KafkaJS producer did not start")
            watch = Stopwatch(lambda: [broker.pid] if broker.pid is not None else [],
                              lambda: [program.pid])
            watch.start()
            program.stdin.write("go\n")
            program.stdin.flush()
            report = program.stdout.readline()
            window = watch.stop()
            if program.wait(_TIMEOUT_S) != 0 or not report:
                raise VerificationError(f"{topic}: the KafkaJS producer failed")
    times = json.loads(report)
    phases.queue += times["queue"]
    phases.commit += times["commit"]
    return window


def produce_workload(kind: str, client: str) -> str:
    """A produce run's name in the tables: its kind, then its client."""
    return f"{kind} ({client})"


def committed_values(records: RecordSet, aborted: Callable[[int], bool]) -> list[list[bytes]]:
    """What a read_committed reader must see, per partition."""
    per_lane = TRANSACTION // PARTITIONS
    return [[value for index, value in enumerate(lane) if not aborted(index // per_lane)]
            for lane in records.partitions(PARTITIONS)]


def _every_tenth(number: int) -> bool:
    return number % ABORT_EVERY == ABORT_EVERY - 1


def request_times(metrics_url: str) -> dict[str, float]:
    """The broker's total ms so far from arrival to answer sent, per TIMED_REQUESTS, and
    its count of each of COUNTED_REQUESTS (by their values)."""
    with urllib.request.urlopen(metrics_url, timeout=10) as answer:
        text = answer.read().decode()
    totals = dict.fromkeys((*TIMED_REQUESTS, *COUNTED_REQUESTS.values()), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            request = sample.labels.get("request")
            if sample.name == names.TOTAL_TIME_MS + "_sum" and request in TIMED_REQUESTS:
                totals[request] = sample.value
            elif sample.name == names.TOTAL_TIME_MS + "_count" and request in COUNTED_REQUESTS:
                totals[COUNTED_REQUESTS[request]] = sample.value
    return totals


class Bench:
    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.client = KafkaClient(broker.bootstrap)
        self.watch = Stopwatch(lambda: [broker.pid] if broker.pid is not None else [])

    def _run(self, workload: str, records: int, delivered: int, window: Window,
             phases: Phases | None = None) -> Run:
        run = Run(workload, records, delivered, window.seconds, window.server_cores,
                  window.client_cores)
        if phases is not None:
            # Means: with the run's few pauses in them, as in its records/s.
            run.queue_ms = statistics.fmean(phases.queue) * 1000
            run.commit_ms = statistics.fmean(phases.commit) * 1000
        return run

    def produce(self, records: RecordSet, client: str, kind: str) -> Run:
        """``kind``: TRANSACTIONAL, IDEMPOTENT_RUN or FLUSHED (see :data:`PRODUCE_RUNS`)."""
        topic = f"p-{uuid.uuid4().hex[:8]}"
        self.client.create(topic, PARTITIONS)
        settle()
        phases = Phases([], [])
        assert self.broker.metrics_url is not None
        before = request_times(self.broker.metrics_url)  # both scrapes outside the window
        with collector_paused():
            if client == KAFKAJS:
                window = produce_kafkajs(self.broker, topic, records, kind == TRANSACTIONAL,
                                         phases)
            elif client != CONFLUENT:
                window = PURE_PYTHON[client](self.broker.bootstrap, topic, records, self.watch,
                                             kind == TRANSACTIONAL, phases)
            elif kind == TRANSACTIONAL:
                window = produce_in_transactions(self.broker.bootstrap, topic, records,
                                                 self.watch, phases=phases)
            elif kind == FLUSHED:
                window = produce_flushed(self.broker.bootstrap, topic, records, self.watch,
                                         phases)
            else:
                window = self.client.produce(topic, PARTITIONS, records, "all", self.watch,
                                             IDEMPOTENT)
            after = request_times(self.broker.metrics_url)
            # Read back: every record once, in order, committed.
            self.client.consume(topic, PARTITIONS, records, Stopwatch(lambda: []),
                                READ_COMMITTED)
        self.client.delete(topic, PARTITIONS)
        run = self._run(produce_workload(kind, client), records.count, records.count, window,
                        phases if phases.queue else None)
        groups = records.count / TRANSACTION
        run.broker_ms = {name: (after[name] - before[name]) / groups for name in after}
        return run

    def write_aborting(self, records: RecordSet) -> str:
        topic = f"c-{uuid.uuid4().hex[:8]}"
        self.client.create(topic, PARTITIONS)
        produce_in_transactions(self.broker.bootstrap, topic, records, Stopwatch(lambda: []),
                                _every_tenth)
        return topic

    def consume(self, topic: str, records: RecordSet, committed: bool) -> Run:
        expected = committed_values(records, _every_tenth) if committed else None
        settle()
        with collector_paused():
            window = self.client.consume(topic, PARTITIONS, records, self.watch,
                                         READ_COMMITTED if committed else READ_UNCOMMITTED,
                                         expected)
        delivered = records.count if expected is None else sum(map(len, expected))
        level = "read_committed" if committed else "read_uncommitted"
        return self._run(f"{level} consume", records.count, delivered, window)


def abba(pairs: int, *sides: Callable[[], Run]) -> list[Run]:
    """Each side ``pairs`` times, in A B, B A order (A B C, C B A with three)."""
    runs = []
    for pair in range(pairs):
        order = sides if pair % 2 == 0 else sides[::-1]
        runs += [run() for run in order]
    return runs


def measure(quick: bool, pairs: int) -> tuple[list[Row], list[Run]]:
    produced = {client: RecordSet(RECORD, QUICK_RECORDS if quick else count)
                for client, count in RECORDS.items()}
    records = produced[CONFLUENT]
    work = Path(tempfile.mkdtemp(prefix="gregor-txn-bench-"))
    # Its request metrics tell a transaction's time in the broker from the client's.
    broker = BrokerProcess(work / "broker", overrides={
        "metrics.listener": "http://127.0.0.1:0/metrics"}).start()
    try:
        bench = Bench(broker)
        warm_up = RecordSet(RECORD, 5 * TRANSACTION, seed=1)
        runs = []
        for client, kinds in PRODUCE_RUNS.items():
            # Not recorded: the first creates __transaction_state; and no measured run
            # is the first of its kind.
            for kind in kinds:
                bench.produce(warm_up, client, kind)
            runs += abba(pairs, *(lambda client=client, kind=kind:
                                  bench.produce(produced[client], client, kind)
                                  for kind in kinds))
        topic = bench.write_aborting(records)
        runs += abba(pairs, lambda: bench.consume(topic, records, False),
                     lambda: bench.consume(topic, records, True))
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return [*(_row(runs, produce_workload(TRANSACTIONAL, client),
                   produce_workload(IDEMPOTENT_RUN, client), PRODUCE_TARGET)
              for client in PRODUCE_RUNS),
            _row(runs, "read_committed consume", "read_uncommitted consume",
                 CONSUME_TARGET)], runs


def _row(runs: list[Run], measured: str, baseline: str, target: float) -> Row:
    def median(workload: str, value: Callable[[Run], float]) -> float:
        return statistics.median(value(r) for r in runs if r.workload == workload)

    def per_s(r: Run) -> float:
        return r.records_per_s

    def delivered(r: Run) -> float:
        return r.delivered / r.seconds

    def us(r: Run) -> float:
        return r.broker_us_per_record

    return Row(measured, baseline, median(measured, per_s), median(baseline, per_s),
               median(measured, delivered), median(baseline, delivered),
               median(measured, us), median(baseline, us), target,
               sum(r.workload == measured for r in runs))


def report(rows: list[Row]) -> str:
    lines = ["| measured | against | records/s | delivered records/s | "
             "broker CPU per record | ratio | target | met |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.measured} | {r.baseline} | {r.measured_records_per_s:,.0f} / "
            f"{r.baseline_records_per_s:,.0f} | {r.measured_delivered_per_s:,.0f} / "
            f"{r.baseline_delivered_per_s:,.0f} | {r.measured_us:.1f} / {r.baseline_us:.1f} µs "
            f"| {r.ratio:.0%} | >= {r.target:.0%} | {'yes' if r.met else 'NO'} |")
    return "\n".join(lines)


def breakdown(runs: list[Run]) -> str:
    """Where a transaction's time goes: per 1,000 records, each producer's time, split
    into handing the records to the client and waiting for them, and the time its
    requests spent in the broker, the rest being the client's and the network's
    (medians of the runs)."""
    lines = ["| producer | ms per 1,000 records | handing them to the client | "
             "waiting: flush, and EndTxn if transactional | in the broker: "
             + ", ".join(TIMED_REQUESTS) + " | not in the broker | requests: "
             + ", ".join(COUNTED_REQUESTS) + " | "
             "broker CPU per record |",
             "|---|---|---|---|---|---|---|---|"]
    per_thousand, broker_total = {}, {}
    for client, kind, name in ((client, kind, produce_workload(kind, client))
                               for client, kinds in PRODUCE_RUNS.items() for kind in kinds):
        chosen = [r for r in runs if r.workload == name]
        if not chosen:
            continue
        per_thousand[name] = statistics.median(r.seconds / r.records for r in chosen) * 1e6
        in_broker = {request: statistics.median((r.broker_ms or {}).get(request, 0.0)
                                                for r in chosen) for request in TIMED_REQUESTS}
        requests = ", ".join(
            f"{statistics.median((r.broker_ms or {}).get(counted, 0.0) for r in chosen):.1f}"
            for counted in COUNTED_REQUESTS.values())
        broker_total[name] = sum(in_broker.values())
        if kind == IDEMPOTENT_RUN and client != KAFKAJS:
            # Requests in flight together: their times overlap, and the client's work
            # overlaps them (KafkaJS's waits for each group).
            phases, rest = "(overlapped) | (overlapped)", "(overlapped)"
        else:
            phases = (f"{statistics.median(r.queue_ms for r in chosen):.2f} ms | "
                      f"{statistics.median(r.commit_ms for r in chosen):.2f} ms")
            rest = f"{per_thousand[name] - sum(in_broker.values()):.2f} ms"
        lines.append(f"| {name} | {per_thousand[name]:.2f} ms | {phases} | "
                     + " + ".join(f"{ms:.2f}" for ms in in_broker.values()) + f" ms | {rest} | "
                     f"{requests} | "
                     f"{statistics.median(r.broker_us_per_record for r in chosen):.1f} µs |")
    sides = [produce_workload(kind, CONFLUENT) for kind in PRODUCE_RUNS[CONFLUENT]]
    if set(sides) <= per_thousand.keys():
        idempotent, transactional, flushed = (per_thousand[side] for side in sides)
        outside = ((transactional - broker_total[sides[1]])
                   - (flushed - broker_total[sides[2]]))
        lines.append(
            f"\nWith librdkafka, a transaction adds {transactional - flushed:.2f} ms to "
            f"flushing its records, and flushing them adds {flushed - idempotent:.2f} ms to "
            f"the idempotent producer's 1,000 records; the target allows a transaction "
            f"{idempotent * (1 / PRODUCE_TARGET - 1):.2f} ms more than those 1,000 records. "
            f"Flushing alone, with no transaction, reaches {idempotent / flushed:.0%} of the "
            f"idempotent producer's records/s: the most a producer can reach that waits for "
            f"all its records every 1,000, as commit_transaction does. The target leaves a "
            f"transaction {idempotent / PRODUCE_TARGET - flushed:.2f} ms over the flushed "
            f"producer's 1,000 records; outside the broker it takes {outside:.2f} ms more, "
            f"its requests in the broker "
            f"{broker_total[sides[1]] - broker_total[sides[2]]:+.2f} ms.")
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    figure, axis = plt.subplots(figsize=(9, 3.5))
    positions = range(len(rows))
    axis.bar([p - 0.2 for p in positions], [r.baseline_records_per_s / 1e3 for r in rows],
             0.4, label="idempotent / read_uncommitted", color="#888")
    axis.bar([p + 0.2 for p in positions], [r.measured_records_per_s / 1e3 for r in rows],
             0.4, label="transactional / read_committed", color="#1f6feb")
    for p, r in zip(positions, rows, strict=True):
        axis.annotate(f"{r.ratio:.0%} (target {r.target:.0%})",
                      (p + 0.2, r.measured_records_per_s / 1e3), ha="center", va="bottom",
                      fontsize=8)
    axis.set_xticks(list(positions))
    labels = {produce_workload(TRANSACTIONAL, client): f"produce, {client}"
              for client in PRODUCE_RUNS}
    axis.set_xticklabels([labels.get(r.measured, "consume, 10% aborted") for r in rows],
                         fontsize=8)
    axis.set_ylabel("thousand 1 KiB records/s (median)")
    axis.set_title(f"transactions of 1,000, {PARTITIONS} partitions, one broker")
    top = max(max(r.measured_records_per_s, r.baseline_records_per_s) for r in rows) / 1e3
    axis.set_ylim(0, top * 1.3)  # room for the legend above the bars
    axis.legend(fontsize=8, loc="upper center", ncols=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small runs, for a smoke test")
    parser.add_argument("--pairs", type=int, default=None,
                        help="pairs of runs per comparison (default 5, quick 1)")
    args = parser.parse_args()
    pairs = args.pairs or (1 if args.quick else 5)
    started, load_before = time.monotonic(), os.getloadavg()[0]
    rows, runs = measure(args.quick, pairs)
    minutes = (time.monotonic() - started) / 60
    # Other work on the cores changes the ratio most (a loaded run once showed 90% where
    # a quiet one showed 38%): the document says how loaded the machine was.
    load = f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    OUT.mkdir(exist_ok=True)
    (OUT / "txn_bench.json").write_text(json.dumps(
        {"rows": [{**asdict(r), "ratio": r.ratio, "met": r.met} for r in rows],
         "runs": [{**asdict(r), "records_per_s": r.records_per_s} for r in runs]}, indent=1))
    plot(rows, OUT / "txn_bench.png")
    table, phases = report(rows), breakdown(runs)
    print(table)
    print(f"\nWhere a transaction's time goes:\n{phases}")
    print(f"{len(runs)} runs, {minutes:.1f} minutes, {load}")
    if not args.quick:
        shutil.copyfile(OUT / "txn_bench.png", DOCS / "img" / "bench-txn.png")
        (DOCS / "txn-benchmarks.md").write_text(_document(table, phases, pairs, runs,
                                                          minutes, load))
        write_section(DOCS / "benchmarks.md", "txn_bench", (
            f"## Transactions\n\n`python -m bench.txn_bench`, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {load}; setup, plot and "
            f"where a transaction's time goes: [txn-benchmarks.md](txn-benchmarks.md).\n\n"
            f"{table}"))


KAFKAJS_CLIENT = """
- KafkaJS {version} (Node.js, bench/kafkajs_produce.js), its defaults (it has no
  linger: a send is its own requests): each transaction's records in one `sendBatch`,
  awaited (KafkaJS answers it once the records are acknowledged), then `commit()`; the
  idempotent producer (`maxInFlightRequests` 1, as its idempotence requires) awaits each
  group's `sendBatch` before the next, because KafkaJS keeps no order between sends not
  awaited (in a scratch run, a partition's log began with the fourth group's records)
  and the bench checks every partition's order. For KafkaJS "handing them to the client"
  below is `transaction()` and the acknowledged `sendBatch` (AddPartitionsToTxn
  included), or the idempotent producer's acknowledged `sendBatch`, and "waiting" is
  `commit()`: EndTxn alone."""

KAFKAJS_SECTION = """### KafkaJS

KafkaJS stops and goes as librdkafka does in a transaction (no record before
AddPartitionsToTxn is answered, no EndTxn before every record is acknowledged), and asks
for the coordinator (FindCoordinator) before each of its two transactional requests:
five round trips a transaction, where its idempotent producer makes one per 1,000
records. What sets its pace is its own encoding of the records: in one transaction
traced with its debug log (2026-11-28, scratch, not kept), 25 ms passed between
AddPartitionsToTxn's answer and the Produce request of the 1,000 records, which the
broker answered in 3 ms; the four other round trips took 0.8-1.4 ms each. So the
transactions' requests are a few ms of a transaction's 30, and the row meets the target
because KafkaJS is slow per record (it encodes 1,000 records in about the time
librdkafka's idempotent producer sends ten times as many), not because the broker does
less for its transactions: the broker's CPU per record is much the same for the four
clients' transactional producers (the first table).

"""


def kafkajs_version() -> str:
    return json.loads((NODE_MODULES / "kafkajs" / "package.json").read_text())["version"]


def _document(table: str, phases: str, pairs: int, runs: list[Run], minutes: float,
              load: str) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    records = {client: next(r.records for r in runs
                            if r.workload == produce_workload(IDEMPOTENT_RUN, client))
               for client in PRODUCE_RUNS}
    kafkajs_records = kafkajs_client = kafkajs_section = ""
    if KAFKAJS in records:
        kafkajs_records = f" and {records[KAFKAJS]:,} with KafkaJS"
        kafkajs_client = KAFKAJS_CLIENT.format(version=kafkajs_version())
        kafkajs_section = KAFKAJS_SECTION
    return f"""# What transactions cost: produce and consume

`python -m bench.txn_bench`, {when}, {minutes:.0f} minutes on this 2-core machine, one
broker process and the load generator sharing the cores ({load}). {pairs} runs of each side per
comparison in ABBA order, after a warm-up, each after `sync`; figures are medians.
Records: 1 KiB, each numbered and checked, over {PARTITIONS} partitions;
{records[CONFLUENT]:,} per run with confluent-kafka (produce and consume),
{records[KAFKA_PYTHON]:,} with kafka-python and {records[AIOKAFKA]:,} with
aiokafka{kafkajs_records}: the pure-Python clients take a Python call per record (tens of
µs), and fewer records keep the bench within a few minutes. Each client with its
throughput settings, the same for its transactional and its idempotent producer:

- confluent-kafka {version("confluent-kafka")} (librdkafka {libversion()[0]}):
  bench's usual settings, `linger.ms` 5, `batch.size` 1 MB; each partition's share of
  {TRANSACTION:,} records handed over with one `produce_batch`.
- kafka-python {version("kafka-python")}: `linger_ms` 5, `batch_size` 1 MB; each
  record `send()`.
- aiokafka {version("aiokafka")}: `linger_ms` 5, `max_batch_size` 1 MB; each record
  `await send()`, one event loop running each step (a group's sends,
  `begin_transaction()`, `commit_transaction()`, the idempotent producer's final
  `flush()`) to completion.{kafkajs_client}

The pure-Python clients' defaults (16 KiB batches, no linger) put 16 records in a
batch; librdkafka's settings are theirs where they have them (in a scratch run of
50,000 records, 2026-11-27, their idempotent producers sent 10,000 (kafka-python) and
17,000 (aiokafka) records/s with 16 KiB batches, 33,000 and 57,000 with 1 MB; load
average 3-4).

- **Produce**, with each client: one transactional producer (transactional id set,
  transactions of {TRANSACTION:,} records: `begin_transaction`, the records,
  `commit_transaction`, which waits for the commit) against one idempotent producer of
  the same client (idempotence on, acks=all) of the same records, a fresh topic per
  run, the client's runs in ABBA order of their own; and, for reference only, a
  librdkafka idempotent producer flushing after every {TRANSACTION:,} records. Every run is
  read back at read_committed (by librdkafka) and every record checked (count, order,
  content).
- **Consume**: one topic written in transactions of {TRANSACTION:,} records, every
  {ABORT_EVERY}th aborted, read from the start by a librdkafka consumer at
  read_uncommitted (all records come back, aborted ones too) and at read_committed
  (exactly the committed records: any aborted record seen fails the run). Both read
  the whole log, so "records/s" is the log's records over the read's time; "delivered"
  counts what reached the application.

{table}

A transaction adds, per transaction: AddPartitionsToTxn for its partitions (one write
to `__transaction_state`, before its first records may be sent), and EndTxn: the
coordinator writes PrepareCommit and answers, then writes a marker to each partition
and CompleteCommit while the producer hands over its next records (the next
AddPartitionsToTxn waits for them); nothing per record. And a transactional producer
waits for every one of its records before it commits, where the idempotent one keeps
sending: a third producer, idempotent and flushing after every 1,000 records, tells
that pause from the transactions' own work.

## Where a transaction's time goes

Per 1,000 records (one transaction): each run's mean, the median over the runs;
"handing them to the client" is `begin_transaction` and the records' hand-over
(`produce_batch`, or each record's `send`), "waiting" is `commit_transaction` (the
client's flush, then EndTxn) or `flush`. "In the broker" is
the time from each request's arrival to its answer sent, from the broker's own request
metrics (`{names.TOTAL_TIME_MS}`, scraped before and after each run), summed per 1,000
records; "not in the broker" is the rest of the producer's time: the client's own work,
its threads handing work to each other, and the network. For the idempotent producers
that keep sending, these overlap and do not add up.

{phases}

### Why 80% is out of reach with librdkafka

A transaction's requests follow each other: librdkafka sends no record of it before
AddPartitionsToTxn is answered, and `commit_transaction` sends EndTxn only once every
record is acknowledged, so nothing overlaps the Python hand-over of the next 1,000
records, where the idempotent producer keeps the broker busy throughout. Timestamps of
one run's 110 transactions, taken at the broker (arrival and answer of each request,
the coordinator's steps) against the client's (medians, 2026-11-25, load average 3-6,
with scratch instrumentation not kept in the tree):

| step of one transaction | ms | whose |
|---|---|---|
| `begin_transaction`, `produce_batch` of 1,000 records | 0.93 | client (1) |
| records queued, to AddPartitionsToTxn arriving | 1.15 | client (2) |
| AddPartitionsToTxn | 0.35 | broker (3) |
| its answer, to the first Produce arriving | 0.29 | client (4) |
| 4 Produce requests of 250 records, one per partition | 1.75 | broker 1.50 (5) |
| last Produce answer, to EndTxn arriving | 0.18 | client |
| EndTxn until PrepareCommit written | 0.13 | broker |
| to `commit_transaction` returning | 0.12 | broker's answer, client |
| **total** (the run's mean: 5.14) | 4.90 | |

(1) The broker idle but for the previous transaction's markers and CompleteCommit,
done 0.8 ms after `begin_transaction`. (2) librdkafka registers a transaction's
partitions on a 1 ms timer started by its first record
(`rd_kafka_txn_schedule_register_partitions(rk, 1)`), run by its main thread. (3) Of
which the `__transaction_state` write 0.08 ms. (4) From librdkafka's main thread to its
broker thread, then a 258 KB request. (5) The rest: the client's sends between them.

The broker's transactional work on the producer's path (AddPartitionsToTxn, EndTxn up to
PrepareCommit) is about 0.5 ms of 4.9; the markers and CompleteCommit (0.25 ms) overlap
the client's next hand-over. The idempotent producer that flushes every 1,000 records,
with no transaction at all, shows the bound the stop-and-go alone sets: the sentence
under the table above gives it for this run (on 2026-11-25 it went from 53% to 103% from
one run to the next, with the load average between 3 and 8: the idempotent producer's
lead depends most on the cores it finds free). To reach 80% a transaction may add to the
idempotent producer's 1,000 records only what that sentence allows (0.4-1 ms in those
runs); handing the records to the client and the client's AddPartitionsToTxn timer take
about 2 ms before its first record is sent: from its records queued to its first Produce
arriving, 1.8 ms against 0.37 ms for the flushed producer in the same trace, of which
the broker's AddPartitionsToTxn 0.35 ms, so that a broker answering AddPartitionsToTxn
and EndTxn in no time would still leave a transaction about 1.1 ms over the flushed
producer before its first record, and the client's part of the EndTxn round trip (0.3
ms) after its last: more than the target allows. And the 4 Produce requests of a
transaction (one per partition, one after another) take no longer in the broker than
those of the flushed producer: the broker does no more per record for a transactional
append. Kafka 4's transactions V2 (KIP-890: partitions added by the Produce request
itself, no AddPartitionsToTxn) would remove the timer and one round trip, but librdkafka
2.16 does not implement it (below). The bench's client settings stay as they
are: `linger.ms` 0 shortens the wait between AddPartitionsToTxn's answer and the first
Produce (0.2 ms instead of up to 1.2 ms in one run) but speeds up the idempotent
producer as much (39% and 48% in two runs of two pairs, at `linger.ms` 0 and 5).

The broker's extra CPU per record (the table's last column), from /proc of the broker in
a scratch run of 200,000 records per producer, two runs each: per 1,000 records
0.80-0.85 ms for the idempotent producer, 1.25-1.35 ms flushed, 1.85-1.90 ms
transactional. So about 0.5 ms is what any producer costs that stops every 1,000 records
(4 Produce requests instead of about 1, as the table's column shows, and the broker's
thread sleeping and waking between them: 1.1-1.6 voluntary context switches per 1,000
records against 0.45), and about 0.6 ms the transactions' own work (AddPartitionsToTxn,
EndTxn, four markers, three `__transaction_state` writes, of which the markers and
CompleteCommit are off the producer's path). `python -m bench.profile txn-produce --size
1024 --partitions 4 --acks all` against `produce` with the same options (py-spy) finds
no per-append work of the transactional path: the coordinator's share of the broker's
samples is about 10% (markers 5.7%, EndTxn 2.1%, AddPartitionsToTxn 1.8%); what grows is
the time in the socket write of its answers (26-31% of the samples against 9%), each
answer waking a client thread that waits for it.

### kafka-python and aiokafka

Both hold a transaction's records back until AddPartitionsToTxn has added their
partitions, as librdkafka does (kafka-python's accumulator drains no batch of a
partition not yet added, `is_send_to_partition_allowed`; aiokafka's sender mutes those
partitions), though with no timer before it, and `commit_transaction` waits for every
record before EndTxn. kafka-python registers a transaction's partitions in several
AddPartitionsToTxn requests (the breakdown's requests column): its sender thread
registers the partitions it has seen so far, one request at a time, while the records of
the next partitions are still being handed over; librdkafka and aiokafka in one. Their
ratios are the clients' more than the broker's: their requests' time in the broker (the
breakdown's "in the broker") is a small part of their time per 1,000 records, the rest
being their own Python work, most of it in `send` (the column "handing them to the
client").

Where an aiokafka transaction's time goes, traced on 2026-11-28 (scratch timers around
its sender's steps, not kept; 30 transactions, about 20 ms each): the hand-over,
6.4-10.4 ms, during which its sender does not run (an `await send()` that finds room in
a batch does not yield); AddPartitionsToTxn, 0.9-1.2 ms; then two Produce requests one
after the other, 4.4-5.4 ms and 1.4-1.9 ms. The sender drains the partitions whose
batches have lingered `linger_ms` before `commit_transaction` closes the last one, and
with idempotence it keeps one request in flight per broker. EndTxn took 0.7 ms. With
`linger_ms` 0, both of its producers moved alike in a scratch run of 30,000 records,
two rounds each: transactional 48,000-54,000 records/s, idempotent 60,000-78,000.

{kafkajs_section}### KIP-890 (transactions V2) in librdkafka 2.16: not implemented

With transactions V2 (Kafka 4.0) a producer sends no AddPartitionsToTxn: Produce v12
adds the partition to the transaction, and EndTxn v5 answers with the next epoch. A
client uses it where the brokers' ApiVersions answer finalizes the feature
`transaction.version` at 2 or more. The librdkafka that confluent-kafka 2.16.1 bundles
(`confluent_kafka.libs/librdkafka-0cb94173.so.1`, `libversion()` 2.16.0; the wheel
ships no CHANGELOG) has none of it, checked on 2026-11-27:

- `strings` on the library finds neither `transaction.version` (the feature name it
  would look for) nor `KIP-890`; the KIPs it names are 4, 62, 98, 107, 133, 140, 195,
  229, 339, 345, 360, 396, 460, 464, 496, 554, 714, 848 and 896. It has AddPartitionsToTxn's
  request and handler (`rd_kafka_AddPartitionsToTxnRequest`,
  `rd_kafka_txn_handle_AddPartitionsToTxn`, "Not registering partitions: waiting for
  previous AddPartitionsToTxn request to complete").
- With `debug=protocol,eos,feature` against gregor, which offers AddPartitionsToTxn
  v0-3, EndTxn v0-3 and Produce v0-9, a transaction is sent as InitProducerId v4,
  AddPartitionsToTxn v0, Produce v9 and EndTxn v1: librdkafka takes the highest version
  both sides support, so v0 and v1 are its own highest, far from EndTxn v5.
- Its built-in mock cluster (`test.mock.num.brokers`, what librdkafka's own tests run
  against) offers AddPartitionsToTxn and EndTxn v0-1, Produce v0-10.
- Its request for KIP-890 support, confluentinc/librdkafka#5423, is open (status:planned).

Neither does gregor offer transactions V2 (no `transaction.version` feature,
AddPartitionsToTxn up to v4 (for brokers), EndTxn up to v3, Produce up to v9), so every client here
registers a transaction's partitions with AddPartitionsToTxn, as the breakdown's column
shows for all of them.

A read_committed Fetch is answered up to the last stable offset, with the aborted
transactions of the range read from the segments' `.txnindex`; the consumer drops
their records itself.

![throughput](img/bench-txn.png)
"""


if __name__ == "__main__":
    main()
