"""Replication throttles: Kafka's ReplicationQuotaManager, one per direction.

A reassignment copies whole partitions onto new replicas; unthrottled, that traffic
competes with clients'. As in Kafka, a leader counts the bytes it sends of
throttled replicas (``leader.replication.throttled.replicas`` names them, as
``partition:broker`` pairs or ``*``) to followers outside the ISR against
``leader.replication.throttled.rate``, and sends none of them while the rate is
exceeded; a follower counts what it fetches of its own throttled replicas
(``follower.replication.throttled.replicas``) while outside the ISR against
``follower.replication.throttled.rate``, and stops asking for them meanwhile.
Replicas in the ISR are never throttled, nor is anything not listed.

The rate is measured as Kafka's is: bytes over a sliding span of samples
(``replication.quota.window.num`` = 11 windows of ``replication.quota.window.size.seconds``
= 1 s), so a burst is paid for by the quiet that follows it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

UNLIMITED = 2**63 - 1
_WINDOW_S = 1.0
_WINDOWS = 11


def throttles(replicas: list[str], index: int, broker_id: int) -> bool:
    """Whether a topic's ``*.replication.throttled.replicas`` list names this broker's
    replica of partition ``index``."""
    return "*" in replicas or f"{index}:{broker_id}" in replicas


class ReplicationQuota:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.bound = float(UNLIMITED)
        # (window start, bytes), oldest first: at most _WINDOWS of them.
        self._samples: deque[list[float]] = deque()

    @property
    def limited(self) -> bool:
        return self.bound < UNLIMITED

    def set_bound(self, bytes_per_s: int) -> None:
        """A new rate starts measuring afresh: samples from before it (an earlier move's,
        under another rate) would stretch the span and let a burst through."""
        if float(bytes_per_s) != self.bound:
            self.bound = float(bytes_per_s)
            self._samples.clear()

    def record(self, size: int) -> None:
        if not self.limited:
            return
        now = self.clock()
        if not self._samples or now - self._samples[-1][0] >= _WINDOW_S:
            self._samples.append([now, 0.0])
            while len(self._samples) > _WINDOWS:
                self._samples.popleft()
        self._samples[-1][1] += size

    def rate(self) -> float:
        """Bytes per second over the samples kept (at least one window's span)."""
        now = self.clock()
        while self._samples and now - self._samples[0][0] > _WINDOWS * _WINDOW_S:
            self._samples.popleft()
        if not self._samples:
            return 0.0
        span = max(now - self._samples[0][0], _WINDOW_S)
        return sum(size for _, size in self._samples) / span

    def exceeded(self) -> bool:
        return self.limited and self.rate() > self.bound

    def delay_s(self) -> float:
        """How long until the rate is back under the bound if nothing more is recorded."""
        if not self.exceeded():
            return 0.0
        total = sum(size for _, size in self._samples)
        return max(0.0, total / self.bound - (self.clock() - self._samples[0][0]))
