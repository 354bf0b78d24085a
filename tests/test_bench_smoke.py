"""The benchmark's quick mode against gregor: every workload runs, verifies and reports.

This checks the harness (a real broker, real clients, every record verified),
not speed: no figure is asserted, only that each was measured and that the run
left no process or data behind; and that a run whose records come back damaged
fails, however right their count.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from bench.clients.kafka import KafkaClient
from bench.cpu import Stopwatch
from bench.records import RecordSet, VerificationError, sequence_of
from gregor.broker.process import BrokerProcess

# The benchmark's own dependencies (scripts/bench.sh installs them).
pytest.importorskip("matplotlib")
psutil = pytest.importorskip("psutil")

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmark_against_gregor(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "benchmarks.md"
    work = tmp_path / "work"
    work.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--systems", "gregor", "--out", str(out),
         "--work-dir", str(work)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]

    results = json.loads(out.with_suffix(".json").read_text())
    produced = [t for t in results["throughput"] if t["workload"] == "produce"]
    consumed = [t for t in results["throughput"] if t["workload"] == "consume"]
    fetched = [t for t in results["throughput"] if t["workload"] == "fetch"]
    assert len(produced) == len(consumed) == len(fetched) == 8  # 2 sizes, 2 partitions, 2 acks
    assert all(t["records"] > 0 and t["seconds"] > 0 for t in produced + consumed + fetched)
    assert [lat["system"] for lat in results["latency"]] == ["gregor"]
    assert {(r["position"]) for r in results["lookup"]} == {"start", "tail"}
    assert len(results["lookup"]) == 4

    report = out.read_text()
    for heading in ("## Targets", "## Produce throughput", "## Consume throughput",
                    "## End-to-end latency", "## Offset lookup"):
        assert heading in report
    for plot in ("bench-produce.png", "bench-consume.png", "bench-latency.png",
                 "bench-lookup.png"):
        assert (out.parent / "img" / plot).stat().st_size > 0

    assert list(work.iterdir()) == [], "the run left data behind"
    leftovers = [p.info["pid"] for p in psutil.process_iter(["pid", "cmdline"])
                 if str(work) in " ".join(p.info["cmdline"] or [])]
    assert leftovers == [], "the run left processes behind"


def _lose_one_and_repeat_another(lane: list[bytes]) -> str:
    lost = lane.pop(10)
    lane.insert(20, lane[19])
    return f"lost 1 (#{sequence_of(lost)}), duplicated 1 (#{sequence_of(lane[20])})"


def _swap_two(lane: list[bytes]) -> str:
    lane[30], lane[31] = lane[31], lane[30]
    return f"out of order at 1 (#{sequence_of(lane[31])})"


@pytest.mark.parametrize("damage", [_lose_one_and_repeat_another, _swap_two])
def test_a_run_whose_records_come_back_damaged_fails(
        broker: BrokerProcess, topic_name: str, damage: Callable[[list[bytes]], str]) -> None:
    """Partition 1 holds as many records as were sent to it, but not the right ones in the
    right order: the benchmark's consumer must refuse the run and say what is wrong."""
    records = RecordSet(100, 1000)
    client = KafkaClient(broker.bootstrap)
    client.create(topic_name, 2)
    lanes = records.partitions(2)
    damaged = list(lanes[1])
    expected = damage(damaged)
    assert len(damaged) == len(lanes[1])
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for partition, lane in enumerate([lanes[0], damaged]):
        for value in lane:
            producer.produce(topic_name, value, partition=partition)
    assert producer.flush(30) == 0

    with pytest.raises(VerificationError, match=re.escape(f"partition 1: {expected}")):
        client.consume(topic_name, 2, records, Stopwatch(lambda: []))
