"""How busy the broker's event loop is: its idle share and how late it runs callbacks.

Kafka reports NetworkProcessorAvgIdlePercent, the share of time its network threads
wait for sockets. gregor's one network thread is the event loop's, and what it does not
spend running or waiting for a core it spends asleep, in its selector (or, seldom,
blocked on the disk, which this counts as idle too). The kernel keeps the first two
for every thread (``/proc/self/task/TID/schedstat``), so the monitor reads them at each
probe and scrape instead of timing each ``select``: a wrapped selector added two clock
reads and a Python call to every turn of the loop, about 4,300 instructions a produce
request (callgrind, 2026-11-28, 400 requests). A thread waiting for a core is counted
busy, as the wait is the loop's load, not its idleness.

It also schedules a probe every :data:`PROBE_INTERVAL_S`; how late the probe runs is
the loop's lag, the delay every ready request was waiting behind whatever held the loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from pathlib import Path
from time import perf_counter

PROBE_INTERVAL_S = 0.5
# The idle share is averaged from this many probe intervals ago (10 s) to now.
WINDOW_PROBES = 20


class LoopMonitor:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        # The loop thread's schedstat, when the kernel keeps one.
        self._schedstat: Path | None = None
        self._started: tuple[float, float] = (0.0, 0.0)  # wall and busy seconds at start
        self._samples: deque[tuple[float, float]] = deque(maxlen=WINDOW_PROBES)
        self.lag_s = 0.0

    def start(self) -> None:
        """Start on the event loop's own thread (the one whose time is read)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._schedstat = Path(f"/proc/self/task/{threading.get_native_id()}/schedstat")
        sample = self._sample()
        if sample is None:
            self._schedstat = None  # not Linux, or no scheduler statistics: lag only
        else:
            self._started = sample
            self._samples.append(sample)
        self._probe(loop.time() + PROBE_INTERVAL_S, schedule_only=True)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _sample(self) -> tuple[float, float] | None:
        """Now, and the seconds the loop's thread has run or waited for a core."""
        if self._schedstat is None:
            return None
        try:
            on_cpu, waiting, _ = self._schedstat.read_text().split()
        except (OSError, ValueError):
            return None
        return perf_counter(), (int(on_cpu) + int(waiting)) / 1e9

    def idle(self) -> tuple[float | None, float | None]:
        """The share of the last seconds the loop spent waiting for sockets (0 to 1), and
        the seconds it has waited since the monitor started (or timers, or seldom the
        disk): both from one reading, so that a scrape's two figures agree."""
        sample = self._sample()
        if sample is None:
            return None, None
        wall, busy = sample
        wall_0, busy_0 = self._started
        seconds = max(0.0, (wall - wall_0) - (busy - busy_0))
        window_wall, window_busy = self._samples[0]
        if wall <= window_wall:
            return None, seconds
        return min(1.0, max(0.0, 1 - (busy - window_busy) / (wall - window_wall))), seconds

    def _probe(self, due: float, schedule_only: bool = False) -> None:
        loop = self._loop
        assert loop is not None
        if not schedule_only:
            self.lag_s = max(0.0, loop.time() - due)
            sample = self._sample()
            if sample is not None:
                self._samples.append(sample)
        next_due = loop.time() + PROBE_INTERVAL_S
        self._handle = loop.call_at(next_due, self._probe, next_due)
