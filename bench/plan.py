"""How much of everything a run does: the full run (~15 min here) or a quick smoke run."""

from __future__ import annotations

from dataclasses import dataclass

MB = 1_000_000
GB = 1_000_000_000


@dataclass(frozen=True)
class Plan:
    quick: bool
    repetitions: int
    records: dict[int, int]  # record size -> records per produce run
    latency_seconds: float
    lookup_small: int  # bytes
    lookup_large: int
    lookup_samples: int
    disk_probe_bytes: int
    iperf_seconds: int


FULL = Plan(quick=False, repetitions=5, records={100: 1_000_000, 1024: 300_000},
            latency_seconds=6.0, lookup_small=100 * MB, lookup_large=5 * GB, lookup_samples=150,
            disk_probe_bytes=1024 * 1024 * 1024, iperf_seconds=4)

QUICK = Plan(quick=True, repetitions=1, records={100: 20_000, 1024: 5_000},
             latency_seconds=2.0, lookup_small=15 * MB, lookup_large=60 * MB, lookup_samples=20,
             disk_probe_bytes=32 * 1024 * 1024, iperf_seconds=1)
