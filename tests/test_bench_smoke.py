"""The benchmark's quick mode against gregor: every workload runs, verifies and reports.

This checks the harness (a real broker, real clients, every record verified),
not speed: no figure is asserted, only that each was measured and that the run
left no process or data behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
