"""What a benchmark run measured, as plain data (saved as JSON beside the report)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Case:
    """One throughput workload: record size, partition count and producer acks."""

    size: int
    partitions: int
    acks: str

    @property
    def label(self) -> str:
        size = f"{self.size // 1024} KiB" if self.size >= 1024 else f"{self.size} B"
        parts = "1 partition" if self.partitions == 1 else f"{self.partitions} partitions"
        return f"{size}, {parts}, acks={self.acks}"


@dataclass(frozen=True)
class Throughput:
    system: str
    workload: str  # "produce" or "consume"
    case: Case
    repetition: int
    records: int
    bytes: int
    seconds: float
    client_cores: float
    server_cores: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6


@dataclass(frozen=True)
class Latency:
    system: str
    rate: float  # records/s offered
    achieved_rate: float  # records/s the sender managed
    size: int
    records: int  # measured, after the warm-up
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    client_cores: float
    server_cores: float


@dataclass(frozen=True)
class Lookup:
    """Fetch round trips at one position of one log (gregor's offset lookup)."""

    log_bytes: int
    position: str  # "start" or "tail"
    samples: int
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class Limits:
    disk_write_mb_s: float
    disk_read_mb_s: float
    page_cache_read_mb_s: float
    loopback_mb_s: float | None  # None when iperf3 is not installed


@dataclass
class Results:
    quick: bool
    started: str
    machine: dict[str, str] = field(default_factory=dict)
    # name -> version, storage, load_generator, python_client ("yes" or "")
    systems: dict[str, dict[str, str]] = field(default_factory=dict)
    limits: Limits | None = None
    throughput: list[Throughput] = field(default_factory=list)
    latency: list[Latency] = field(default_factory=list)
    lookup: list[Lookup] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    records_per_run: dict[int, int] = field(default_factory=dict)  # record size -> records
    seconds: float = 0.0

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Results:
        """Read back what :meth:`save` wrote, to render a report again without a run."""
        raw = json.loads(path.read_text())
        limits = raw.pop("limits")
        throughput = raw.pop("throughput")
        latency = raw.pop("latency")
        lookup = raw.pop("lookup")
        records = raw.pop("records_per_run")
        return cls(**raw, limits=Limits(**limits) if limits else None,
                   throughput=[Throughput(**{**t, "case": Case(**t["case"])})
                               for t in throughput],
                   latency=[Latency(**x) for x in latency], lookup=[Lookup(**x) for x in lookup],
                   records_per_run={int(size): count for size, count in records.items()})


def percentile(sorted_values: list[Any], fraction: float) -> Any:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        raise ValueError("no samples")
    rank = max(0, min(len(sorted_values) - 1, round(fraction * len(sorted_values)) - 1))
    return sorted_values[rank]
