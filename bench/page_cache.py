"""What this machine charges a process for appending to a new file.

Every byte a broker takes goes through write(2) into page-cache pages its file never
had: the leader's once, each follower's once more. On the virtual machines this
project runs on, giving a process memory it has not touched recently costs far more
than copying into it (1.3-1.9 ms of kernel CPU a megabyte, against 0.2-0.4 ms for pages
freed moments before: the host backs guest memory on first touch, and the guest hands
free memory back to it). So a follower copying a backlog, or one broker taking 1 KiB
records, can be bound by the machine's append rate rather than by the broker's own
work. The benchmarks measure that rate in the same run as the figure it bounds, and
split each broker's CPU into user and kernel time, so a report can tell the two apart.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20


@dataclass(frozen=True)
class AppendRate:
    megabytes_per_s: float
    cpu_ms_per_megabyte: float
    kernel_share: float  # of that CPU, the share spent in the kernel


def append_rate(directory: Path, megabytes: int,
                progress: list[tuple[float, int]] | None = None) -> AppendRate:
    """Append ``megabytes`` of 1 MiB writes to a new file in ``directory``, as a log
    segment grows, and remove it (unsynced: its pages are dropped, not written back).
    ``progress`` gets ``(seconds, bytes written)`` after every 64 MiB: past the page
    cache's dirty threshold, a writer goes at the rate the disk writes back."""
    chunk = os.urandom(CHUNK)
    path = directory / f"append-rate-{os.getpid()}.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        before = resource.getrusage(resource.RUSAGE_THREAD)
        started = time.perf_counter()
        for i in range(1, megabytes + 1):
            os.write(fd, chunk)
            if progress is not None and i % 64 == 0:
                progress.append((time.perf_counter() - started, i * CHUNK))
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_THREAD)
    finally:
        os.close(fd)
        path.unlink()
    user, kernel = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    written = megabytes * CHUNK / 1e6
    return AppendRate(written / wall, (user + kernel) * 1000 / written,
                      kernel / (user + kernel) if user + kernel else 0.0)
