"""ReplicaFetcher: a follower's loop copying its leaders' logs, Kafka's ReplicaFetcherThread.

One fetcher serves the partitions this broker follows from one leader
(``num.replica.fetchers`` of them per leader, partitions spread by hash), over one
connection, with Kafka's own Fetch (v12):

- ``replica_id`` is this broker's id: the leader reads up to its log end rather
  than its high watermark, and learns from ``fetch_offset`` (this replica's log
  end) how far this follower is, which moves its high watermark and ISR.
- ``current_leader_epoch`` is the epoch this replica follows: a deposed leader
  answers FENCED_LEADER_EPOCH, one that has not heard of its election yet
  UNKNOWN_LEADER_EPOCH, and the partition waits for the controller's next state.
- ``last_fetched_epoch`` is the epoch of this log's end. If the leader's history
  parts from this log's before ``fetch_offset``, it answers no records but a
  ``diverging_epoch`` (the largest epoch it shares and where that epoch ends in
  its log, KIP-320/595), and the follower truncates there and fetches again. When
  the leader names an epoch this log never had, the follower cuts to the end of
  its own epoch below that one and asks again, walking back one epoch at a time
  (KIP-279). The high watermark is never used to truncate (KIP-101).
- Batches are appended exactly as the leader stored them; the leader's high
  watermark is adopted up to this log's end.

A partition whose fetch failed is left out of the fetches for
``replica.fetch.backoff.ms``, so one broken partition neither stalls the others
nor turns the leader's long poll into a busy loop.

Fetches go in an incremental fetch session (KIP-227, ``fetch_session_handler``):
after the first, a fetch names only the partitions whose fetch state changed, and
the leader answers only those with news, so a round's cost follows the
partitions with data rather than every partition followed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gregor.cluster.broker_channel import CLIENT_ID, BrokerChannel, ChannelError
from gregor.cluster.fetch_session_handler import FetchSessionHandler, FetchState
from gregor.cluster.partition import Partition
from gregor.cluster.replication_quota import ReplicationQuota
from gregor.protocol import replica_fetch
from gregor.protocol.errors import ErrorCode
from gregor.security.inter_broker import ChannelSecurity
from gregor.storage.log import LogAppendError
from gregor.storage.log_manager import TopicPartition

log = logging.getLogger(__name__)

# Errors after which the partition waits for the controller's newer state.
_WAIT_FOR_METADATA = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                                ErrorCode.unknown_leader_epoch,
                                ErrorCode.unknown_topic_or_partition})
# After one of those the partition asks again this soon, not after
# replica.fetch.backoff.ms: each broker learns a new leader epoch from ZooKeeper on its
# own, and a follower that learned it first is refused by the new leader for the
# moment the leader takes to learn it too. Until this follower fetches again, the
# leader's high watermark stays and no acks=all write is acknowledged: with Kafka's
# 1 s backoff, a controlled shutdown stopped producers for a second.
_METADATA_RETRY_S = 0.05
_WARN_INTERVAL_S = 10.0
# The leader no longer knows the session, or its epoch is out of step: start a new one.
_SESSION_ERRORS = frozenset({ErrorCode.fetch_session_id_not_found,
                             ErrorCode.invalid_fetch_session_epoch})


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    broker_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partition_max_bytes: int
    backoff_s: float
    timeout_s: float
    source_address: str | None = None
    security: ChannelSecurity | None = None  # the inter-broker listener's TLS/SASL


@dataclass(slots=True)
class _Target:
    partition: Partition
    epoch: int  # the leader epoch it is followed at


def truncate_on_divergence(partition: Partition, epoch: int, end_offset: int) -> int:
    """Truncate where the leader says this log diverges; return the new log end.

    ``(epoch, end_offset)`` is the leader's largest epoch not after this log's
    latest, and where it ends in the leader's log (Kafka's
    getOffsetTruncationState). If this log had that epoch too, everything after
    the earlier of both ends goes. If not, this log cuts to the end of its own
    largest epoch below it, and its next fetch asks about that one (KIP-279).
    """
    log_end = partition.log_end_offset
    own_epoch, own_end = partition.log.leader_epoch_cache.end_offset_for(epoch, log_end)
    if own_end < 0:
        # No epoch of ours at or below the leader's: its end is all we can trust.
        offset = min(end_offset, log_end)
    elif own_epoch != epoch:
        offset = min(own_end, log_end)
    else:
        offset = min(own_end, end_offset, log_end)
    partition.truncate_to(offset)
    return partition.log_end_offset


def fetcher_id(tp: TopicPartition, fetchers: int) -> int:
    """Which of a leader's fetchers serves ``tp``: Kafka's hash of topic and partition,
    stable across processes (Python's own string hash is not)."""
    topic, index = tp
    h = 0
    for char in topic:
        h = (31 * h + ord(char)) & 0xFFFFFFFF
    return abs((31 * h + index) & 0x7FFFFFFF) % max(fetchers, 1)


class ReplicaFetcher:
    def __init__(self, leader_id: int, settings: FetcherSettings,
                 address: Callable[[int], tuple[str, int] | None],
                 appended: Callable[[Partition], None],
                 quota: ReplicationQuota | None = None,
                 storage_failed: Callable[[Partition, OSError], None] | None = None) -> None:
        self.leader_id = leader_id
        # Told of an IO error appending to a partition's log (its directory fails).
        self._storage_failed = storage_failed
        # The follower's replication throttle: its throttled replicas out of the ISR
        # are left out of fetches while it is exceeded.
        self.quota = quota or ReplicationQuota()
        self.settings = settings
        self.channel = BrokerChannel(leader_id, address, settings.timeout_s,
                                     settings.source_address, settings.security)
        self._appended = appended
        self.targets: dict[TopicPartition, _Target] = {}
        # Targets backing off, and until when: left out of the session meanwhile.
        self.delayed: dict[TopicPartition, float] = {}
        self.session = FetchSessionHandler()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._warned_at: dict[str, float] = {}

    def add(self, partition: Partition) -> None:
        """Follow ``partition`` from this leader at its current leader epoch."""
        tp = (partition.topic, partition.index)
        self.targets[tp] = _Target(partition, partition.leader_epoch)
        self.delayed.pop(tp, None)
        self.session.mark(tp)
        self._wakeup.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def remove(self, tp: TopicPartition) -> None:
        if self.targets.pop(tp, None) is not None:
            self.delayed.pop(tp, None)
            self.session.forget(tp)

    @property
    def idle(self) -> bool:
        return not self.targets

    def shutdown(self) -> asyncio.Task | None:
        """Stop fetching and close the connection; return the task to await, if any."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        self.channel.close()
        return task

    async def stop(self) -> None:
        task = self.shutdown()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    # ---------------------------------------------------------------------- loop
    async def _run(self) -> None:
        while True:
            self._end_backoffs()
            if len(self.delayed) == len(self.targets):
                await self._wait_for_targets()
                continue
            try:
                await self._fetch()
            except ChannelError as exc:
                self._warn("channel", f"fetching from broker {self.leader_id} failed: {exc}")
                self._failed()
            except Exception:
                log.exception("replica fetcher for broker %d failed", self.leader_id)
                self._failed()

    def _failed(self) -> None:
        """The fetch failed as a whole: every partition backs off, the session starts over."""
        self.session.reset()
        self._delay(list(self.targets))

    def _end_backoffs(self) -> None:
        if not self.delayed:
            return
        now = time.monotonic()
        held = self.quota.delay_s()
        for tp in [tp for tp, until in self.delayed.items() if until <= now]:
            if held and self._throttled(tp):
                self.delayed[tp] = now + held
                continue
            del self.delayed[tp]
            self.session.mark(tp)

    def _throttled(self, tp: TopicPartition) -> bool:
        """A throttled replica of this follower, out of the ISR (while a rate is set)."""
        if not self.quota.limited:
            return False
        partition = self.targets[tp].partition
        return partition.follower_throttled and self.settings.broker_id not in partition.isr

    def _current(self, tp: TopicPartition, target: _Target) -> bool:
        partition = target.partition
        return (self.targets.get(tp) is target and partition.state.leader == self.leader_id
                and partition.leader_epoch == target.epoch)

    async def _wait_for_targets(self) -> None:
        """Sleep until a partition is added or the first backoff ends."""
        self._wakeup.clear()
        now = time.monotonic()
        timeout = max(0.0, min(self.delayed.values()) - now) if self.delayed else None
        try:
            async with asyncio.timeout(timeout):
                await self._wakeup.wait()
        except TimeoutError:
            pass

    def _delay(self, tps: list[TopicPartition], seconds: float | None = None) -> None:
        """Fetch ``tps`` again after ``seconds`` (at most replica.fetch.backoff.ms)."""
        backoff = self.settings.backoff_s
        until = time.monotonic() + (backoff if seconds is None else min(seconds, backoff))
        for tp in tps:
            if tp in self.targets:
                self.delayed[tp] = until
                self.session.forget(tp)

    def _warn(self, kind: str, message: str) -> None:
        now = time.monotonic()
        if now - self._warned_at.get(kind, -_WARN_INTERVAL_S) >= _WARN_INTERVAL_S:
            self._warned_at[kind] = now
            log.warning(message)

    # --------------------------------------------------------------------- fetch
    def _state(self, tp: TopicPartition) -> FetchState:
        target = self.targets[tp]
        partition = target.partition
        return (target.epoch, partition.log_end_offset,
                partition.log.leader_epoch_cache.latest_epoch, partition.log_start_offset)

    async def _fetch(self) -> None:
        delayed = self.delayed
        named, forgotten = self.session.build(
            (tp for tp in self.targets if tp not in delayed), self._state)
        topics: dict[str, list[replica_fetch.Position]] = {}
        for (topic, index), (epoch, offset, last_epoch, start) in named:
            topics.setdefault(topic, []).append(replica_fetch.Position(
                index, epoch, offset, last_epoch, start, self.settings.partition_max_bytes))
        gone: dict[str, list[int]] = {}
        for topic, index in forgotten:
            gone.setdefault(topic, []).append(index)
        settings, session = self.settings, self.session
        answer = await self.channel.exchange(
            lambda correlation_id: replica_fetch.encode_request(
                correlation_id, CLIENT_ID, settings.broker_id, settings.max_wait_ms,
                settings.min_bytes, settings.max_bytes, session.session_id, session.epoch,
                topics, gone),
            replica_fetch.decode_response)
        if answer.error_code != ErrorCode.none:
            if answer.error_code not in _SESSION_ERRORS:
                self._warn("fetch", f"leader {self.leader_id} refused the fetch: "
                                    f"{ErrorCode(answer.error_code).name}")
                self._delay(list(self.targets))
            self.session.reset()
            return
        self.session.answered(answer.session_id)
        flushes = []
        for topic in answer.responses:
            for data in topic.partitions:
                tp = (topic.topic, data.partition_index)
                target = self.targets.get(tp)
                # Stopped following it, or at another epoch, while the fetch was out.
                if target is None or tp in delayed or not self._current(tp, target) \
                        or self.session.sent_epoch(tp) != target.epoch:
                    continue
                self._apply(target, data)
                if tp not in self.targets:
                    continue  # its log directory failed as it was appended to
                if tp not in delayed:
                    self.session.mark(tp)  # appended, truncated or moved its log start
                flush = target.partition.log.pending_flush
                if flush is not None and not flush.done():
                    flushes.append(flush)
        held = self.quota.delay_s()
        if held:
            until = time.monotonic() + held
            for tp in [tp for tp in self.targets if tp not in delayed and self._throttled(tp)]:
                self.delayed[tp] = until
                self.session.forget(tp)
        # An fsync flush.messages or flush.ms made due is done before the next fetch tells
        # the leader these records are here, as Kafka's follower appends (and flushes)
        # before it fetches again.
        await asyncio.gather(*flushes)

    def _apply(self, target: _Target, data: replica_fetch.PartitionAnswer) -> None:
        partition = target.partition
        tp = (partition.topic, partition.index)
        error = ErrorCode(data.error_code)
        if error == ErrorCode.none and data.diverging_epoch.epoch >= 0:
            diverging = data.diverging_epoch
            before = partition.log_end_offset
            after = truncate_on_divergence(partition, diverging.epoch, diverging.end_offset)
            log.info("%s: leader %d's log diverges after epoch %d (ending at %d): "
                     "truncated from %d to %d", partition.name, self.leader_id, diverging.epoch,
                     diverging.end_offset, before, after)
            return
        if error == ErrorCode.offset_out_of_range:
            if partition.log_end_offset < data.log_start_offset:
                # Everything this log has is below the leader's log start: start over there.
                partition.log.truncate_fully_and_start_at(data.log_start_offset)
                partition.high_watermark = data.log_start_offset
            else:
                self._warn(f"range-{partition.name}",
                           f"{partition.name}: leader {self.leader_id} has no offset "
                           f"{partition.log_end_offset} in epoch "
                           f"{partition.log.leader_epoch_cache.latest_epoch}")
                self._delay([tp])
            return
        if error in _WAIT_FOR_METADATA:
            self._delay([tp], _METADATA_RETRY_S)
            return
        if error != ErrorCode.none:
            self._warn(f"error-{partition.name}",
                       f"{partition.name}: leader {self.leader_id} answered {error.name}")
            self._delay([tp])
            return
        if data.records:
            if self.quota.limited and self._throttled(tp):
                self.quota.record(len(data.records))
            try:
                partition.log.append_as_follower(data.records)
            except LogAppendError as exc:
                self._warn(f"append-{partition.name}",
                           f"{partition.name}: cannot append what leader {self.leader_id} "
                           f"sent: {exc}")
                self._delay([tp])
                return
            except OSError as exc:
                if self._storage_failed is None:
                    raise
                self._storage_failed(partition, exc)
                return
        if data.log_start_offset > partition.log_start_offset:
            partition.log.advance_log_start_offset(data.log_start_offset)
        partition.follower_high_watermark(data.high_watermark)
        self._appended(partition)
