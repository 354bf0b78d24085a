"""Medians over repetitions, ratios to gregor, and the issue's targets, from raw results."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from bench.results import Case, Lookup, Results, Throughput

GREGOR = "gregor"
TARGET_PEERS = ("Tansu", "Redis Streams")
LOOPBACK_SHARE = 0.5
LOOKUP_RATIO = 1.5


@dataclass(frozen=True)
class Cell:
    """Median of one system on one workload."""

    records_per_s: float
    mb_per_s: float
    client_cores: float
    server_cores: float
    repetitions: int


@dataclass(frozen=True)
class Target:
    goal: str
    measured: str
    met: bool


def cell(results: Results, system: str, workload: str, case: Case) -> Cell | None:
    """The median over repetitions, or None where the system did not run the case (a
    system without a producer acks setting runs acks=1 only): never a stand-in."""
    runs = _runs(results, system, workload, case)
    if not runs:
        return None
    return Cell(statistics.median(r.records_per_s for r in runs),
                statistics.median(r.mb_per_s for r in runs),
                statistics.median(r.client_cores for r in runs),
                statistics.median(r.server_cores for r in runs), len(runs))


def _runs(results: Results, system: str, workload: str, case: Case) -> list[Throughput]:
    return [t for t in results.throughput
            if t.system == system and t.workload == workload and t.case == case]


def cases(results: Results) -> list[Case]:
    seen: list[Case] = []
    for t in results.throughput:
        if t.case not in seen:
            seen.append(t.case)
    return sorted(seen, key=lambda c: (c.size, c.partitions, c.acks != "1"))


def unmeasured(results: Results, workload: str) -> list[str]:
    """Systems of ``workload`` that ran some of its cases but not all (no acks=all)."""
    shown = cases(results)
    return [s for s in systems(results, workload)
            if any(cell(results, s, workload, c) is None for c in shown)]


def systems(results: Results, workload: str | None = None) -> list[str]:
    """Systems of the run, or those measured on ``workload``."""
    return [s for s in results.systems if workload is None
            or any(t.system == s and t.workload == workload for t in results.throughput)]


def ratio(results: Results, workload: str, case: Case, peer: str) -> float | None:
    ours, theirs = cell(results, GREGOR, workload, case), cell(results, peer, workload, case)
    if ours is None or theirs is None:
        return None
    return ours.records_per_s / theirs.records_per_s


def lookup_ratio(results: Results) -> tuple[Lookup, Lookup] | None:
    """``(small, large)`` start-of-log lookups, if both were measured."""
    starts = sorted((r for r in results.lookup if r.position == "start"),
                    key=lambda r: r.log_bytes)
    return (starts[0], starts[-1]) if len(starts) >= 2 else None


def targets(results: Results) -> list[Target]:
    found = []
    for peer in TARGET_PEERS:
        if peer not in results.systems or GREGOR not in results.systems:
            continue
        for workload in ("produce", "consume"):
            ratios = {c: ratio(results, workload, c, peer) for c in cases(results)}
            known = {c: r for c, r in ratios.items() if r is not None}
            if not known:
                continue
            worst = min(known, key=lambda c: known[c])
            behind = sum(1 for r in known.values() if r < 1)
            found.append(Target(
                f"{workload} throughput ≥ {peer} on every workload",
                f"gregor/{peer} from {known[worst]:.2f}× ({worst.label}) to "
                f"{max(known.values()):.2f}×; behind on {behind} of {len(known)} measured",
                behind == 0))
    limits = results.limits
    if limits is not None and limits.loopback_mb_s is not None:
        kib = [c for c in cases(results) if c.size == 1024]
        best = {workload: max((x.mb_per_s for c in kib
                               if (x := cell(results, GREGOR, workload, c)) is not None),
                              default=None)
                for workload in ("fetch", "consume")}
        if best["fetch"] is not None:
            share = best["fetch"] / limits.loopback_mb_s
            client_side = (f"; librdkafka consumer: {best['consume']:,.0f} MB/s"
                           if best["consume"] is not None else "")
            found.append(Target(
                f"consume of 1 KiB records ≥ {LOOPBACK_SHARE:.0%} of loopback TCP bandwidth, "
                "through zero-copy fetch",
                f"bare Fetch: best {best['fetch']:,.0f} MB/s = {share:.1%} of "
                f"{limits.loopback_mb_s:,.0f} MB/s{client_side}",
                share >= LOOPBACK_SHARE))
    pair = lookup_ratio(results)
    if pair is not None:
        small, large = pair
        factor = large.p50_ms / small.p50_ms
        found.append(Target(
            f"fetch from the start of the large log within {LOOKUP_RATIO}× of the small log",
            f"p50 {large.p50_ms:.2f} ms at {large.log_bytes / 1e9:g} GB against "
            f"{small.p50_ms:.2f} ms at {small.log_bytes / 1e6:g} MB: {factor:.2f}×",
            factor <= LOOKUP_RATIO))
    return found
