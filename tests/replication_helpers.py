"""Helpers for the replication tests: replicas over real logs, an injected clock, and one
follower fetch done the way the fetch handler and the replica fetcher do it.

Each replica is a ``Partition`` over a real ``Log`` in its own directory; the time
is a ``FakeClock`` the test moves, so lag windows are exact.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from storage_helpers import topic_config

from gregor.cluster.partition import NEVER, Partition
from gregor.cluster.partition_state import PartitionState
from gregor.cluster.replica_fetcher import truncate_on_divergence
from gregor.storage.log import Log

LAG_S = 10.0


class FakeClock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def state(leader: int, epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2, 3),
          partition_epoch: int = 0) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=epoch, isr=isr, replicas=replicas,
                          partition_epoch=partition_epoch)


def open_replica(tmp_path: Path, broker_id: int, current: PartitionState, clock: FakeClock,
                 high_watermark: int = 0, isr_eligible: Callable[[int], bool] = lambda b: True,
                 session_fetch_s: Callable[[int], float] = lambda b: NEVER,
                 **config: object) -> Partition:
    """Broker ``broker_id``'s replica of t-0 (its log reopened if it exists); ``isr_eligible``
    says which brokers are registered and not shutting down, ``session_fetch_s`` when each
    last fetched in a fetch session holding the partition."""
    log = Log(tmp_path / f"b{broker_id}" / "t-0", "t", 0, topic_config(**config))
    return Partition("t", 0, log, broker_id, current, high_watermark, clock=clock,
                     replica_lag_time_max_s=LAG_S, isr_eligible=isr_eligible,
                     session_fetch_s=session_fetch_s)


def fetch(leader: Partition, follower: Partition, max_bytes: int = 1 << 20) -> bool:
    """One Fetch from ``follower`` to ``leader`` and its answer applied; False if the
    leader answered a diverging epoch (the follower truncated instead of appending)."""
    offset = follower.log_end_offset
    last_epoch = follower.log.leader_epoch_cache.latest_epoch
    if last_epoch >= 0:
        diverging = leader.diverging_epoch(last_epoch, offset)
        if diverging is not None:
            truncate_on_divergence(follower, *diverging)
            return False
    leader_end = leader.log_end_offset
    region = leader.log.read(offset, max_bytes)
    leader.record_follower_fetch(follower.local_broker_id, offset, follower.log_start_offset,
                                 leader_end)
    if region is not None:
        follower.log.append_as_follower(region.read())
    follower.follower_high_watermark(leader.high_watermark)
    return True


def catch_up(leader: Partition, follower: Partition) -> int:
    """Fetch until the follower has the leader's whole log; return how many fetches the
    leader answered with a diverging epoch."""
    diverged = 0
    for _ in range(20):
        if not fetch(leader, follower):
            diverged += 1
        elif follower.log_end_offset == leader.log_end_offset:
            return diverged
    raise AssertionError("the follower never caught up")


def log_bytes(replica: Partition) -> bytes:
    region = replica.log.read(replica.log_start_offset, 1 << 30)
    return b"" if region is None else region.read()
