"""Replication throttles: how fast a reassignment copies a partition onto a new broker,
unthrottled and at several ``*.replication.throttled.rate`` settings.

Run with ``python -m bench.throttle_bench`` (``--mb 24``, ``--rates 2,4,8`` in MB/s).
One ZooKeeper and two broker processes on this machine; a topic of four partitions on
broker 1 alone, filled with ``--mb`` MB of incompressible 10 KB records; then, for
each rate, the throttles set as ``kafka-reassign-partitions.sh --throttle`` sets them
(both brokers' ``leader.`` and ``follower.replication.throttled.rate``, the topic's
``*.replication.throttled.replicas`` = ``*``), the partitions moved to [1, 2] with
``gregor cluster reassign --execute``, and broker 2's copy measured on disk every
0.1 s until whole; then moved back to [1] (broker 2 deletes its copy) for the next.

The rate is the slope of bytes copied over time from 20% to 100% of the copy (the
first second's burst, which the quota's 11 s window pays back over the move, left
out), and the whole move's average beside it. It prints a table and writes
``bench/out/throttle_bench.json`` and the plot ``docs/img/bench-throttle.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from bench.cluster_bench import Servers, bootstrap  # noqa: E402
from gregor.broker.process import BrokerProcess  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
DOCS = Path(__file__).resolve().parent.parent / "docs"
TOPIC = "moved"
PARTITIONS = 4
RECORD = 10_000
POLL_S = 0.1
UNLIMITED = str(2**63 - 1)


def fill(servers: str, megabytes: int, topic: str = TOPIC, partitions: int = PARTITIONS
         ) -> None:
    """``megabytes`` of incompressible 10 KB records, round-robin over the partitions."""
    producer = Producer({"bootstrap.servers": servers, "acks": "1", "linger.ms": 20,
                         "log_level": 0})
    payload = os.urandom(RECORD)
    for i in range(megabytes * 1_000_000 // RECORD):
        while True:
            try:
                producer.produce(topic, payload, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(60)


def set_throttle(servers: str, rate: str, replicas: str, brokers: tuple[str, ...] = ("1", "2"),
                 topic: str = TOPIC) -> None:
    """Set the throttles as ``kafka-reassign-partitions.sh --throttle`` does: both rates
    on every broker named, the replica lists on the topic."""
    admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
    # One broker per call: librdkafka sends each to the broker it names.
    calls = [[ConfigResource("broker", broker_id, incremental_configs=[
        ConfigEntry(name, rate, incremental_operation=AlterConfigOpType.SET)
        for name in ("leader.replication.throttled.rate",
                     "follower.replication.throttled.rate")])] for broker_id in brokers]
    calls.append([ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry(name, replicas, incremental_operation=AlterConfigOpType.SET)
        for name in ("leader.replication.throttled.replicas",
                     "follower.replication.throttled.replicas")])])
    for resources in calls:
        for future in admin.incremental_alter_configs(resources).values():
            future.result(30)


def reassign(servers: str, work: Path, replicas: list[int],
             moves: dict[tuple[str, int], list[int]] | None = None) -> None:
    """``gregor cluster reassign --execute``: every partition of ``TOPIC`` to
    ``replicas``, or the (topic, partition) -> replicas of ``moves``."""
    if moves is None:
        moves = {(TOPIC, p): replicas for p in range(PARTITIONS)}
    plan = work / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in moves.items()]}))
    subprocess.run([sys.executable, "-m", "gregor.cli.main", "cluster", "reassign",
                    "--execute", "--reassignment-json-file", str(plan),
                    "--bootstrap-server", servers], check=True, capture_output=True)


def on_disk(broker: BrokerProcess) -> int:
    total = 0
    for p in range(PARTITIONS):
        directory = broker.data_dir / f"{TOPIC}-{p}"
        if directory.exists():
            total += sum(f.stat().st_size for f in directory.glob("*.log"))
    return total


def move(servers: str, work: Path, brokers: list[BrokerProcess], rate_mb: float | None
         ) -> dict:
    set_throttle(servers, UNLIMITED if rate_mb is None else str(int(rate_mb * 1_000_000)),
                 "" if rate_mb is None else "*")
    full = on_disk(brokers[0])
    started = time.monotonic()
    reassign(servers, work, [1, 2])
    samples = [(0.0, 0)]
    while True:
        copied = on_disk(brokers[1])
        samples.append((time.monotonic() - started, copied))
        if copied >= full:
            break
        if samples[-1][0] > 600:
            raise RuntimeError("the copy did not finish in 10 minutes")
        time.sleep(POLL_S)
    elapsed = samples[-1][0]
    start = next(s for s in samples if s[1] >= 0.2 * full)
    slope = (samples[-1][1] - start[1]) / max(samples[-1][0] - start[0], 1e-9)
    reassign(servers, work, [1])
    while on_disk(brokers[1]) > 0:
        time.sleep(POLL_S)
    set_throttle(servers, UNLIMITED, "")
    return {"rate_mb": rate_mb, "bytes": full, "seconds": elapsed,
            "average_mb_s": full / elapsed / 1e6, "slope_mb_s": slope / 1e6,
            "samples": samples}


def report(results: list[dict]) -> str:
    lines = ["| throttle | copied | time | rate 20-100% | average | off by |",
             "|---|---|---|---|---|---|"]
    for r in results:
        setting = "none" if r["rate_mb"] is None else f"{r['rate_mb']:g} MB/s"
        off = "" if r["rate_mb"] is None else f"{(r['slope_mb_s'] / r['rate_mb'] - 1):+.1%}"
        lines.append(f"| {setting} | {r['bytes'] / 1e6:.1f} MB | {r['seconds']:.1f} s | "
                     f"{r['slope_mb_s']:.2f} MB/s | {r['average_mb_s']:.2f} MB/s | {off} |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    figure, axis = plt.subplots(figsize=(7, 3.6))
    for r in results:
        label = "unthrottled" if r["rate_mb"] is None else f"throttle {r['rate_mb']:g} MB/s"
        axis.plot([t for t, _ in r["samples"]], [b / 1e6 for _, b in r["samples"]], label=label)
    axis.set_xlabel("seconds since the reassignment started")
    axis.set_ylabel("MB on the new replica")
    axis.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=24)
    parser.add_argument("--rates", default="2,4,8", help="throttle rates in MB/s")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gregor-throttle-bench-"))
    servers = Servers(work)
    results = []
    try:
        brokers = servers.cluster(2)
        address = bootstrap(brokers)
        admin = AdminClient({"bootstrap.servers": address, "log_level": 0})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, replica_assignment=[[1]] * PARTITIONS)])[
            TOPIC].result(30)
        time.sleep(1)
        fill(address, args.mb)
        for rate in [None, *(float(r) for r in args.rates.split(","))]:
            results.append(move(address, work, brokers, rate))
            print(report(results[-1:]), flush=True)
    finally:
        servers.close()
        shutil.rmtree(work, ignore_errors=True)
    print(report(results))
    OUT.mkdir(exist_ok=True)
    (OUT / "throttle_bench.json").write_text(json.dumps(results, indent=1))
    plot(results, DOCS / "img" / "bench-throttle.png")


if __name__ == "__main__":
    main()
