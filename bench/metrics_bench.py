"""What Prometheus metrics cost the hot path: produce and consume with metrics on and off.

Run with ``python -m bench.metrics_bench`` (``--quick`` for a smoke run). Two broker
processes run side by side, one with ``metrics.listener`` set and scraped every
:data:`SCRAPE_INTERVAL_S` (more often than Prometheus' usual 10 to 15 s, so a scrape's
own cost shows), one without. Runs alternate between them in ABBA order (off, on,
on, off, ...) so that drift in the machine's load falls on both alike; each run
produces a fresh topic of 8 partitions with librdkafka at acks=1 (bench's usual
producer settings) and reads it back with a librdkafka consumer, every record
checked. The figures are medians over the runs: records/s, and the broker's CPU
per record (the load generator shares the two cores, so CPU is the steadier gauge).
The target: throughput with metrics on within 3% of off.

It prints a table, writes ``metrics_bench.json`` to ``bench/out/`` and, unless
``--quick``, ``docs/metrics-benchmarks.md`` with its plot ``docs/img/bench-metrics.png``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend

from bench.clients.kafka import KafkaClient  # noqa: E402
from bench.cpu import Stopwatch, Window, collector_paused  # noqa: E402
from bench.records import RecordSet  # noqa: E402
from gregor.broker.process import BrokerProcess  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
DOCS = Path(__file__).resolve().parent.parent / "docs"
PARTITIONS = 8
SCRAPE_INTERVAL_S = 1.0
TARGET = 0.03
# (record size, records per run, quick records per run)
WORKLOADS = ((100, 2_000_000, 50_000), (1024, 400_000, 20_000))


@dataclass
class Run:
    metrics: bool
    workload: str  # "produce 100 B", "consume 1024 B", ...
    records_per_s: float
    broker_us_per_record: float


@dataclass
class Row:
    workload: str
    off_records_per_s: float
    on_records_per_s: float
    off_us: float
    on_us: float
    runs: int

    @property
    def change(self) -> float:
        return self.on_records_per_s / self.off_records_per_s - 1

    @property
    def met(self) -> bool:
        return self.change >= -TARGET


class Scraper:
    """Scrapes a broker's metrics endpoint as Prometheus would, on a thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(SCRAPE_INTERVAL_S):
            with urllib.request.urlopen(self.url, timeout=10) as answer:
                answer.read()
            self.scrapes += 1


def _one_run(broker: BrokerProcess, size: int, count: int, metrics: bool) -> list[Run]:
    client = KafkaClient(broker.bootstrap)
    topic = f"m-{uuid.uuid4().hex[:8]}"
    client.create(topic, PARTITIONS)
    records = RecordSet(size, count)
    watch = Stopwatch(lambda: [broker.pid] if broker.pid is not None else [])
    with collector_paused():
        produced = client.produce(topic, PARTITIONS, records, "1", watch)
        consumed = client.consume(topic, PARTITIONS, records, watch)
    client.delete(topic, PARTITIONS)

    def run(kind: str, window: Window) -> Run:
        return Run(metrics, f"{kind} {size} B", count / window.seconds,
                   window.server_cores * window.seconds / count * 1e6)

    return [run("produce", produced), run("consume", consumed)]


def measure(quick: bool, pairs: int) -> tuple[list[Row], list[Run], int]:
    work = Path(tempfile.mkdtemp(prefix="gregor-metrics-bench-"))
    off = BrokerProcess(work / "off").start()
    on = BrokerProcess(work / "on", overrides={
        "metrics.listener": "http://127.0.0.1:0/metrics"}).start()
    assert on.metrics_url is not None
    runs: list[Run] = []
    try:
        with Scraper(on.metrics_url) as scraper:
            for size, count, quick_count in WORKLOADS:
                count = quick_count if quick else count
                for broker, metrics in ((off, False), (on, True)):  # warm-up, not recorded
                    _one_run(broker, size, count // 5, metrics)
                for pair in range(pairs):
                    order = [(off, False), (on, True)]
                    for broker, metrics in order if pair % 2 == 0 else order[::-1]:
                        runs += _one_run(broker, size, count, metrics)
            scrapes = scraper.scrapes
    finally:
        on.stop()
        off.stop()
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for workload in dict.fromkeys(r.workload for r in runs):
        of = [r for r in runs if r.workload == workload]

        def median(metrics: bool, field: str, of: list[Run] = of) -> float:
            return statistics.median(getattr(r, field) for r in of if r.metrics == metrics)

        rows.append(Row(workload, median(False, "records_per_s"), median(True, "records_per_s"),
                        median(False, "broker_us_per_record"),
                        median(True, "broker_us_per_record"), len(of) // 2))
    return rows, runs, scrapes


def report(rows: list[Row]) -> str:
    lines = ["| workload | off: records/s | on: records/s | change | "
             "broker CPU per record off / on | within 3% |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.workload} | {r.off_records_per_s:,.0f} | {r.on_records_per_s:,.0f} "
                     f"| {r.change:+.1%} | {r.off_us:.2f} / {r.on_us:.2f} µs | "
                     f"{'yes' if r.met else 'NO'} |")
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    figure, axis = plt.subplots(figsize=(8, 3.5))
    positions = range(len(rows))
    axis.bar([p - 0.2 for p in positions], [r.off_records_per_s / 1e3 for r in rows], 0.4,
             label="metrics off", color="#888")
    axis.bar([p + 0.2 for p in positions], [r.on_records_per_s / 1e3 for r in rows], 0.4,
             label="metrics on, scraped every second", color="#1f6feb")
    for p, r in zip(positions, rows, strict=True):
        axis.annotate(f"{r.change:+.1%}", (p + 0.2, r.on_records_per_s / 1e3),
                      ha="center", va="bottom", fontsize=8)
    axis.set_xticks(list(positions))
    axis.set_xticklabels([r.workload for r in rows])
    axis.set_ylabel("thousand records/s (median)")
    axis.set_title("librdkafka produce (acks=1) and consume, 8 partitions")
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
                        help="off/on pairs of runs per workload (default 6, quick 1)")
    args = parser.parse_args()
    pairs = args.pairs or (1 if args.quick else 6)
    started = time.monotonic()
    rows, runs, scrapes = measure(args.quick, pairs)
    minutes = (time.monotonic() - started) / 60
    OUT.mkdir(exist_ok=True)
    (OUT / "metrics_bench.json").write_text(json.dumps(
        {"rows": [{**asdict(r), "change": r.change} for r in rows],
         "runs": [asdict(r) for r in runs], "scrapes": scrapes}, indent=1))
    table = report(rows)
    print(table)
    print(f"{len(runs)} runs, {scrapes} scrapes, {minutes:.1f} minutes")
    if not args.quick:
        plot(rows, DOCS / "img" / "bench-metrics.png")
        (DOCS / "metrics-benchmarks.md").write_text(_document(table, pairs, scrapes, minutes))


def _document(table: str, pairs: int, scrapes: int, minutes: float) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"""# What metrics cost: produce and consume with metrics on and off

`python -m bench.metrics_bench`, {when}, {minutes:.0f} minutes on this 2-core machine.
Two broker processes side by side, one with `metrics.listener` set and scraped every
{SCRAPE_INTERVAL_S:.0f} s ({scrapes} scrapes; Prometheus usually scrapes every 10 to
15 s), one without; {pairs} runs of each per workload, alternating in ABBA order so
that changes in the machine's load fall on both alike, after a warm-up run each. A run
produces a fresh topic of {PARTITIONS} partitions with librdkafka (acks=1, `linger.ms`
5, bench's usual producer) and reads it back with a librdkafka consumer, every record
checked. Figures are medians; broker CPU per record is the broker process's CPU
time over the records (the load generator shares the two cores).

{table}

With metrics on, the hot path adds to plain counters: per produced partition a
topic's record count (from the batch headers) and bytes, per fetched partition the
bytes sent, per request one entry in each of two histograms and one error count.
Everything else (log offsets, ISR state, group lag) is read when Prometheus scrapes.

![throughput with metrics on and off](img/bench-metrics.png)
"""


if __name__ == "__main__":
    main()
