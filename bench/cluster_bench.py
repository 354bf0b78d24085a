"""The replicated cluster against one broker, and how long a failure stops writes.

Run with ``python -m bench.cluster_bench`` (``--quick`` for a smoke run). On this
machine, in one run, with a real ZooKeeper and real broker processes:

* throughput: 1 KiB records in 1 MB batches from ``bench.saturate``'s wire-protocol
  producers (prebuilt requests, a fraction of a core: librdkafka's own loop, 2.4 us
  a record, was the bottleneck of the one-broker figure), to one broker at acks=1 and
  to three brokers at RF=3, acks=all, min.insync.replicas=2, each on a quiet machine
  (dirty pages written back first) and right after a write-heavy run of the same
  length (whose bytes are still being written back). The one-broker figure is the
  reference of the ratios (targets: 50% quiet, 35% after a write-heavy run); it counts
  as the broker's limit when the same load sends ``bench.sink`` (a server that answers
  every produce at once and keeps nothing) at least a quarter more, measured first in
  the same run. With each broker's CPU per record (the same cores do three times the
  work);
* a follower catching up: one follower paused while 1 GiB of 1 KiB records is
  written, then MB/s until it holds all of it (target 500 MB/s), beside the rate at
  which a plain loop appends as many bytes to a new file in the same run
  (``bench.page_cache``: on this VM, memory the page cache takes for the first time
  costs more than the copy into it, so the machine bounds what any follower can do);
* latency: produce-to-acknowledgement percentiles at acks=all and 20,000 records/s
  over 8 partitions, after a second's warm-up (target: p99 under 10 ms);
* unavailability: under a steady acks=all load, the longest gap between two
  acknowledgements when the leader is killed (``kill -9``; target: the ZooKeeper
  session timeout plus 1 s) and when it is stopped cleanly (SIGTERM, controlled
  shutdown; target: under 1 s with no error seen by the producer).

Each throughput window also says how the machine's CPU went: each broker's CPU a
record and how much of it the kernel spent, and the whole machine's busy and stolen
CPU beside the brokers' (the rest is the load, ZooKeeper and the kernel's own threads:
writeback, memory compaction), so a ratio can be told the machine's or gregor's.

Every acknowledged record of the failure runs is read back and checked (count,
uniqueness, offsets). It prints a table, writes ``cluster_bench.json`` to
``bench/out/``, and (unless ``--quick``) the report ``docs/cluster-benchmarks.md``
with its plot ``docs/img/bench-cluster.png``, and its table in a section of
``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.cpu import collector_paused, cpu_seconds, kernel_seconds, machine_seconds  # noqa: E402
from bench.page_cache import AppendRate, append_rate  # noqa: E402
from bench.run import settle  # noqa: E402
from bench.saturate import Job, Load  # noqa: E402
from bench.sections import write_section  # noqa: E402
from bench.sink import serving  # noqa: E402
from gregor.broker.process import BrokerProcess, free_port  # noqa: E402
from gregor.cluster.zookeeper_server import ZooKeeperServer  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
DOCS = Path(__file__).resolve().parent.parent / "docs"
RECORD = 1024
BATCH_BYTES = 1_000_000  # librdkafka's batch.size maximum: under max.message.bytes with the headers
WRITE_HEAVY_S = 8.0
# The one broker's figure is its own, not the load's, when the same load sends a sink
# (bench.sink) at least a quarter more.
BELOW_CEILING = 0.8
LATENCY_PARTITIONS = 8  # the figure: 20,000 records/s over 8 partitions
SESSION_TIMEOUT_MS = 6000  # Kafka's default is 18000; what run-cluster.sh uses is 6000
KAFKA_DEFAULTS = {"zookeeper.session.timeout.ms": 18000, "replica.lag.time.max.ms": 30000}


@dataclass
class Result:
    name: str
    value: float
    unit: str
    target: str
    met: bool
    note: str = ""


class Servers:
    """ZooKeeper plus brokers in a scratch directory; everything stops on exit."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.zookeeper = ZooKeeperServer(work / "zookeeper").start()
        self.brokers: list[BrokerProcess] = []

    def broker(self, name: str, **overrides: str) -> BrokerProcess:
        broker = BrokerProcess(self.work / name, overrides=overrides).start()
        self.brokers.append(broker)
        return broker

    def cluster(self, size: int = 3, **overrides: str) -> list[BrokerProcess]:
        connect = f"{self.zookeeper.connect}/{uuid.uuid4().hex[:8]}"
        return [self.broker(f"c{uuid.uuid4().hex[:6]}-{i}", **{
            "broker.id": str(i), "zookeeper.connect": connect,
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "min.insync.replicas": "2", "default.replication.factor": "3",
            "offsets.topic.replication.factor": "3", **overrides}) for i in range(1, size + 1)]

    def discard(self, brokers: list[BrokerProcess]) -> None:
        """Stop brokers whose part is over and delete their logs: the page cache drops
        a deleted file's dirty pages, where it would write them back (after 30 s, or
        past the dirty threshold) on the cores and disk the next measurement uses."""
        for broker in brokers:
            broker.kill()
            shutil.rmtree(broker.data_dir, ignore_errors=True)
            self.brokers.remove(broker)

    def close(self) -> None:
        for broker in self.brokers:
            broker.kill()
        self.zookeeper.stop()


def bootstrap(brokers: list[BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers if b.proc is not None)


def create_topic(servers: str, name: str, replication: int, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.create_topics([NewTopic(name, partitions, replication)])[name].result(
                timeout=30)
            break
        except KafkaException as exc:
            # Brokers just started: the controller learns of the last one's registration
            # through a ZooKeeper watch, a moment after that broker serves.
            if (exc.args[0].code() != KafkaError.INVALID_REPLICATION_FACTOR
                    or time.monotonic() > deadline):
                raise
            time.sleep(0.1)
    # Every broker's own word: a load sent to a leader that has not learnt it leads yet
    # fails at once (NOT_LEADER_OR_FOLLOWER; seen at load 14).
    each = [AdminClient({"bootstrap.servers": server, "log_level": 0})
            for server in servers.split(",")]
    while True:
        views = [one.list_topics(name, timeout=10).topics[name].partitions for one in each]
        if all(len(found) == partitions and all(p.leader > 0 and len(p.isrs) == replication
                                                for p in found.values()) for found in views):
            return
        assert time.monotonic() < deadline, "topic never fully in sync"
        time.sleep(0.1)


@dataclass
class Window:
    """One measured window of a saturating produce load."""

    records_per_s: float
    broker_us: list[float]  # CPU per record of each broker (the leader first)
    kernel_us: list[float]  # of which in the kernel
    client_cores: float  # the load's CPU, in cores
    leader_busy: float  # share of the window the leader's event loop was runnable
    machine_cores: float  # the whole machine's busy CPU over the window, in cores
    stolen_cores: float  # CPU the hypervisor gave other guests while we were runnable


def saturated(load: Load, brokers: list[BrokerProcess], topic: str, acks: int,
              seconds: float) -> Window:
    """Records/s of ``load``'s wire-protocol producers writing 1 KiB records to
    partition 0 of ``topic`` (led by ``brokers[0]``) in 1 MiB batches, as librdkafka
    sends with ``batch.size`` 1 MB, for ``seconds`` after a second's warm-up.

    The producers send prebuilt requests, a small fraction of a core for what a
    broker spends a core on (``client_cores`` says how much), so the figure is the
    brokers', not the client's, as librdkafka's own loop (2.4 us a record) was.
    """
    pids = [b.pid for b in brokers if b.pid is not None]
    leader = pids[0]
    # Every worker on partition 0, for enough requests in flight (five each) that the
    # broker never waits for the load.
    job = Job("produce", brokers[0].bootstrap, topic, 1, RECORD, acks=acks,
              batch_bytes=BATCH_BYTES, only=(0,))
    with load.running(job):
        time.sleep(1.0)
        start, start_cpu = load.sample(leader), [cpu_seconds([p], descendants=False) for p in pids]
        start_kernel = [kernel_seconds(p) for p in pids]
        start_machine, start_stolen = machine_seconds()
        time.sleep(seconds)
        end_machine, end_stolen = machine_seconds()
        end, end_cpu = load.sample(leader), [cpu_seconds([p], descendants=False) for p in pids]
        end_kernel = [kernel_seconds(p) for p in pids]
    records, wall = end.records - start.records, end.at - start.at
    assert records > 0, "no record acknowledged"
    return Window(records / wall,
                  [(b - a) / records * 1e6 for a, b in zip(start_cpu, end_cpu, strict=True)],
                  [(b - a) / records * 1e6 for a, b in zip(start_kernel, end_kernel, strict=True)],
                  (end.client_cpu - start.client_cpu) / wall,
                  (end.broker_runnable - start.broker_runnable) / wall,
                  (end_machine - start_machine) / wall, (end_stolen - start_stolen) / wall)


def machine_use(window: Window) -> str:
    """The machine's whole CPU over a window beside what its brokers were charged: the
    rest is the load, ZooKeeper and the kernel's own threads (writeback, compaction)."""
    brokers = window.records_per_s * sum(window.broker_us) / 1e6
    return (f"machine busy {window.machine_cores:.2f} of {os.cpu_count()} cores (brokers "
            f"{brokers:.2f}), {window.stolen_cores:.2f} stolen")


def load_ceiling(load: Load, seconds: float) -> float:
    """Records/s the same producers send to ``bench.sink``, which answers every request
    at once and keeps nothing: the most this load can send here, against which the one
    broker's figure shows whether the broker or the load set it."""
    port = free_port()
    with serving(port) as sink:
        job = Job("produce", f"127.0.0.1:{port}", "t", 1, RECORD, acks=1,
                  batch_bytes=BATCH_BYTES, only=(0,))
        with load.running(job):
            time.sleep(1.0)
            start = load.sample(sink.pid)
            time.sleep(seconds)
            end = load.sample(sink.pid)
    return (end.records - start.records) / (end.at - start.at)


def write_heavy(load: Load, brokers: list[BrokerProcess], topic: str, acks: int) -> None:
    """What a run that follows another meets: the previous run's bytes (as much as
    the measured window writes) still in the page cache, dirty."""
    with load.running(Job("produce", brokers[0].bootstrap, topic, 1, RECORD, acks=acks,
                          batch_bytes=BATCH_BYTES, only=(0,))):
        time.sleep(WRITE_HEAVY_S)


def latency(servers: str, topic: str, rate: int, seconds: float,
            warmup_s: float = 1.0) -> list[float]:
    """Produce-to-acknowledgement latencies (ms) at a paced ``rate``, acks=all.

    Each millisecond the records due by then are produced, and the producer waits in
    ``poll`` for the next one: a loop spinning between records 50 µs apart would take
    one of the two cores the brokers share. A record's latency counts from when it was
    due, so a late send counts against it (no coordinated omission).

    The first ``warmup_s`` of records, which wait for the producer's connections and
    metadata, are not counted, and the measuring process's cyclic garbage collector is
    paused over the window: its collections of the window's own callbacks and samples
    took 30-65 ms here, which every record due meanwhile counted as the cluster's.
    """
    producer = Producer({"bootstrap.servers": servers, "acks": "all", "linger.ms": 1,
                         "log_level": 0})
    payload = b"x" * RECORD
    samples: list[float] = []
    failures: list[KafkaError] = []

    def delivered(due: float, error: KafkaError | None) -> None:
        if error is not None:
            failures.append(error)
        elif due >= counted_from:
            samples.append((time.perf_counter() - due) * 1000)

    count = int(rate * (warmup_s + seconds))
    gc.collect()
    with collector_paused():
        started = time.perf_counter()
        counted_from = started + warmup_s
        sent = 0
        while sent < count:
            due_now = min(count, int((time.perf_counter() - started) * rate) + 1)
            for i in range(sent, due_now):
                producer.produce(topic, payload,
                                 on_delivery=lambda error, _, due=started + i / rate:
                                 delivered(due, error))
            sent = due_now
            producer.poll(0.001)
        producer.flush(60)
    assert not failures, failures[:3]
    return samples


class AckLoad:
    """A steady idempotent acks=all load recording when each record was acknowledged."""

    def __init__(self, servers: str, topic: str, rate: int) -> None:
        self.topic = topic
        self.rate = rate
        self.acked: list[tuple[int, bytes]] = []
        self.times: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer({
            "bootstrap.servers": servers, "acks": "all", "enable.idempotence": True,
            "linger.ms": 1, "message.timeout.ms": 120000, "log_level": 0,
            # librdkafka backs retries off exponentially up to 1 s by default, which
            # would add up to a second of the client's own to the broker's gap.
            "retry.backoff.max.ms": 100, "topic.metadata.refresh.interval.ms": 500})
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error: KafkaError | None, message) -> None:
        if error is not None:
            self.errors.append(error.name())
            return
        self.acked.append((message.offset(), message.value()))
        self.times.append(time.monotonic())

    def _run(self) -> None:
        started, sent = time.monotonic(), 0
        while not self._stop.is_set():
            if sent >= (time.monotonic() - started) * self.rate:
                self._producer.poll(0.001)
                continue
            self._producer.produce(self.topic, b"%d" % sent, on_delivery=self._delivered)
            sent += 1
            self._producer.poll(0)

    def start(self) -> AckLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        assert self._producer.flush(120) == 0

    def gap_after(self, moment: float) -> float:
        """The longest time without an acknowledgement around ``moment``."""
        times = [t for t in self.times if t >= moment - 1]
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def leader_of(servers: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader


def check_read_back(servers: str, topic: str, acked: list[tuple[int, bytes]]) -> None:
    """Every acknowledged record at its offset, once."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "bench-check",
                         "enable.auto.commit": False, "log_level": 0})
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    stored: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    while len(stored) < end and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            stored[message.offset()] = message.value()
    consumer.close()
    values = list(stored.values())
    assert len(values) == len(set(values)), "a record was stored twice"
    lost = [(o, v) for o, v in acked if stored.get(o) != v]
    assert not lost, f"{len(lost)} acknowledged records not at their offset: {lost[:3]}"


def unavailability(servers: Servers, clean: bool, rate: int, warmup_s: float) -> tuple[
        float, list[str]]:
    brokers = servers.cluster()
    topic = f"fail-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap(brokers), topic, 3)
    load = AckLoad(bootstrap(brokers), topic, rate).start()
    time.sleep(warmup_s)
    leader = brokers[leader_of(bootstrap(brokers), topic) - 1]
    moment = time.monotonic()
    if clean:
        leader.stop()
    else:
        leader.kill()
    time.sleep(warmup_s + SESSION_TIMEOUT_MS / 1000)
    load.stop()
    check_read_back(bootstrap(brokers), topic, load.acked)
    servers.discard(brokers)  # not left running beside the next measurement's cluster
    return load.gap_after(moment), load.errors


def log_bytes(broker: BrokerProcess, topic: str) -> int:
    """Bytes of partition 0 of ``topic`` in ``broker``'s log (its segments)."""
    return sum(path.stat().st_size for path in (broker.data_dir / f"{topic}-0").glob("*.log"))


def follower_catch_up(load: Load, brokers: list[BrokerProcess], topic: str,
                      megabytes: int) -> AppendRate:
    """The rate at which a follower that missed ``megabytes`` of 1 KiB records (paused
    with SIGSTOP while they were written at acks=1) copies them once it runs again, from
    SIGCONT until its log holds every byte of the leader's, with its CPU a megabyte."""
    follower = brokers[-1]
    assert follower.proc is not None
    follower.proc.send_signal(signal.SIGSTOP)
    try:
        requests = megabytes * 1024 * 1024 // BATCH_BYTES // 2  # two workers write partition 0
        load.complete(Job("produce", brokers[0].bootstrap, topic, 1, RECORD,
                          requests=requests, batch_bytes=BATCH_BYTES))
        target = log_bytes(brokers[0], topic)
        missing = target - log_bytes(follower, topic)
        settle()
        cpu, kernel = cpu_seconds([follower.proc.pid], descendants=False), \
            kernel_seconds(follower.proc.pid)
    finally:
        follower.proc.send_signal(signal.SIGCONT)
    started = time.perf_counter()
    while log_bytes(follower, topic) < target:
        assert time.perf_counter() - started < 120, "the follower never caught up"
        time.sleep(0.005)
    wall = time.perf_counter() - started
    cpu = cpu_seconds([follower.proc.pid], descendants=False) - cpu
    kernel = kernel_seconds(follower.proc.pid) - kernel
    return AppendRate(missing / wall / 1e6, cpu * 1000 / (missing / 1e6),
                      kernel / cpu if cpu else 0.0)


def run(quick: bool) -> list[Result]:
    seconds = 3.0 if quick else 8.0
    work = Path(tempfile.mkdtemp(prefix="gregor-cluster-bench-"))
    servers = Servers(work)
    load = Load()
    results = []
    try:
        ceiling = load_ceiling(load, seconds)
        single = servers.broker("single")
        create_topic(single.bootstrap, "t", 1)
        saturated(load, [single], "t", 1, 1.0)  # warm-up, not recorded
        settle()
        one = saturated(load, [single], "t", 1, seconds)
        write_heavy(load, [single], "t", 1)
        one_after = saturated(load, [single], "t", 1, seconds)
        servers.discard([single])
        brokers = servers.cluster()
        create_topic(bootstrap(brokers), "t", 3)
        leader = leader_of(bootstrap(brokers), "t")
        # The leader first, then the followers.
        ordered = sorted(brokers, key=lambda b: b.broker_id != leader)
        saturated(load, ordered, "t", -1, 1.0)  # warm-up, not recorded
        settle()
        three = saturated(load, ordered, "t", -1, seconds)
        write_heavy(load, ordered, "t", -1)
        three_after = saturated(load, ordered, "t", -1, seconds)
        results.append(Result("the same load against a sink (bench.sink)", ceiling,
                              "records/s", "-", True, "the most the producers can send"))
        for name, window in (("one broker, acks=1, 1 KiB", one),
                             ("one broker, acks=1, 1 KiB, after a write-heavy run", one_after)):
            results.append(Result(
                name, window.records_per_s, "records/s",
                f"broker-bound (under {BELOW_CEILING:.0%} of the load's ceiling)",
                window.records_per_s <= BELOW_CEILING * ceiling,
                f"{window.records_per_s / ceiling:.0%} of what the load sends a sink; event "
                f"loop runnable {window.leader_busy:.0%} of the window; broker "
                f"{window.broker_us[0]:.2f} us a record ({window.kernel_us[0]:.2f} in the "
                f"kernel); producers {window.client_cores:.2f} cores; {machine_use(window)}"))
        for name, window, target in (
                ("three brokers, RF=3, acks=all, 1 KiB", three, 0.5),
                ("three brokers, RF=3, acks=all, 1 KiB, after a write-heavy run", three_after,
                 0.35)):
            ratio = window.records_per_s / one.records_per_s
            leader_us, *followers_us = (
                f"{cpu:.2f} ({kernel:.2f})"
                for cpu, kernel in zip(window.broker_us, window.kernel_us, strict=True))
            results.append(Result(
                name, window.records_per_s, "records/s", f">= {target:.0%} of one broker (quiet)",
                ratio >= target,
                f"{ratio:.0%} of one broker quiet, "
                f"{window.records_per_s / one_after.records_per_s:.0%} of one broker after a "
                f"write-heavy run; leader {leader_us} us a record (in the kernel), followers "
                f"{' and '.join(followers_us)} us; leader's event loop "
                f"runnable {window.leader_busy:.0%}; producers {window.client_cores:.2f} cores; "
                f"{machine_use(window)}"))
        create_topic(bootstrap(brokers), "c", 3)
        leader = leader_of(bootstrap(brokers), "c")
        megabytes = 256 if quick else 1024
        caught = follower_catch_up(load, sorted(brokers, key=lambda b: b.broker_id != leader),
                                   "c", megabytes)
        # The same bytes appended to a new file by a plain loop, right after: what the
        # machine's page cache lets any process write, the follower's ceiling.
        machine = append_rate(brokers[-1].data_dir, megabytes)
        results.append(Result(
            "a follower catching up, 1 KiB records", caught.megabytes_per_s, "MB/s",
            ">= 500 MB/s", caught.megabytes_per_s >= 500,
            f"follower {caught.cpu_ms_per_megabyte:.2f} ms CPU a MB "
            f"({caught.kernel_share:.0%} in the kernel); the machine appends the same "
            f"{megabytes} MiB to a new file at {machine.megabytes_per_s:.0f} MB/s "
            f"({machine.cpu_ms_per_megabyte:.2f} ms CPU a MB, "
            f"{machine.kernel_share:.0%} in the kernel)"))
        settle()  # the catch-up's gigabyte, three times, written back first
        create_topic(bootstrap(brokers), "lat", 3, LATENCY_PARTITIONS)
        samples = sorted(latency(bootstrap(brokers), "lat", 20_000, 3 if quick else 15))
        p50, p99 = samples[len(samples) // 2], samples[int(len(samples) * 0.99)]
        at = f"20,000 records/s, {LATENCY_PARTITIONS} partitions"
        results.append(Result(f"acks=all p50 at {at}", p50, "ms", "-", True))
        results.append(Result(f"acks=all p99 at {at}", p99, "ms", "< 10 ms", p99 < 10))
        servers.discard(brokers)
        warmup = 2.0 if quick else 5.0
        gap, errors = unavailability(servers, clean=False, rate=2000, warmup_s=warmup)
        budget = SESSION_TIMEOUT_MS / 1000 + 1
        results.append(Result("kill -9 of the leader: longest gap", gap, "s",
                              f"<= session timeout + 1 s ({budget:.0f} s)", gap <= budget,
                              f"Kafka's default session timeout is "
                              f"{KAFKA_DEFAULTS['zookeeper.session.timeout.ms'] / 1000:.0f} s"))
        gap, errors = unavailability(servers, clean=True, rate=2000, warmup_s=warmup)
        results.append(Result("SIGTERM of the leader: longest gap", gap, "s", "< 1 s, no error",
                              gap < 1 and not errors, f"producer errors: {errors or 'none'}"))
    finally:
        load.close()
        servers.close()
        shutil.rmtree(work, ignore_errors=True)
    return results


def report(results: list[Result]) -> str:
    lines = ["| measurement | value | target | met | note |", "|---|---|---|---|---|"]
    for r in results:
        value = f"{r.value:,.0f} {r.unit}" if r.unit == "records/s" else f"{r.value:.2f} {r.unit}"
        lines.append(f"| {r.name} | {value} | {r.target} | {'yes' if r.met else 'NO'} | "
                     f"{r.note} |")
    return "\n".join(lines)


def plot(results: list[Result], path: Path) -> None:
    rates = [r for r in results if r.unit == "records/s"]
    figure, axis = plt.subplots(figsize=(7, 3))
    axis.barh([r.name for r in rates], [r.value for r in rates], color=["#888", "#3a7"])
    axis.set_xlabel("records/s (1 KiB)")
    axis.set_title("one broker at acks=1 against three at RF=3, acks=all")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    results = run(args.quick)
    # Other work on the two cores shows here: it slows the cluster more than one broker
    # (three processes wait for the cores in every replication round).
    load = f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    OUT.mkdir(exist_ok=True)
    (OUT / "cluster_bench.json").write_text(json.dumps(
        {"load": load, "results": [asdict(r) for r in results]}, indent=1))
    table = report(results)
    print(table)
    print(load)
    if not args.quick:
        plot(results, DOCS / "img" / "bench-cluster.png")
        (DOCS / "cluster-benchmarks.md").write_text(_document(table, load))
        summarize_in(DOCS / "benchmarks.md", table, load)


def summarize_in(path: Path, table: str, load: str) -> None:
    """Put the figures in the main benchmark report too (the issue's targets are read there)."""
    write_section(path, "cluster_bench", (
        f"## Replicated cluster\n\n`python -m bench.cluster_bench`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} ({load}); setup, Kafka's "
        f"defaults and the plot: [cluster-benchmarks.md](cluster-benchmarks.md).\n\n{table}"))


def _document(table: str, load: str) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"""# gregor as a cluster: throughput, latency and failover

`python -m bench.cluster_bench`, {when} ({load}), on this 2-core machine: one ZooKeeper and
three broker processes (RF=3, `min.insync.replicas=2`,
`zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}`) and the load generator, all on
the same two cores; every acknowledged record of the failure runs was read back at its
offset. Producer: confluent-kafka (librdkafka), `linger.ms` 5 for throughput and 1 for
latency, idempotent for the failure runs with `retry.backoff.max.ms=100` (librdkafka's
default backs off up to 1 s, which would be the client's delay, not the broker's).

{table}

Kafka's documented defaults for comparison: `zookeeper.session.timeout.ms`
{KAFKA_DEFAULTS['zookeeper.session.timeout.ms']} ms (a `kill -9`'d leader is replaced
after at least that long), `replica.lag.time.max.ms`
{KAFKA_DEFAULTS['replica.lag.time.max.ms']} ms; a controlled shutdown moves
leaderships before the broker stops, so producers see no error.

How to read the notes: "us a record (in the kernel)" splits each broker's CPU into its
own work and the kernel's; "machine busy" is every CPU of the machine over the window,
beside what the brokers were charged. The follower's catch-up is compared with a plain
loop appending the same bytes to a new file right after it: on this virtual machine,
page-cache pages a process never had cost 1.3-1.9 ms of kernel CPU a megabyte (the
host backs guest memory on first touch), against 0.2-0.4 ms for pages freed moments
before, and every byte is written three times in a cluster.

![throughput](img/bench-cluster.png)
"""


if __name__ == "__main__":
    main()
