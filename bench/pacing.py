"""Fixed-rate sending for latency runs: how many records are due at each tick."""

from __future__ import annotations

import time
from collections.abc import Iterator

_TICK_S = 0.001


def paced(rate: float, count: int) -> Iterator[int]:
    """Yield batch sizes so that ``count`` records go out at ``rate`` per second.

    Records due are sent together each millisecond; if the sender falls behind,
    the backlog goes out at once (as a real producer would) rather than being
    silently dropped, so the latency figures include any queueing it causes.
    """
    start = time.perf_counter()
    sent = 0
    while sent < count:
        due = min(count, int((time.perf_counter() - start) * rate) + 1)
        if due > sent:
            yield due - sent
            sent = due
        else:
            time.sleep(_TICK_S)
