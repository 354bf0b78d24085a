"""Wall time and CPU of the load generator and of the server over one measured window.

On two shared cores a figure means little without knowing who burnt the CPU:
a system can look slow because the Python load generator saturates a core. So
every window reports both sides, as cores used (CPU seconds per wall second).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import psutil


def family_pids(pids: Iterable[int]) -> set[int]:
    """The processes and all their descendants."""
    found = set()
    for pid in pids:
        try:
            found |= {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}
        except psutil.NoSuchProcess:
            continue
    return found


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _process_cpu(proc: psutil.Process) -> float:
    """User + system CPU of a process and all its threads, exited ones included.

    Read from the process's CPU-time clock (to the nanosecond) where the C library
    has one: /proc's figures, which psutil reads, count clock ticks of 10 ms, a few
    percent of a second-long run's broker CPU.
    """
    clock = ctypes.c_int()
    if _libc.clock_getcpuclockid(proc.pid, ctypes.byref(clock)) == 0:
        try:
            return time.clock_gettime(clock.value)
        except OSError:  # the process ended since
            raise psutil.NoSuchProcess(proc.pid) from None
    times = proc.cpu_times()
    return times.user + times.system


def cpu_seconds(pids: Iterable[int], descendants: bool = True,
                exclude: set[int] | frozenset[int] = frozenset()) -> float:
    """User + system CPU of each process (all its threads) and, unless told otherwise,
    of all of its descendants but those in ``exclude``."""
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            family = [root, *root.children(recursive=True)] if descendants else [root]
        except psutil.NoSuchProcess:
            continue
        for proc in family:
            if proc.pid in exclude:
                continue
            try:
                used = _process_cpu(proc)
                if proc is root or descendants:
                    # Children already reaped (e.g. a forked helper that finished, or a
                    # Python worker Spark's JVM ended) would otherwise vanish from the
                    # total between two samples.
                    times = proc.cpu_times()
                    used += times.children_user + times.children_system
            except psutil.NoSuchProcess:
                continue
            total += used
    return total


def kernel_seconds(pid: int) -> float:
    """System (kernel) CPU of one process and its threads, from /proc (10 ms ticks):
    with ``cpu_seconds`` it splits a server's CPU into its own work and the kernel's
    (copies, page cache), which on a virtual machine can cost more than the server."""
    try:
        return psutil.Process(pid).cpu_times().system
    except psutil.NoSuchProcess:
        return 0.0


def machine_seconds() -> tuple[float, float]:
    """CPU seconds the whole machine has been busy (every process and the kernel's own
    threads: writeback, memory compaction) and stolen by the hypervisor, since boot.
    The difference of two readings over a window, beside the servers' own CPU, shows
    what the machine spent that no server process is charged for."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq) / tick, steal / tick


@dataclass(frozen=True)
class Window:
    seconds: float
    client_cores: float
    server_cores: float


class Stopwatch:
    """Started right before the first send, stopped right after the last acknowledgement."""

    def __init__(self, server_pids: Callable[[], list[int]],
                 client_pids: Callable[[], list[int]] = lambda: [os.getpid()],
                 client_descendants: bool = False) -> None:
        """``client_descendants``: the client works in child processes too (Spark's JVM
        and Python workers). The servers are children of the harness process as well,
        so their families are always left out of the client's CPU."""
        self._server_pids = server_pids
        self._client_pids = client_pids
        self._client_descendants = client_descendants
        self._start: tuple[float, float, float] | None = None

    def _sample(self) -> tuple[float, float, float]:
        servers = self._server_pids()
        client = cpu_seconds(self._client_pids(), descendants=self._client_descendants,
                             exclude=family_pids(servers) if self._client_descendants
                             else frozenset())
        return time.perf_counter(), client, cpu_seconds(servers)

    def start(self) -> None:
        self._start = self._sample()

    def stop(self) -> Window:
        if self._start is None:
            raise RuntimeError("stopwatch stopped before it was started")
        end = self._sample()
        wall = max(end[0] - self._start[0], 1e-9)
        window = Window(wall, (end[1] - self._start[1]) / wall, (end[2] - self._start[2]) / wall)
        self._start = None
        return window


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run a load generator's loop without Python's cyclic garbage collector.

    A consumer keeps every value (and every reply's lists or message objects)
    until the run is verified, and the collector walks what is kept again and
    again as the run goes on: the Redis consumer of 100 B records, 640 per
    read, read 2.4M records/s with it paused and 1.1M with it running, and
    librdkafka's 1.2-1.4M against 0.9M (bench/findings.md). Whatever the loop
    leaves is collected once it ends, outside the clock.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
