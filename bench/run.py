"""One benchmark run: limits, then the systems' workloads in interleaved rounds.

Every server is started first; then each workload is run by one system after the
other, repetition by repetition, so that all systems meet the same machine. Only
one is ever under load: the others sit idle (their idle CPU is measured and
reported), so the measured one shares both cores with its load generator alone.
Latency and the offset lookup follow, one system at a time. A failure of one
workload (including a failed verification) is recorded and the run goes on; the
exit status reports it. Every server is stopped and its data deleted at the end.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench import machine
from bench.clients import StreamClient
from bench.clients.kafka import KafkaClient
from bench.cpu import cpu_seconds
from bench.limits import measure_limits
from bench.peers import Peer
from bench.peers.gregor import GregorPeer
from bench.plan import GB, Plan
from bench.processes import Supervisor
from bench.records import RecordSet
from bench.results import Case, Results
from bench.workloads.consume import consume, consume_bare
from bench.workloads.e2e_latency import RATE_CAP, measure_latency
from bench.workloads.fetch_lookup import measure_lookup, space_for
from bench.workloads.produce import CASES, cases_for, produce

SYSTEMS = ("gregor", "tansu", "redis", "nats")
LATENCY_CASE = Case(100, 1, "1")
# nats-py handles each message in Python, about ten times slower than the other
# clients: a quarter of the records still makes runs of several seconds.
RECORD_SHARE = {"NATS JetStream": 0.25}
# Disk left free besides the lookup logs: the throughput runs' data and the system's own needs.
_DISK_RESERVE = 2 * GB
_IDLE_PROBE_S = 3.0


def settle() -> None:
    """Write back everything the page cache holds dirty before a timed phase starts.

    Three of the four systems write to disk (gregor its segments, Redis its
    append-only file, NATS its file store) and the kernel writes those pages back
    in the background, on the same two cores: without this, a run could pay for
    the writeback of the one before it.
    """
    os.sync()


def make_peer(key: str, workdir: Path, supervisor: Supervisor) -> Peer:
    """The peer named ``key``; each peer's client library is imported only when it runs."""
    if key == "gregor":
        return GregorPeer(workdir)
    if key == "tansu":
        from bench.peers.tansu import TansuPeer

        return TansuPeer(workdir, supervisor)
    if key == "redis":
        from bench.peers.redis_streams import RedisStreamsPeer

        return RedisStreamsPeer(workdir, supervisor)
    if key == "nats":
        from bench.peers.nats_jetstream import NatsJetStreamPeer

        return NatsJetStreamPeer(workdir, supervisor)
    raise ValueError(f"unknown system {key!r}; choose from {', '.join(SYSTEMS)}")


class Run:
    def __init__(self, plan: Plan, systems: list[str], workdir: Path) -> None:
        self.plan = plan
        self.systems = systems
        self.workdir = workdir
        self.started = time.monotonic()
        self.results = Results(quick=plan.quick,
                               started=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                               records_per_run=dict(plan.records))
        self.failures: list[str] = []
        # Other work on the machine skews every figure: the report says how busy it was.
        self.load_at_start = os.getloadavg()[0]

    def say(self, message: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {message}", file=sys.stderr, flush=True)

    def note(self, message: str) -> None:
        self.say(message)
        self.results.notes.append(message)

    def attempt(self, what: str, action: Callable[[], None]) -> bool:
        """Run one step; record a failure instead of abandoning the other systems."""
        try:
            action()
            return True
        except Exception as exc:  # noqa: BLE001 - any failure voids only this step
            self.failures.append(f"{what}: {exc}")
            self.note(f"FAILED {what}: {exc}")
            traceback.print_exc(file=sys.stderr)
            return False

    def execute(self) -> Results:
        supervisor = Supervisor()
        peers = [make_peer(key, self.workdir, supervisor) for key in self.systems]
        try:
            self.results.machine = machine.describe(self.workdir)
            self.say("measuring disk and loopback limits")
            self.results.limits = measure_limits(self.workdir, supervisor,
                                                 self.plan.disk_probe_bytes,
                                                 self.plan.iperf_seconds)
            self.say(f"limits: {self.results.limits}")
            running = [peer for peer in peers
                       if self.attempt(f"starting {peer.name}", lambda p=peer: self.start(p))]
            self.note_idle_cpu(running)
            clients = {peer.name: peer.client() for peer in running}
            for peer in running:
                self.attempt(f"warming up {peer.name}",
                             lambda p=peer: self.warm_up(p, clients[p.name]))
            self.throughput_rounds(running, clients)
            for peer in running:
                self.single_system(peer, clients[peer.name])
        finally:
            for peer in peers:
                peer.cleanup()
            supervisor.close()
        self.results.seconds = time.monotonic() - self.started
        self.results.machine["load average (1 min) at start / end"] = (
            f"{self.load_at_start:.2f} / {os.getloadavg()[0]:.2f}")
        return self.results

    def start(self, peer: Peer) -> None:
        self.say(f"starting {peer.name}")
        peer.start()
        self.results.systems[peer.name] = {
            "version": peer.version(), "storage": peer.storage,
            "load_generator": peer.load_generator,
            "python_client": "yes" if peer.python_client else ""}

    def note_idle_cpu(self, peers: list[Peer]) -> None:
        """All servers stay up during the throughput rounds, each idle while another is
        measured: say what the idle ones cost the measured one."""
        before = {peer.name: cpu_seconds(peer.server_pids()) for peer in peers}
        time.sleep(_IDLE_PROBE_S)
        used = {peer.name: cpu_seconds(peer.server_pids()) - before[peer.name] for peer in peers}
        idle = ", ".join(f"{name} {cpu / _IDLE_PROBE_S:.3f}" for name, cpu in used.items())
        self.note(f"idle servers, cores used over {_IDLE_PROBE_S:.0f} s: {idle}")

    def throughput_rounds(self, peers: list[Peer], clients: dict[str, StreamClient]) -> None:
        """Every system runs each workload before any runs the next repetition, in an
        order that rotates: a neighbour's burst of work or a drift of the machine
        then falls on all systems alike instead of on whichever ran at that minute."""
        for case in CASES:
            for repetition in range(self.plan.repetitions):
                shift = repetition % max(len(peers), 1)
                for peer in peers[shift:] + peers[:shift]:
                    client = clients[peer.name]
                    if case in cases_for(client):
                        self.attempt(f"{peer.name} {case.label} #{repetition + 1}",
                                     lambda p=peer, c=client, k=case, r=repetition:
                                     self.throughput(p, c, k, r))

    def single_system(self, peer: Peer, client: StreamClient) -> None:
        """Latency, and gregor's offset lookup: one system at a time, the others idle."""
        rate = self.max_rate(peer.name)
        if rate:
            self.attempt(f"{peer.name} latency",
                         lambda: self.latency(peer, client, min(rate / 2, RATE_CAP)))
        if isinstance(peer, GregorPeer):
            self.attempt("gregor offset lookup", lambda: self.lookup(peer))

    def warm_up(self, peer: Peer, client: StreamClient) -> None:
        """One small unrecorded round trip, so that what a system does once (gregor
        creates ``__consumer_offsets`` when librdkafka's consumer first looks for its
        group coordinator) is not charged to the first measured run."""
        case = CASES[0]
        topic = f"warm-up-{uuid.uuid4().hex[:8]}"
        records = RecordSet(case.size, 10_000)
        client.create(topic, case.partitions)
        try:
            produce(peer, client, topic, case, records, 0)
            consume(peer, client, topic, case, records, 0)
        finally:
            client.delete(topic, case.partitions)

    def throughput(self, peer: Peer, client: StreamClient, case: Case, repetition: int) -> None:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        count = int(self.plan.records[case.size] * RECORD_SHARE.get(peer.name, 1.0))
        records = RecordSet(case.size, count, seed=repetition)
        client.create(topic, case.partitions)
        try:
            settle()
            runs = [produce(peer, client, topic, case, records, repetition)]
            settle()
            runs.append(consume(peer, client, topic, case, records, repetition))
            if isinstance(client, KafkaClient):
                runs.append(consume_bare(peer, client, topic, case, records, repetition))
        finally:
            client.delete(topic, case.partitions)
        self.results.throughput += runs
        self.say(f"{peer.name:15} {case.label:32} " + " | ".join(
            f"{r.workload} {r.records_per_s:>9,.0f}/s {r.mb_per_s:6.1f} MB/s "
            f"(c{r.client_cores:.2f} s{r.server_cores:.2f})" for r in runs))

    def max_rate(self, system: str) -> float:
        rates = [t.records_per_s for t in self.results.throughput
                 if t.system == system and t.workload == "produce" and t.case == LATENCY_CASE]
        return statistics.median(rates) if rates else 0.0

    def latency(self, peer: Peer, client: StreamClient, rate: float) -> None:
        result = measure_latency(peer, client, rate, self.plan.latency_seconds)
        self.results.latency.append(result)
        self.say(f"{peer.name:15} latency at {rate:,.0f} rec/s: p50 {result.p50_ms:.2f} ms, "
                 f"p99 {result.p99_ms:.2f} ms, p99.9 {result.p999_ms:.2f} ms")

    def lookup(self, peer: GregorPeer) -> None:
        small = self.plan.lookup_small
        large = space_for(self.workdir, self.plan.lookup_large, small + _DISK_RESERVE)
        if large < self.plan.lookup_large:
            self.note(f"only {large / GB:.1f} GB of disk to spare: the large lookup log is "
                      f"{large / GB:.1f} GB instead of {self.plan.lookup_large / GB:.0f} GB")
        if large <= small:
            raise RuntimeError("not enough disk space for the offset lookup logs")
        results = measure_lookup(peer, {"lookup-small": small, "lookup-large": large},
                                 self.plan.lookup_samples, self.note)
        self.results.lookup = results
        for r in results:
            self.say(f"lookup {r.log_bytes / 1e6:,.0f} MB {r.position}: p50 {r.p50_ms:.2f} ms "
                     f"p99 {r.p99_ms:.2f} ms")
