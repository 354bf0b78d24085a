"""Keyed one-shot timers on the broker's event loop.

Every deadline of the group protocol (a member's session, a rebalance's join and
sync phases, the initial rebalance delay) is one ``loop.call_later`` handle here,
keyed by what it guards. Re-arming a key replaces its handle, so a heartbeat costs
one cancel and one schedule, and no thread or task exists per member or group.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable

log = logging.getLogger(__name__)


class Timers:
    def __init__(self) -> None:
        self._handles: dict[Hashable, asyncio.TimerHandle] = {}

    def schedule(self, key: Hashable, delay_ms: float, action: Callable[[], None]) -> None:
        """Run ``action`` after ``delay_ms`` unless ``key`` is re-armed or cancelled first."""
        self.cancel(key)
        loop = asyncio.get_running_loop()
        self._handles[key] = loop.call_later(max(delay_ms, 0) / 1000, self._fire, key, action)

    def cancel(self, key: Hashable) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._handles

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()

    def _fire(self, key: Hashable, action: Callable[[], None]) -> None:
        self._handles.pop(key, None)
        try:
            action()
        except Exception:
            # A bug in one group's expiry must not stop the loop or other timers.
            log.exception("timer %s failed", key)
