"""Partition: one replica of a topic-partition, leading or following, with its ISR and HW.

The rules are Kafka's (``Partition`` and ``Replica`` in its server module, 3.x):

- The leader appends and stamps its leader epoch, which starts at its log end
  when it is elected. It learns each follower's log end offset from the
  follower's fetches. The high watermark is the smallest log end offset over the
  "maximal" ISR (the ISR plus a member whose admission is being asked for) and
  over live followers caught up but not admitted yet (Kafka's
  shouldWaitForReplicaToJoinIsr: a dead broker, or one in a controlled shutdown,
  is not ISR-eligible and holds nothing back); it only moves forward, and not at
  all while the ISR is below ``min.insync.replicas`` (KIP-966): what it covers is
  on enough replicas, and it is all consumers may read.
- A follower is caught up when its log end equals the leader's, or when within
  ``replica.lag.time.max.ms`` one of its fetches reached the leader's log end as
  it was at that fetch or at its previous one. Not caught up, it leaves the ISR;
  once its log end reaches the high watermark and the start of the leader's
  epoch, it joins again, if it is ISR-eligible.
- ISR changes are asked of the cluster, conditioned on the partition epoch this
  leader saw; one is in flight at a time. A refused change means the leader's
  view is stale: it keeps the change pending (so it asks nothing more) until the
  controller's newer state arrives.
- A follower's high watermark is the leader's, bounded by its own log.

Nothing here does IO beyond the log: the time comes from an injected clock, so
the ISR and high-watermark rules have deterministic tests.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from gregor.cluster.partition_state import PartitionState
from gregor.protocol.errors import ErrorCode
from gregor.storage.log import AppendOrigin, AppendResult, Log, LogAppendError, OffsetOutOfRange

log = logging.getLogger(__name__)

NEVER = float("-inf")
DEFAULT_REPLICA_LAG_TIME_MAX_S = 30.0


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower, from its fetches (Kafka's ReplicaState)."""

    log_end_offset: int = -1  # unknown until it fetches from this leader
    log_start_offset: int = -1
    # The leader's log end when the follower's previous fetch came in.
    last_fetch_leader_end: int = -1
    last_fetch_s: float = NEVER
    last_caught_up_s: float = NEVER

    def is_caught_up(self, leader_end: int, now_s: float, lag_max_s: float) -> bool:
        return self.log_end_offset == leader_end or now_s - self.last_caught_up_s <= lag_max_s


class StateChange(enum.Enum):
    """What applying the controller's state changed."""

    NONE = "none"
    ISR = "isr"  # the same leadership, another ISR or replica set
    LEADER_EPOCH = "leader_epoch"  # a new leader epoch: lead, follow another, or stop


class Partition:
    def __init__(self, topic: str, index: int, log: Log, local_broker_id: int,
                 state: PartitionState, high_watermark: int = 0, *,
                 clock: Callable[[], float] = time.monotonic,
                 replica_lag_time_max_s: float = DEFAULT_REPLICA_LAG_TIME_MAX_S,
                 isr_eligible: Callable[[int], bool] = lambda broker_id: True,
                 session_fetch_s: Callable[[int], float] = lambda broker_id: NEVER) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.local_broker_id = local_broker_id
        self.state = state
        self.clock = clock
        self.replica_lag_time_max_s = replica_lag_time_max_s
        # Whether a broker may be in the ISR: registered and not in a controlled shutdown
        # (Kafka's isReplicaIsrEligible). A broker shutting down keeps fetching until it
        # stops; counted as eligible, its leaders would put it back in every ISR the
        # controller just took it out of, and its shutdown would wait on them forever.
        self.isr_eligible = isr_eligible
        # When a follower last fetched in a session holding this partition: such a fetch
        # counts the partition at its cached offset without naming it (KIP-227), as
        # Kafka's leader counts every partition of the session at each fetch.
        self.session_fetch_s = session_fetch_s
        self.followers: dict[int, FollowerState] = {}
        # A checkpointed high watermark can never exceed what survived on disk.
        self.high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        # The ISR change asked for and not settled yet (one at a time, as in Kafka).
        self.pending_isr: PartitionState | None = None
        # Where this broker's leadership began in its log (-1 when following).
        self.leader_epoch_start_offset = -1
        # Whether this replica's replication counts against the leader's or the
        # follower's throttle while out of the ISR (the topic's throttled replicas).
        self.leader_throttled = False
        self.follower_throttled = False
        if self.is_leader:
            self._become_leader(new_leader=True)

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

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR plus a member being admitted: the stricter set, until the change settles."""
        pending = self.pending_isr
        if pending is None:
            return self.state.isr
        return self.state.isr + tuple(r for r in pending.isr if r not in self.state.isr)

    @property
    def effective_min_isr(self) -> int:
        """min.insync.replicas, capped at the replication factor (Kafka's effectiveMinIsr)."""
        return min(self.log.config["min.insync.replicas"], len(self.state.replicas))

    @property
    def is_under_min_isr(self) -> bool:
        isr = len(self.state.isr)
        # Checked on every append: with the whole assignment in sync, no config lookup.
        return (self.is_leader and isr < len(self.state.replicas)
                and isr < self.effective_min_isr)

    # -------------------------------------------------------------- transitions
    def update_state(self, state: PartitionState) -> StateChange:
        """Apply the controller's state if it is newer than this replica's.

        A newer leader epoch makes this replica leader or follower; the same epoch
        with a newer partition epoch only brings another ISR or replica set.
        """
        if state.leader_epoch < self.state.leader_epoch:
            return StateChange.NONE
        if state.leader_epoch == self.state.leader_epoch:
            if state.partition_epoch < self.state.partition_epoch:
                return StateChange.NONE
            if state.partition_epoch == self.state.partition_epoch:
                if state.replicas == self.state.replicas:
                    return StateChange.NONE
                # Only the replica set (a reassignment): an ISR change in flight stands.
                self.state = replace(self.state, replicas=state.replicas)
                if self.is_leader:
                    self._sync_followers()
                return StateChange.ISR
            self.state = state
            self.pending_isr = None
            if self.is_leader:
                self._sync_followers()
                self.maybe_increment_high_watermark()
            return StateChange.ISR
        was_leader = self.is_leader
        self.state = state
        self.pending_isr = None
        if self.is_leader:
            self._become_leader(new_leader=not was_leader)
            log.debug("%s: leading at epoch %d from offset %d (ISR %s, high watermark %d)",
                      self.name, self.leader_epoch, self.leader_epoch_start_offset,
                      list(self.state.isr), self.high_watermark)
        else:
            self.followers.clear()
            self.leader_epoch_start_offset = -1
            log.debug("%s: following %d at epoch %d from offset %d", self.name, state.leader,
                      state.leader_epoch, self.log_end_offset)
        return StateChange.LEADER_EPOCH

    def _become_leader(self, new_leader: bool) -> None:
        start = self.log.log_end_offset
        # The epoch starts at this log's end at once, not at the first append: a
        # follower that saw several elections in a row may hold a later epoch than
        # any this log has, and must learn where this leader's history parts from it.
        self.log.leader_epoch_cache.assign(self.leader_epoch, start)
        self.leader_epoch_start_offset = start
        # Kafka's resetReplicaState: a new leader learns followers' log ends from their
        # fetches; ISR members get a fresh lag window, the others none (they must not
        # hold the high watermark back before they fetch).
        now = self.clock()
        known = {} if new_leader else self.followers
        self.followers = {}
        for replica in self.state.replicas:
            if replica == self.local_broker_id:
                continue
            in_sync = replica in self.state.isr
            previous = known.get(replica)
            self.followers[replica] = FollowerState(
                log_end_offset=-1 if previous is None else previous.log_end_offset,
                log_start_offset=-1 if previous is None else previous.log_start_offset,
                last_fetch_leader_end=-1 if previous is None else start,
                last_fetch_s=now if in_sync and previous is not None else NEVER,
                last_caught_up_s=now if in_sync else NEVER)
        self.maybe_increment_high_watermark()

    def _sync_followers(self) -> None:
        """Track the followers of a changed replica set (a reassignment)."""
        followers = [r for r in self.state.replicas if r != self.local_broker_id]
        self.followers = {r: self.followers.get(r) or FollowerState() for r in followers}

    # ------------------------------------------------------------------- leader
    def append_as_leader(self, records: bytes, required_acks: int,
                         origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:
        if not self.is_leader:
            raise LogAppendError(
                ErrorCode.not_leader_or_follower,
                f"broker {self.local_broker_id} does not lead {self.name}")
        if required_acks == -1 and self.is_under_min_isr:
            raise LogAppendError(ErrorCode.not_enough_replicas,
                                 f"ISR {list(self.isr)} is smaller than min.insync.replicas "
                                 f"{self.effective_min_isr}")
        self._count_quiet_followers_caught_up()
        result = self.log.append_as_leader(records, self.leader_epoch, origin=origin)
        self.maybe_increment_high_watermark()
        return result

    def _count_quiet_followers_caught_up(self) -> None:
        """Before an append moves the log end: a follower at the end was caught up at
        each of its fetches since it got there, named or not. A follower in a session
        names a quiet partition only when its own position changes, so without this the
        first write after more than replica.lag.time.max.ms of quiet found every
        follower 'behind' and shrank the ISR, refusing acks=all below
        min.insync.replicas, until they fetched it (seen at 10,000 partitions)."""
        end = self.log.log_end_offset
        for replica, follower in self.followers.items():
            if follower.log_end_offset == end:
                follower.last_caught_up_s = max(follower.last_caught_up_s,
                                                self.session_fetch_s(replica))

    def maybe_increment_high_watermark(self) -> bool:
        """Advance the HW as far as every replica that counts has; True if it moved."""
        if not self.is_leader or self.is_under_min_isr:
            return False
        leader_end = self.log.log_end_offset
        candidate = leader_end
        if self.followers:
            now = self.clock()
            maximal = self.maximal_isr
            for replica, follower in self.followers.items():
                if follower.log_end_offset < candidate and (
                        replica in maximal
                        or (follower.is_caught_up(leader_end, now, self.replica_lag_time_max_s)
                            and self.isr_eligible(replica))):
                    candidate = follower.log_end_offset
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int
                        ) -> tuple[int, int] | None:
        """Where a fetcher's log parts from this one, as Kafka's readRecords checks it.

        ``(epoch, end offset)``: this log's largest epoch not after the fetcher's
        last fetched one, and where it ends here, if that is before the fetch
        offset or is an older epoch (the fetcher holds records this log does not
        have); None if the fetcher's log continues this one. Raises
        OffsetOutOfRange if that epoch's end is unknown or the offset is below
        the log start.
        """
        epoch, end = self.log.leader_epoch_cache.end_offset_for(last_fetched_epoch,
                                                                self.log.log_end_offset)
        if end < 0 or fetch_offset < self.log.log_start_offset:
            raise OffsetOutOfRange(fetch_offset, self.log.log_start_offset,
                                   self.log.log_end_offset)
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def is_replica(self, broker_id: int) -> bool:
        return broker_id in self.followers

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, log_start_offset: int,
                              leader_end: int) -> bool:
        """A follower fetched from ``fetch_offset`` (its log end) while this log ended at
        ``leader_end``; True if the high watermark moved (Kafka's updateFetchState)."""
        follower = self.followers.get(replica_id)
        if follower is None:
            return False
        now = self.clock()
        if fetch_offset >= leader_end:
            follower.last_caught_up_s = max(follower.last_caught_up_s, now)
        elif fetch_offset >= follower.last_fetch_leader_end:
            follower.last_caught_up_s = max(follower.last_caught_up_s, follower.last_fetch_s)
        moved = follower.log_end_offset != fetch_offset
        follower.log_end_offset = fetch_offset
        follower.log_start_offset = log_start_offset
        follower.last_fetch_leader_end = max(leader_end, follower.last_fetch_leader_end)
        follower.last_fetch_s = now
        return moved and self.maybe_increment_high_watermark()

    def propose_isr_expansion(self, replica_id: int) -> PartitionState | None:
        """The ISR change admitting ``replica_id`` if it caught up, unless a change is
        pending; it becomes the pending one."""
        follower = self.followers.get(replica_id)
        if (not self.is_leader or self.pending_isr is not None or follower is None
                or replica_id in self.state.isr or not self.isr_eligible(replica_id)
                or follower.log_end_offset < self.high_watermark
                or follower.log_end_offset < self.leader_epoch_start_offset):
            return None
        self.pending_isr = self.state.with_isr(self.state.isr + (replica_id,))
        return self.pending_isr

    def out_of_sync_replicas(self) -> list[int]:
        """ISR members not caught up for replica.lag.time.max.ms (none while a change is
        pending)."""
        if not self.is_leader or self.pending_isr is not None:
            return []
        now = self.clock()
        leader_end = self.log.log_end_offset
        return [r for r in self.state.isr if r != self.local_broker_id
                and not self.followers.get(r, FollowerState()).is_caught_up(
                    leader_end, now, self.replica_lag_time_max_s)]

    def propose_isr_shrink(self) -> PartitionState | None:
        """The ISR change dropping followers out of sync, if any and none is pending; it
        becomes the pending one."""
        lagging = self.out_of_sync_replicas()
        if not lagging:
            return None
        self.pending_isr = self.state.with_isr(
            tuple(r for r in self.state.isr if r not in lagging))
        return self.pending_isr

    def isr_changed(self, asked: PartitionState, written: PartitionState | None) -> bool:
        """The controller's answer to an ISR change; True if the high watermark moved.

        ``None`` is a refusal: the partition epoch asked on is stale, so the change
        stays pending and nothing more is asked until the newer state is applied.
        """
        if self.pending_isr is not asked:
            return False  # a newer state was applied meanwhile
        if written is None:
            log.info("%s: ISR change to %s refused; waiting for the controller's state",
                     self.name, list(asked.isr))
            return False
        if (written.leader_epoch != self.state.leader_epoch
                or written.partition_epoch < self.state.partition_epoch):
            return False
        log.info("%s: ISR %s -> %s", self.name, list(self.state.isr), list(written.isr))
        # The replica set may have changed while the change was asked (a reassignment).
        self.state = replace(written, replicas=self.state.replicas)
        self.pending_isr = None
        return self.maybe_increment_high_watermark()

    def isr_change_failed(self, asked: PartitionState) -> None:
        """The ISR change could not be asked at all (the cluster was unreachable): it is
        dropped, so the next fetch or check asks again."""
        if self.pending_isr is asked:
            self.pending_isr = None

    def acks_error(self, required_offset: int) -> ErrorCode | None:
        """How an acks=all write ending before ``required_offset`` is answered, or None
        while it must wait (Kafka's checkEnoughReplicasReachOffset).

        Kafka 3.x would keep such a write waiting while the ISR is below
        min.insync.replicas (the high watermark does not move then) until its
        timeout; it is answered at once instead, with the error that says it is in
        the log but on too few replicas, so the producer need not wait to learn it.
        """
        if not self.is_leader:
            return ErrorCode.not_leader_or_follower
        if self.high_watermark >= required_offset:
            if len(self.maximal_isr) < self.effective_min_isr:
                return ErrorCode.not_enough_replicas_after_append
            return ErrorCode.none
        if self.is_under_min_isr:
            return ErrorCode.not_enough_replicas_after_append
        return None

    # ----------------------------------------------------------------- follower
    def follower_high_watermark(self, leader_high_watermark: int) -> None:
        """Take the leader's HW, bounded by this replica's own log (Kafka's
        updateHighWatermark: it may go back, e.g. to a new leader's lagging one)."""
        self.high_watermark = max(self.log.log_start_offset,
                                  min(leader_high_watermark, self.log.log_end_offset))

    def truncate_to(self, offset: int) -> int:
        """Drop this replica's records from ``offset`` on (they diverge from the leader's);
        return how many offsets went."""
        removed = max(0, self.log.log_end_offset - offset)
        self.log.truncate_to(offset)
        if removed:
            log.warning("%s: truncated %d offset(s) from %d: they diverged from leader %d",
                        self.name, removed, offset, self.state.leader)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        return removed
