"""What Prometheus metrics cost the hot path: produce and consume with metrics on and off.

Run with ``python -m bench.metrics_bench`` (``--quick`` for a smoke run). Two broker
processes run side by side, one with ``metrics.listener`` set and scraped by a process
of its own every :data:`SCRAPE_INTERVAL_S`, the interval ``monitoring/prometheus.yml``
ships (``--scrape-interval`` for another), one without. A run lasts a whole number of
intervals, so that every run holds its share of scrapes: with runs shorter than the
interval, most would hold none, and the median over runs would leave the scrapes out.
Both are pinned to one core and the load (``bench.saturate``: client processes on the
other core, writing prebuilt Produce and Fetch requests) keeps the broker under test
busy, so that records/s is the broker's capacity rather than the client's pace.

The verdict comes from :data:`SIDE_BY_SIDE` runs per workload that load both brokers
at once, each with clients of its own, on the core they share: the scheduler gives
each half of it, so records/s on over off is their capacity ratio over the same
seconds, which drift in the machine's load cannot touch. The two sets of clients swap
brokers from one run to the next, so that neither broker always has the same ones.
Both brokers are started afresh every :data:`RUNS_PER_START` side-by-side runs, one
start in two with the metrics broker first (restarted, loaded and sampled), so that no
order favours either: a
process brings its own hash seed and memory layout, which moved one broker's pace
against the other's by a point or two for a whole bench run while runs of one start
agreed, so that an interval over runs of one start was narrower than the spread from
one bench run to the next. The unit is therefore a start: records/s on over off, minus
one, averaged over the start's runs; the verdict is the median over starts with a
distribution-free confidence interval (order statistics of the changes): within 3%
when the interval's lower end is above -3%, over when its upper end is below,
otherwise undecided. The broker's CPU per record is shown beside it, paired the same
way. Then, as a cross-check, :data:`PAIRS` pairs of runs one broker at a time, in ABBA
order (off, on, on, off, ...).

It prints a table, writes ``metrics_bench.json`` to ``bench/out/`` and, unless
``--quick``, ``docs/metrics-benchmarks.md`` with its plot ``docs/img/bench-metrics.png``.

``--control`` runs the same with neither broker having metrics (an A/A run; it only
prints): what it measures is the bench's own bias and spread. On 2026-11-27 (6 pairs,
8 side-by-side runs, the clients not yet swapping brokers) side by side gave produce
-0.6% [-1.3%, +2.0%] at 100 B and -0.0% [-2.1%, +1.9%] at 1 KiB, while one broker at a
time gave +7.5% [+1.3%, +18.7%] and -2.4% [-10.2%, +8.9%]: the one-at-a-time runs are
moved by drift more than by metrics, hence the verdict from the side-by-side ones. A
scratch A/A run of 14 side-by-side 1 KiB produce runs with the same clients always on
the same broker once gave +1.5%, and +0.1% with them swapping.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import re
import shutil
import statistics
import tempfile
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend

from bench.clients.kafka import KafkaClient  # noqa: E402
from bench.cpu import cpu_seconds  # noqa: E402
from bench.saturate import (  # noqa: E402
    BATCH_BYTES,
    BROKER_CPU,
    CLIENT_CPU,
    GROUPS,
    IN_FLIGHT,
    WORKERS,
    Job,
    Load,
    filled,
    pin,
)
from gregor.broker.process import BrokerProcess  # noqa: E402
from gregor.metrics.broker_metrics import FOLD_EVERY  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
DOCS = Path(__file__).resolve().parent.parent / "docs"
PARTITIONS = 8
PROMETHEUS_CONFIG = Path(__file__).resolve().parent.parent / "monitoring" / "prometheus.yml"
TARGET = 0.03
SCRAPE_COST_SAMPLES = 50
CONFIDENCE = 0.95
PAIRS = 4
SIDE_BY_SIDE = 32
# Side-by-side runs per start of the two brokers: one with each set of clients on each.
RUNS_PER_START = 2
# Below this share of its core in a run, the broker was not alone on it.
BOUND_CORES = 0.9
# Below this share of a run's window runnable, the broker's event loop waited for clients.
BUSY = 0.95
WARMUP_S = 1.0
MIN_RUN_S = 2.0
SIZES = (100, 1024)
# What each consumed topic holds (the runs read it again and again), in produce requests
# per load worker: 16 MiB a partition.
FILL_REQUESTS = 16 * 1024 * 1024 // BATCH_BYTES // GROUPS


@dataclass
class Run:
    metrics: bool
    workload: str  # "produce 100 B", "consume 1024 B", ...
    side_by_side: bool  # run at the same time as the other broker's, on the same core
    records_per_s: float
    broker_us_per_record: float  # scrapes in the window included
    broker_cores: float
    broker_busy: float  # share of the window its event loop ran or waited for its core
    client_cores: float
    seconds: float
    start: int  # which start of the broker processes served it


@dataclass(frozen=True)
class Change:
    """The median of paired changes (on against off) and its confidence interval."""

    median: float
    low: float
    high: float
    coverage: float  # of the interval: at least CONFIDENCE when there are enough pairs

    @classmethod
    def paired(cls, changes: list[float]) -> Change:
        """The interval between the k-th smallest and k-th largest change holds the true
        median with probability 1 - 2 P(Binomial(n, 1/2) < k) whatever the changes'
        distribution (the sign test's interval); k is the largest that keeps that at
        CONFIDENCE, or 1 (the whole range) when there are too few pairs."""
        ordered = sorted(changes)
        n = len(ordered)
        below = [math.comb(n, i) / 2 ** n for i in range(n + 1)]
        k = 1
        while k < n // 2 and 1 - 2 * sum(below[:k + 1]) >= CONFIDENCE:
            k += 1
        return cls(statistics.median(ordered), ordered[k - 1], ordered[n - k],
                   1 - 2 * sum(below[:k]))

    def __str__(self) -> str:
        return f"{self.median:+.1%} [{self.low:+.1%}, {self.high:+.1%}]"


@dataclass
class Row:
    workload: str
    side_by_side: bool
    off_records_per_s: float
    on_records_per_s: float
    off_us: float
    on_us: float
    off_broker_cores: float
    on_broker_cores: float
    broker_busy: float  # the least of its runs
    client_cores: float
    changes: int  # what the interval is taken over: starts side by side, else pairs
    # on against off, per pair: records/s, and the broker's CPU per record
    throughput: Change
    cpu_per_record: Change

    @property
    def verdict(self) -> str:
        """Taken from the side-by-side runs only: one broker at a time is a cross-check."""
        if not self.side_by_side:
            return "(cross-check)"
        if self.throughput.low >= -TARGET:
            return "yes"
        return "NO" if self.throughput.high < -TARGET else "undecided"


def shipped_scrape_interval() -> float:
    """The ``scrape_interval`` of the Prometheus configuration the repository ships."""
    found = re.search(r"^\s*scrape_interval:\s*(\d+)s\s*$", PROMETHEUS_CONFIG.read_text(),
                      re.MULTILINE)
    if found is None:
        raise ValueError(f"no scrape_interval in seconds in {PROMETHEUS_CONFIG}")
    return float(found.group(1))


SCRAPE_INTERVAL_S = shipped_scrape_interval()


def run_seconds(interval: float) -> float:
    """A run: the fewest whole scrape intervals that last at least :data:`MIN_RUN_S`."""
    return interval * math.ceil(MIN_RUN_S / interval)


class Scraper:
    """Scrapes a broker's metrics endpoint as Prometheus would, from a process of its own
    on the clients' core."""

    def __init__(self, url: str, interval: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._count = context.Value("i", 0)
        self._process = context.Process(target=_scrape_every_interval,
                                        args=(url, interval, self._stop, self._count),
                                        daemon=True)

    @property
    def scrapes(self) -> int:
        return int(self._count.value)

    def __enter__(self) -> Scraper:
        self._process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._process.join()


def _scrape_every_interval(url: str, interval: float, stop: Event,
                           count: Synchronized[int]) -> None:
    os.sched_setaffinity(0, {CLIENT_CPU})
    while not stop.wait(interval):
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                answer.read()
        except OSError:
            continue  # the broker restarting between runs, as Prometheus would see it
        count.value += 1


def _measured(jobs: list[tuple[Load, BrokerProcess, Job, bool]], seconds: float,
              side_by_side: bool, started: int) -> list[Run]:
    """Each (load, broker, job, metrics) at once, over the same window."""
    with contextlib.ExitStack() as running:
        for load, _, job, _ in jobs:
            running.enter_context(load.running(job))
        time.sleep(WARMUP_S)
        starts = [load.sample(_pid(broker)) for load, broker, _, _ in jobs]
        time.sleep(seconds)
        ends = [load.sample(_pid(broker)) for load, broker, _, _ in jobs]
    runs = []
    for (_, _, job, metrics), start, end in zip(jobs, starts, ends, strict=True):
        wall = end.at - start.at
        records = end.records - start.records
        broker_cpu = end.broker_cpu - start.broker_cpu
        kind = "produce" if job.kind == "produce" else "consume"
        runs.append(Run(metrics, f"{kind} {job.size} B", side_by_side, records / wall,
                        broker_cpu / records * 1e6, broker_cpu / wall,
                        (end.broker_runnable - start.broker_runnable) / wall,
                        (end.client_cpu - start.client_cpu) / wall, wall, started))
    return runs


def _pid(broker: BrokerProcess) -> int:
    assert broker.pid is not None
    return broker.pid


@contextlib.contextmanager
def _job(broker: BrokerProcess, size: int, fetch: Job | None) -> Iterator[Job]:
    """``fetch`` (the job that consumes this broker's topic), or, when None, a produce
    job into a fresh topic, deleted after the run."""
    if fetch is not None:
        yield fetch
        return
    client = KafkaClient(broker.bootstrap)
    topic = f"m-{uuid.uuid4().hex[:8]}"
    client.create(topic, PARTITIONS)
    try:
        yield Job("produce", broker.bootstrap, topic, PARTITIONS, size)
    finally:
        client.delete(topic, PARTITIONS)


def _run(loads: list[Load], brokers: list[tuple[BrokerProcess, bool]], size: int,
         fetches: dict[bool, Job] | None, seconds: float, started: int) -> list[Run]:
    """One run on each broker, at once when there are two (each with its own load);
    ``fetches`` by metrics on or off, None to produce; ``started``: the brokers' start."""
    with contextlib.ExitStack() as jobs:
        measured = [(load, broker, jobs.enter_context(
            _job(broker, size, None if fetches is None else fetches[metrics])), metrics)
            for load, (broker, metrics) in zip(loads, brokers, strict=False)]
        return _measured(measured, seconds, len(brokers) > 1, started)


def _filled(load: Load, broker: BrokerProcess, size: int, requests: int) -> Job:
    """A topic to consume from, filled alike on both brokers (the same batches), and the
    fetch job that reads it."""
    client = KafkaClient(broker.bootstrap)
    topic = f"c-{size}-{uuid.uuid4().hex[:8]}"
    client.create(topic, PARTITIONS)
    load.complete(Job("produce", broker.bootstrap, topic, PARTITIONS, size, requests=requests))
    return Job("fetch", broker.bootstrap, topic, PARTITIONS, size, end=filled(size, requests))


@dataclass
class ScrapeCost:
    """What one scrape costs the broker, scraped back to back after the runs, idle."""

    broker_ms: float
    lines: int


def scrape_cost(broker: BrokerProcess) -> ScrapeCost:
    assert broker.metrics_url is not None and broker.pid is not None
    before = cpu_seconds([broker.pid])
    for _ in range(SCRAPE_COST_SAMPLES):
        with urllib.request.urlopen(broker.metrics_url, timeout=10) as answer:
            text = answer.read()
    used = cpu_seconds([broker.pid]) - before
    return ScrapeCost(used / SCRAPE_COST_SAMPLES * 1e3, text.count(b"\n"))


def measure(quick: bool, pairs: int, side_by_side: int, interval: float, control: bool = False
            ) -> tuple[list[Row], list[Run], int, ScrapeCost | None]:
    """``pairs`` of runs one broker at a time, then ``side_by_side`` runs of both at once
    (the verdict's), per workload, the "on" broker scraped every ``interval``.
    ``control``: the "on" broker without metrics too (an A/A run), so that the changes
    measured are the bench's own bias and spread."""
    os.sched_setaffinity(0, {CLIENT_CPU})  # the harness, and the processes it spawns
    seconds = 1.0 if quick else run_seconds(interval)
    fill = FILL_REQUESTS // 8 if quick else FILL_REQUESTS
    work = Path(tempfile.mkdtemp(prefix="gregor-metrics-bench-"))
    off = BrokerProcess(work / "off").start()
    on = BrokerProcess(work / "on", overrides={} if control else {
        "metrics.listener": "http://127.0.0.1:0/metrics"}).start()
    if on.metrics_url is not None:
        on.overrides["metrics.listener"] = on.metrics_url  # the scraper's, at every start
    both = [(off, False), (on, True)]
    for broker, _ in both:
        pin(_pid(broker), BROKER_CPU)
    starts = 0
    load, second_load = Load(), Load()
    runs: list[Run] = []
    try:
        scraper = None if on.metrics_url is None else Scraper(on.metrics_url, interval)
        with scraper or contextlib.nullcontext():
            for size in SIZES:
                fetches = {False: _filled(load, off, size, fill),
                           True: _filled(load, on, size, fill)}
                for consumed in (None, fetches):
                    for broker in both:  # warm-up, not recorded
                        _run([load], [broker], size, consumed, 1.0, starts)
                    for pair in range(pairs):
                        for broker in both if pair % 2 == 0 else both[::-1]:
                            runs += _run([load], [broker], size, consumed, seconds, starts)
                    for turn in range(side_by_side):
                        if turn % RUNS_PER_START == 0:
                            starts += 1
                            # Every other start the "on" broker goes first: restarted,
                            # its clients started and its window sampled.
                            order = both if starts % 2 else both[::-1]
                            for broker, _ in order:
                                pin(_pid(broker.restart()), BROKER_CPU)
                        loads = [load, second_load] if turn % 2 == 0 else [second_load, load]
                        runs += _run(loads, order, size, consumed, seconds, starts)
        scrapes = 0 if scraper is None else scraper.scrapes
        cost = None if control else scrape_cost(on)
    finally:
        load.close()
        second_load.close()
        on.stop()
        off.stop()
        shutil.rmtree(work, ignore_errors=True)
    rows = [_row(workload, together, [r for r in runs
                                      if (r.workload, r.side_by_side) == (workload, together)])
            for workload, together in dict.fromkeys((r.workload, r.side_by_side) for r in runs)]
    return rows, runs, scrapes, cost


def _row(workload: str, side_by_side: bool, runs: list[Run]) -> Row:
    """Runs in the order taken: each off run and the on run next to it are a pair. Side
    by side, the pairs of one start of the brokers make one change, their mean; one
    broker at a time, each pair is one."""
    off = [r for r in runs if not r.metrics]
    on = [r for r in runs if r.metrics]
    pairs = list(zip(off, on, strict=True))
    units: dict[int, list[tuple[Run, Run]]] = defaultdict(list)
    for number, (a, b) in enumerate(pairs):
        units[a.start if side_by_side else number].append((a, b))

    def change(measure: Callable[[Run], float]) -> Change:
        return Change.paired([statistics.fmean(measure(b) / measure(a) - 1 for a, b in unit)
                              for unit in units.values()])

    return Row(
        workload,
        side_by_side,
        statistics.median(r.records_per_s for r in off),
        statistics.median(r.records_per_s for r in on),
        statistics.median(r.broker_us_per_record for r in off),
        statistics.median(r.broker_us_per_record for r in on),
        statistics.median(r.broker_cores for r in off),
        statistics.median(r.broker_cores for r in on),
        min(r.broker_busy for r in runs),
        statistics.median(r.client_cores for r in runs),
        len(units),
        change(lambda r: r.records_per_s),
        change(lambda r: r.broker_us_per_record))


def report(rows: list[Row]) -> str:
    """The verdict's table (both brokers at once), then the one-at-a-time one if any."""
    tables = []
    for together in (True, False):
        chosen = [r for r in rows if r.side_by_side == together]
        if not chosen:
            continue
        coverage = min(r.throughput.coverage for r in chosen)
        lines = ["| workload | records/s off / on (median) | records/s change, paired "
                 f"[{coverage:.0%} CI] | within 3% | broker cores off / on; busy | broker CPU per "
                 f"record off / on | CPU per record change, paired [{coverage:.0%} CI] | "
                 "client cores |",
                 "|---|---|---|---|---|---|---|---|"]
        for r in chosen:
            lines.append(f"| {r.workload} | {r.off_records_per_s:,.0f} / "
                         f"{r.on_records_per_s:,.0f} | {r.throughput} | {r.verdict} "
                         f"| {r.off_broker_cores:.2f} / {r.on_broker_cores:.2f}; "
                         f"{r.broker_busy:.2f} "
                         f"| {r.off_us:.3f} / {r.on_us:.3f} µs | {r.cpu_per_record} "
                         f"| {r.client_cores:.2f} |")
        tables.append(("" if together else "One broker at a time (cross-check):\n\n")
                      + "\n".join(lines))
    return "\n\n".join(tables)


def plot(rows: list[Row], path: Path, interval: float) -> None:
    figure, axis = plt.subplots(figsize=(8, 3.5))
    positions = range(len(rows))
    axis.bar([p - 0.2 for p in positions], [r.off_records_per_s / 1e3 for r in rows], 0.4,
             label="metrics off", color="#888")
    axis.bar([p + 0.2 for p in positions], [r.on_records_per_s / 1e3 for r in rows], 0.4,
             label=f"metrics on, scraped every {interval:g} s", color="#1f6feb")
    for p, r in zip(positions, rows, strict=True):
        axis.annotate(f"{r.throughput.median:+.1%}", (p + 0.2, r.on_records_per_s / 1e3),
                      ha="center", va="bottom", fontsize=8)
    axis.set_xticks(list(positions))
    axis.set_xticklabels([r.workload for r in rows])
    axis.set_ylabel("thousand records/s (median)")
    axis.set_title("broker on one core: produce (acks=1) and consume, 8 partitions")
    top = max(max(r.off_records_per_s, r.on_records_per_s) for r in rows) / 1e3
    axis.set_ylim(0, top * 1.3)  # room for the legend above the bars
    axis.legend(fontsize=8, loc="upper center", ncols=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small runs, for a smoke test")
    parser.add_argument("--pairs", type=int, default=None,
                        help=f"off/on pairs of runs per workload (default {PAIRS}, quick 1)")
    parser.add_argument("--side-by-side", type=int, default=None,
                        help="runs of both brokers at once per workload "
                             f"(default {SIDE_BY_SIDE}, quick 1)")
    parser.add_argument("--scrape-interval", type=float, default=SCRAPE_INTERVAL_S,
                        help="seconds between scrapes of the metrics broker (default "
                             f"{SCRAPE_INTERVAL_S:g}, monitoring/prometheus.yml's); at any "
                             "other, the run writes no document")
    parser.add_argument("--control", action="store_true",
                        help="an A/A run: neither broker has metrics, so the changes "
                             "printed are the bench's own bias and spread (writes no "
                             "document)")
    args = parser.parse_args()
    pairs = args.pairs or (1 if args.quick else PAIRS)
    side_by_side = args.side_by_side if args.side_by_side is not None else (
        1 if args.quick else SIDE_BY_SIDE)
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    interval = args.scrape_interval
    rows, runs, scrapes, cost = measure(args.quick, pairs, side_by_side, interval, args.control)
    load = (load_before, os.getloadavg()[0])
    minutes = (time.monotonic() - started) / 60
    table = report(rows)
    print(table)
    print(f"{len(runs)} runs, {scrapes} scrapes, {minutes:.1f} minutes, "
          f"load average {load[0]:.2f} before, {load[1]:.2f} after", end="")
    if cost is None:
        print("; an A/A run: neither broker had metrics")
        return
    print(f"; a scrape of {cost.lines} lines: {cost.broker_ms:.2f} ms of broker CPU")
    OUT.mkdir(exist_ok=True)
    (OUT / "metrics_bench.json").write_text(json.dumps(
        {"rows": [{**asdict(r), "verdict": r.verdict} for r in rows],
         "runs": [asdict(r) for r in runs], "scrapes": scrapes, "load_average": load,
         "scrape_cost": asdict(cost)},
        indent=1))
    if not args.quick and interval == SCRAPE_INTERVAL_S:
        plot([r for r in rows if r.side_by_side], DOCS / "img" / "bench-metrics.png", interval)
        (DOCS / "metrics-benchmarks.md").write_text(
            _document(table, rows, pairs, side_by_side, scrapes, minutes, load, cost))

def _document(table: str, rows: list[Row], pairs: int, side_by_side: int, scrapes: int,
              minutes: float, load: tuple[float, float], cost: ScrapeCost) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    coverage = min(r.throughput.coverage for r in rows if r.side_by_side)
    sequential = [r for r in rows if not r.side_by_side]
    idle = [f"{r.workload}{'' if r.side_by_side else ' one at a time'} ({r.broker_busy:.2f})"
            for r in rows if r.broker_busy < BUSY]
    shared = [f"{r.workload} ({r.off_broker_cores:.2f} off, {r.on_broker_cores:.2f} on)"
              for r in sequential if min(r.off_broker_cores, r.on_broker_cores) < BOUND_CORES]
    if idle:
        bound = (f"**Not broker-bound in this run:** the broker's event loop was runnable less "
                 f"than {BUSY} of some run's window in {', '.join(idle)}: it waited, for its "
                 "clients or its disk, and records/s there is not its CPU's capacity.")
    elif shared:
        bound = (f"In this run the broker's event loop was runnable (on its core or waiting "
                 f"for it) at least {BUSY} of every run's window, so the broker was the "
                 f"bottleneck, but it got less than {BOUND_CORES} of its core in "
                 f"{', '.join(shared)}: the machine's other work took the rest, alike for "
                 "both brokers as far as ABBA order evens it out (side by side, each "
                 "broker has about half of it, by design).")
    else:
        bound = (f"In this run the broker's event loop was runnable at least {BUSY} of every "
                 f"run's window and had at least {BOUND_CORES} of its core: records/s is "
                 "its capacity.")
    return f"""# What metrics cost: produce and consume with metrics on and off

`python -m bench.metrics_bench`, {when}, {minutes:.0f} minutes on this 2-core machine
(load average {load[0]:.2f} before, {load[1]:.2f} after). Two broker processes side by
side, one with `metrics.listener` set and scraped every {SCRAPE_INTERVAL_S:g} s by a
process of its own ({scrapes} scrapes), the interval `monitoring/prometheus.yml` ships,
one without. The verdict's table: {side_by_side} runs per workload loading both brokers at
once, on the core they share, both brokers started afresh every {RUNS_PER_START} runs. The
cross-check's: {pairs} pairs of runs per workload, one
broker at a time, in ABBA order, after a warm-up run each. A run measures
{run_seconds(SCRAPE_INTERVAL_S):g} s of steady load after {WARMUP_S:g} s of the same: a whole
number of scrape intervals, so that each run holds its share of scrapes (the verdict is a median,
which would leave out scrapes that fell in a few of the runs).

{table}

{bound}

**The broker is the bottleneck.** Both brokers, with all their threads, are pinned to
core {BROKER_CPU}; the load comes from {WORKERS} client processes pinned to core
{CLIENT_CPU} (`bench.saturate`), and the scraper runs there too. With librdkafka as the
client, records/s was the client's pace: it spends several times the broker's CPU per
record, so the broker used a fraction of a core and a run's records/s moved by several
percent whatever the broker did. These clients write requests built once, so the broker
does all the per-request work and they do little.

The clients are {GROUPS} applications of {WORKERS // GROUPS} clients each, every
application spreading the {PARTITIONS} partitions over its clients (two producers
writing each partition, two consumer groups reading it), so that enough requests are in
flight for the broker never to wait for a client:

- produce: Produce v9 at acks=1, {IN_FLIGHT} requests in flight per client, each with
  one batch of {BATCH_BYTES // 1024} KiB per partition of the client's (more requests
  per record, so more of the per-request accounting metrics add, than with librdkafka's
  batches of up to 1 MB), every answer checked for errors. Each run writes a fresh
  topic, deleted after it: no segment fills up (1 GiB) within a run, so nothing is
  fsynced, and the gigabyte or two a run writes is dropped from the page cache before
  the kernel writes it back. (With 32 MiB segments, the fsyncs of rolled segments had
  the broker's event loop wait for the disk an eighth of the time.)
- consume: Fetch v4 of the client's partitions at librdkafka's default sizes (1 MiB a
  partition), one fetch in flight per client as a consumer has, from a topic of 16 MiB
  a partition, filled with the same batches on both brokers and read again from offset
  0 once read to its end; every whole batch's records counted from its header.

"broker cores" is the broker's CPU time over the window's wall time: close to 1 when
nothing else runs on its core, less when the machine's other work takes part of it;
"busy" the least share of a window, over all runs of the workload, that its event loop
was runnable (on its core or waiting in the run queue, from `/proc/PID/schedstat`): 1
when it never waited for a client or the disk.
Records/s is what the verdict uses, as the issue words its target, from the runs of
**both brokers at once** (the first table): each loaded by {WORKERS} client processes of
its own, the two sets of clients swapping brokers from one run to the next. The
scheduler gives each broker half of the core, so records/s on over off is their
capacity ratio over the same seconds, whatever else the machine does meanwhile. Per
start of the two brokers, on over off, minus one, averaged over its {RUNS_PER_START} runs
(one with each set of clients on each broker); the median over the starts and a
{coverage:.0%} confidence interval that assumes nothing about the changes' distribution
(the sign test's: between the k-th smallest and k-th largest change). Within 3%: the
interval's lower end is above -3%; NO: its upper end is below -3%; undecided: the
interval straddles -3%, and more runs (`--side-by-side`) are needed. The broker's CPU
per record (its CPU-time clock, to the nanosecond, over the same window; scrapes
included) is paired the same way beside it.
Why starts rather than runs: a process brings its own hash seed and memory layout,
and with one start of each broker for the whole bench, an interval over its runs was
narrower than the way the median moved from one run of the bench to the next: on
2026-11-28, at a scrape every 10 s, two such runs (16 and then 32 windows a workload,
the same code) gave produce 100 B -2.7% [-4.1%, -1.4%] and -1.0% [-2.8%, +0.0%], produce
1 KiB -0.5% [-1.5%, +0.4%] and -2.3% [-3.2%, -1.9%].

**One broker at a time** (the second table, a cross-check): pairs of runs in ABBA order
(off, on, on, off, ...). Drift in the machine's load between a run and the next moves
these by several percent: an A/A run (`--control`, neither broker with metrics) gave
+7.5% [+1.3%, +18.7%] this way where side by side gave -0.6% [-1.3%, +2.0%]
(2026-11-27).

With metrics on, the hot path adds to plain counters, in place: per fetch its
partitions' answers (one addition each for a fetch of one topic answered without
errors, as the handler already has its bytes), per produce request one addition for
its answer's errors when none failed, per partition appended to its records (from the
batch headers) and bytes. Each request answered keeps its times in a list, and every
{FOLD_EVERY} of them are added to the two histograms in one loop: counted one by one,
each came to the counters with the caches cold, and cost the broker several times what
it costs in a loop (`gregor.metrics.broker_metrics` gives the figures). The
idle ratio is the loop thread's time neither on a core nor waiting for one, read from
the kernel at each probe, so nothing is added to the loop's turns. Everything else
(log offsets, ISR state, group lag) is read when Prometheus scrapes, on the broker's
event loop; a scrape writes its text itself, each series' escaped name and labels kept
from the scrape before (`gregor.metrics.exposition`). Scraped {SCRAPE_COST_SAMPLES} times back
to back after the runs, a scrape of this broker's {cost.lines} lines cost it
{cost.broker_ms:.2f} ms of CPU: at one scrape a second, {cost.broker_ms / 10:.2f}% of
its core; at every {SCRAPE_INTERVAL_S:g} s,
{cost.broker_ms / 10 / SCRAPE_INTERVAL_S:.3f}%. When other work leaves the broker a fifth
of its core, the same scrapes weigh five times as much on what it does; and amid the
load a scrape costs the broker more than this idle figure, by the runs that follow.
Scraped every second (`--scrape-interval 1`, 2026-11-28 03:38-03:47 UTC, 32 runs side
by side of 2 s, the hot path of 2a3c456), the changes were: produce 100 B -3.6% [-4.6%, -3.0%],
1 KiB -3.1% [-4.0%, -2.8%]; consume 100 B -0.3% [-2.5%, +1.2%], 1 KiB -2.4% [-6.4%,
+1.3%]. Side by side with no scrape at all, in scratch runs of 12 pairs (100 B produce,
the same day), the metrics broker did 0.976 of the other's records/s, against 0.946 and
0.960 scraped every second and 0.991 for an A/A pair: at one scrape a second, the
scrapes were about half of what metrics cost.

![throughput with metrics on and off](img/bench-metrics.png)
"""


if __name__ == "__main__":
    main()
