"""How busy the broker's event loop is: its idle share and how late it runs callbacks.

Kafka reports NetworkProcessorAvgIdlePercent, the share of time its network threads
wait for sockets. gregor's one network thread is the event loop, and it waits in its
selector's ``select``: the monitor times those waits. It also schedules a probe every
:data:`PROBE_INTERVAL_S`; how late the probe runs is the loop's lag, the delay every
ready request was waiting behind whatever held the loop.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections import deque
from time import perf_counter
from typing import Any

PROBE_INTERVAL_S = 0.5
# The idle share is averaged from this many probe intervals ago (10 s) to now.
WINDOW_PROBES = 20


class _TimedSelector:
    """The loop's selector, with the time spent in ``select`` added up.

    The other calls the loop makes (asyncio's selector_events) are the selector's own,
    bound once. It has no ``__getattr__`` for the rest: a class with one finds every
    attribute through it, ``select`` and ``idle_s`` too, and callgrind counted 1,400
    instructions added to each turn of the loop that only polls, 2,900 to each that
    waits, instead of about 600 and 1,800 without it.
    """

    __slots__ = ("wrapped", "idle_s", "_select", "get_key", "register", "modify",
                 "unregister", "close")

    def __init__(self, selector: selectors.BaseSelector) -> None:
        self.wrapped = selector
        self.idle_s = 0.0
        self._select = selector.select
        self.get_key = selector.get_key
        self.register = selector.register
        self.modify = selector.modify
        self.unregister = selector.unregister
        self.close = selector.close

    def select(self, timeout: float | None = None) -> Any:
        """Runs once per turn of the loop: kept to two clock reads and an addition, and
        to none when the loop only polls (timeout 0: it has callbacks ready, so it waits
        for nothing)."""
        if timeout == 0:
            return self._select(0)
        start = perf_counter()
        ready = self._select(timeout)
        self.idle_s += perf_counter() - start
        return ready


class LoopMonitor:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._selector: _TimedSelector | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._samples: deque[tuple[float, float]] = deque(maxlen=WINDOW_PROBES)
        self.lag_s = 0.0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        # asyncio's selector loops keep their selector in _selector; another loop
        # (uvloop) has none, and reports lag only.
        selector = getattr(loop, "_selector", None)
        if isinstance(selector, selectors.BaseSelector):
            self._selector = _TimedSelector(selector)
            loop._selector = self._selector  # type: ignore[attr-defined]
            self._samples.append((time.perf_counter(), 0.0))
        self._probe(loop.time() + PROBE_INTERVAL_S, schedule_only=True)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        timed, loop = self._selector, self._loop
        self._selector = None
        # Put the loop's own selector back, unless someone wrapped it again since.
        if timed is not None and loop is not None and getattr(loop, "_selector", None) is timed:
            loop._selector = timed.wrapped  # type: ignore[attr-defined,union-attr]

    @property
    def idle_seconds(self) -> float | None:
        return None if self._selector is None else self._selector.idle_s

    @property
    def idle_ratio(self) -> float | None:
        """Share of the last seconds the loop spent waiting for sockets (0 to 1)."""
        if self._selector is None:
            return None
        start, idle_start = self._samples[0]
        now = time.perf_counter()
        if now <= start:
            return None
        return min(1.0, (self._selector.idle_s - idle_start) / (now - start))

    def _probe(self, due: float, schedule_only: bool = False) -> None:
        loop = self._loop
        assert loop is not None
        if not schedule_only:
            self.lag_s = max(0.0, loop.time() - due)
            if self._selector is not None:
                self._samples.append((time.perf_counter(), self._selector.idle_s))
        next_due = loop.time() + PROBE_INTERVAL_S
        self._handle = loop.call_at(next_due, self._probe, next_due)
