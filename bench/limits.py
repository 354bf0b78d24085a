"""The machine's limits: sequential disk bandwidth of the data directory, and loopback TCP.

Disk figures use O_DIRECT, which bypasses the page cache in both directions: no
cache to drop (which needs root and disturbs everyone else on the machine), and
a read cannot be served from memory by accident. Writes end with an fsync. The
page-cache read figure (the same file read through the cache, once cached) is
what a consumer of recent data actually hits, so it is reported beside them.
Loopback bandwidth is one iperf3 TCP stream, like one consumer connection.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from bench.processes import Supervisor
from bench.results import Limits
from gregor.broker.process import free_port

_BLOCK = 1024 * 1024
_REPETITIONS = 3


def _write_direct(path: Path, size: int, block: mmap.mmap) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
    try:
        started = time.perf_counter()
        for _ in range(size // _BLOCK):
            os.write(fd, block)
        os.fsync(fd)
        return size / (time.perf_counter() - started) / 1e6
    finally:
        os.close(fd)


def _read(path: Path, size: int, block: mmap.mmap, direct: bool) -> float:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    try:
        started = time.perf_counter()
        done = 0
        while done < size:
            n = os.readv(fd, [block])
            if n == 0:
                break
            done += n
        return done / (time.perf_counter() - started) / 1e6
    finally:
        os.close(fd)


def disk_bandwidth(workdir: Path, size: int) -> tuple[float, float, float]:
    """Median MB/s of O_DIRECT write, O_DIRECT read and page-cache read of ``size`` bytes."""
    path = workdir / "disk-probe"
    block = mmap.mmap(-1, _BLOCK)  # page-aligned, as O_DIRECT requires
    block.write(os.urandom(_BLOCK))
    writes, reads, cached = [], [], []
    try:
        for _ in range(_REPETITIONS):
            writes.append(_write_direct(path, size, block))
            reads.append(_read(path, size, block, direct=True))
            _read(path, size, block, direct=False)  # brings it into the cache
            cached.append(_read(path, size, block, direct=False))
    finally:
        path.unlink(missing_ok=True)
        block.close()
    return statistics.median(writes), statistics.median(reads), statistics.median(cached)


def loopback_bandwidth(workdir: Path, supervisor: Supervisor, seconds: int) -> float:
    """MB/s received over one loopback TCP stream, measured by iperf3.

    Readiness is read from the server's log, not probed with a connection: iperf3
    takes any connection for a test's control channel and resets after it.
    """
    port = free_port()
    log = workdir / "iperf3-server.log"
    server = supervisor.spawn(["iperf3", "--server", "--forceflush", "--bind", "127.0.0.1",
                               "--port", str(port)],
                              log)
    try:
        deadline = time.monotonic() + 10
        while b"Server listening" not in log.read_bytes():
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"iperf3 server did not start; see {log}")
            time.sleep(0.05)
        for _ in range(_REPETITIONS):
            out = subprocess.run(["iperf3", "--client", "127.0.0.1", "--port", str(port),
                                  "--time", str(seconds), "--json"],
                                 capture_output=True, text=True, timeout=seconds + 30)
            report = json.loads(out.stdout or "{}")
            if "sum_received" in report.get("end", {}):
                return report["end"]["sum_received"]["bits_per_second"] / 8 / 1e6
            time.sleep(0.5)
        raise RuntimeError(f"iperf3 failed: {report.get('error', out.stderr)}")
    finally:
        supervisor.stop(server)


def measure_limits(workdir: Path, supervisor: Supervisor, disk_bytes: int,
                   iperf_seconds: int) -> Limits:
    """Disk figures, and loopback if iperf3 is installed (scripts/bench.sh installs it)."""
    write, read, cached = disk_bandwidth(workdir, disk_bytes)
    loopback = (loopback_bandwidth(workdir, supervisor, iperf_seconds)
                if shutil.which("iperf3") else None)
    return Limits(write, read, cached, loopback)
