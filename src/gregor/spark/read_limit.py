"""Split a micro-batch's row budget (``maxOffsetsPerTrigger``) across partitions."""

from __future__ import annotations

from gregor.spark.offsets import Offsets


def cap_offsets(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """End offsets that read at most ``max_rows`` offsets in total from ``start``.

    The budget is shared max-min fairly: each partition gets an equal share, and what a
    partition with little backlog leaves unused goes to the others.  Unlike a split
    proportional to backlog, a quiet partition is never starved behind a busy one, the
    total never exceeds the budget, and as long as the budget is at least 1 some
    partition with data always advances.  ``start`` must name every partition of
    ``latest``.
    """
    available = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    order = sorted(available, key=lambda tp: (available[tp], tp))
    budget = max_rows
    end: Offsets = {}
    for index, tp in enumerate(order):
        take = min(available[tp], budget // (len(order) - index))
        end[tp] = start[tp] + take
        budget -= take
    return end
