"""Partition: one replica of a topic-partition, leading or following, with its ISR and HW.

The rules are Kafka's (``Partition`` and ``Replica`` in its server module):

- The leader appends and stamps its leader epoch. It learns each follower's log
  end offset from the follower's fetches, and the high watermark is the smallest
  log end offset over the ISR: what every in-sync replica has, and all that
  consumers may read. It only moves forward.
- A follower is caught up when a fetch reaches the leader's log end as it was at
  that fetch, or at the follower's previous fetch. Not caught up for
  ``replica.lag.time.max.ms``, it leaves the ISR; once its log end reaches the
  high watermark (and the start of the leader's epoch) it joins again.
- ISR changes are asked of the cluster (``alter_isr``), conditioned on the state
  this leader saw; one change at a time is in flight. A refused change means
  the leader's view is stale: it keeps its ISR until the newer state arrives.
- A follower's high watermark is the leader's, capped at its own log end.

Nothing here does IO beyond the log, or reads the clock: the caller passes the
time, so the ISR and high-watermark rules have deterministic tests.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gregor.cluster.partition_state import PartitionState
from gregor.protocol.errors import ErrorCode
from gregor.storage.log import AppendResult, Log, LogAppendError

log = logging.getLogger(__name__)


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower, from its fetches."""

    log_end_offset: int = -1  # unknown until it fetches from this leader
    last_caught_up_s: float = 0.0
    last_fetch_leader_end: int = -1
    last_fetch_s: float = 0.0


class Partition:
    def __init__(self, topic: str, index: int, log: Log, local_broker_id: int,
                 state: PartitionState, high_watermark: int = 0) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.local_broker_id = local_broker_id
        self.state = state
        self.followers: dict[int, FollowerState] = {}
        # A checkpointed high watermark can never exceed what survived on disk.
        self.high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        # The ISR change asked for and not answered yet (one at a time, as in Kafka).
        self.pending_isr: PartitionState | None = None
        if self.is_leader:
            self._reset_followers(0.0)
            self.maybe_increment_high_watermark()

    # ----------------------------------------------------------------- identity
    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.local_broker_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr

    @property
    def replicas(self) -> tuple[int, ...]:
        return self.state.replicas

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    # -------------------------------------------------------------- transitions
    def update_state(self, state: PartitionState, now_s: float) -> bool:
        """Apply a newer state from the controller; True if leadership changed."""
        became = state.leader_epoch > self.state.leader_epoch
        if not became and state.partition_epoch <= self.state.partition_epoch:
            return False
        was_leader = self.is_leader
        self.state = state
        self.pending_isr = None
        if became and self.is_leader:
            # The new epoch starts at this log's end at once (not at the first append):
            # OffsetForLeaderEpoch answers followers from it, and the latest epoch a
            # leader knows must be at least any follower's.
            self.log.leader_epoch_cache.assign(state.leader_epoch, self.log.log_end_offset)
            # Kafka gives every follower a fresh lag window under a new leader, and
            # learns their log ends from their first fetches.
            self._reset_followers(now_s)
            log.info("%s: leading at epoch %d from offset %d (ISR %s)", self.name,
                     state.leader_epoch, self.log_end_offset, list(state.isr))
        elif became:
            self.followers.clear()
            log.info("%s: following %d at epoch %d", self.name, state.leader, state.leader_epoch)
        return became or was_leader != self.is_leader

    def _reset_followers(self, now_s: float) -> None:
        self.followers = {r: FollowerState(last_caught_up_s=now_s, last_fetch_s=now_s)
                          for r in self.state.replicas if r != self.local_broker_id}

    # ------------------------------------------------------------------- leader
    def append_as_leader(self, records: bytes, required_acks: int) -> AppendResult:
        if not self.is_leader:
            raise LogAppendError(
                ErrorCode.not_leader_or_follower,
                f"broker {self.local_broker_id} does not lead {self.name}")
        min_isr = self.log.config["min.insync.replicas"]
        if required_acks == -1 and len(self.isr) < min_isr:
            raise LogAppendError(ErrorCode.not_enough_replicas,
                                 f"ISR {list(self.isr)} is smaller than min.insync.replicas "
                                 f"{min_isr}")
        result = self.log.append_as_leader(records, self.leader_epoch)
        self.maybe_increment_high_watermark()
        return result

    def maybe_increment_high_watermark(self) -> bool:
        """Advance the HW to the smallest log end offset across the ISR; True if it moved."""
        ends = [self.log.log_end_offset if broker == self.local_broker_id
                else self.followers.get(broker, FollowerState()).log_end_offset
                for broker in self.isr]
        candidate = min(ends) if ends else self.log.log_end_offset
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_s: float) -> bool:
        """A follower fetched from ``fetch_offset``; True if the high watermark moved."""
        follower = self.followers.get(replica_id)
        if follower is None:
            return False
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            follower.last_caught_up_s = now_s
        elif fetch_offset >= follower.last_fetch_leader_end:
            follower.last_caught_up_s = max(follower.last_caught_up_s, follower.last_fetch_s)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_leader_end = leader_end
        follower.last_fetch_s = now_s
        return self.maybe_increment_high_watermark()

    def propose_isr_expansion(self) -> PartitionState | None:
        """The ISR change that admits followers that caught up, if any and none is pending;
        it becomes the pending one."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        epoch_start = self._leader_epoch_start()
        joining = [r for r, f in self.followers.items()
                   if r not in self.isr and f.log_end_offset >= self.high_watermark
                   and f.log_end_offset >= epoch_start]
        if not joining:
            return None
        self.pending_isr = self.state.with_isr(self.isr + tuple(sorted(joining)))
        return self.pending_isr

    def propose_isr_shrink(self, now_s: float, lag_max_s: float) -> PartitionState | None:
        """The ISR change that drops followers not caught up for ``lag_max_s``, if any and
        none is pending; it becomes the pending one."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        lagging = {r for r in self.isr if r != self.local_broker_id
                   and now_s - self.followers.get(r, FollowerState()).last_caught_up_s > lag_max_s}
        if not lagging:
            return None
        self.pending_isr = self.state.with_isr(tuple(r for r in self.isr if r not in lagging))
        return self.pending_isr

    def isr_changed(self, asked: PartitionState, written: PartitionState | None) -> bool:
        """The answer to an ISR change; True if the high watermark moved with it."""
        if self.pending_isr is not asked:
            return False  # a newer state arrived meanwhile
        self.pending_isr = None
        if written is None or written.leader_epoch != self.state.leader_epoch:
            return False
        log.info("%s: ISR %s -> %s", self.name, list(self.state.isr), list(written.isr))
        self.state = written
        return self.maybe_increment_high_watermark()

    def _leader_epoch_start(self) -> int:
        cache = self.log.leader_epoch_cache
        if cache.epochs and cache.epochs[-1] == self.leader_epoch:
            return cache.start_offsets[-1]
        return self.log.log_end_offset

    def acks_satisfied(self, required_offset: int) -> bool:
        """Whether an acks=all write ending before ``required_offset`` is replicated."""
        return self.high_watermark >= required_offset

    # ----------------------------------------------------------------- follower
    def follower_high_watermark(self, leader_high_watermark: int) -> None:
        """Take the leader's HW, capped at this replica's own log end."""
        self.high_watermark = max(self.high_watermark,
                                  min(leader_high_watermark, self.log.log_end_offset))

    def truncate_to(self, offset: int) -> int:
        """Drop this replica's records from ``offset`` on (it diverged from the leader);
        return how many offsets went."""
        removed = max(0, self.log.log_end_offset - offset)
        if removed:
            self.log.truncate_to(offset)
            log.warning("%s: truncated %d offset(s) from %d: they diverged from leader %d",
                        self.name, removed, offset, self.state.leader)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        return removed
