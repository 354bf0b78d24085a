"""ReplicaFetcher: a follower's loop that copies its leader's log, one per source broker.

It is Kafka's follower protocol, spoken over an ordinary client connection:

1. Truncation first (KIP-101): before fetching a partition it has just started
   following, the follower asks the leader (OffsetForLeaderEpoch) where its own
   latest leader epoch ended in the leader's log, and cuts its log there, never
   at its high watermark. When the leader answers an older epoch, the follower
   cuts at the smaller of the leader's end of that epoch and its own (KIP-279).
2. Then Fetch with its broker id as ``replica_id``, from its log end, with the
   leader epoch it believes current (a deposed leader answers FENCED_LEADER_EPOCH):
   batches are appended exactly as the leader stored them, and the leader's high
   watermark is adopted up to the follower's own log end. The fetch offset tells
   the leader how far this follower is, which is how the leader's HW and ISR move.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.fetch.v11 import request as fetch_request
from kio.schema.offset_for_leader_epoch.v3 import request as epoch_request

from gregor.cluster.broker_channel import BrokerChannel, ChannelError
from gregor.cluster.partition import Partition
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build
from gregor.protocol.errors import ErrorCode
from gregor.storage.log import LogAppendError
from gregor.storage.log_manager import TopicPartition

log = logging.getLogger(__name__)

FETCH_VERSION = 11
EPOCH_VERSION = 3
# Errors after which the follower waits for the controller's newer state.
_WAIT_FOR_METADATA = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                                ErrorCode.unknown_leader_epoch,
                                ErrorCode.unknown_topic_or_partition})


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


@dataclass(slots=True)
class _Target:
    partition: Partition
    truncated: bool = False  # OffsetForLeaderEpoch done for the current leader epoch
    epoch: int = -1


class ReplicaFetcher:
    def __init__(self, leader_id: int, settings: FetcherSettings,
                 address: Callable[[int], tuple[str, int] | None],
                 appended: Callable[[Partition], None]) -> None:
        self.leader_id = leader_id
        self.settings = settings
        self.channel = BrokerChannel(leader_id, address, settings.timeout_s,
                                     settings.source_address)
        self._appended = appended
        self.targets: dict[TopicPartition, _Target] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._warned_at = 0.0

    def add(self, partition: Partition) -> None:
        self.targets[(partition.topic, partition.index)] = _Target(partition,
                                                                    epoch=partition.leader_epoch)
        self._wakeup.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def remove(self, tp: TopicPartition) -> None:
        self.targets.pop(tp, None)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.channel.close()

    # ---------------------------------------------------------------------- loop
    async def _run(self) -> None:
        while True:
            if not self.targets:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                await self._truncate()
                if not await self._fetch():
                    await asyncio.sleep(self.settings.backoff_s)
            except ChannelError as exc:
                self._warn(f"fetching from broker {self.leader_id} failed: {exc}")
                await asyncio.sleep(self.settings.backoff_s)
            except Exception:
                log.exception("replica fetcher for broker %d failed", self.leader_id)
                await asyncio.sleep(self.settings.backoff_s)

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._warned_at > 10:
            self._warned_at = now
            log.warning(message)

    def _current(self) -> list[tuple[TopicPartition, _Target]]:
        """Targets still followed from this leader at the epoch they were added with."""
        return [(tp, t) for tp, t in list(self.targets.items())
                if t.partition.state.leader == self.leader_id
                and t.partition.leader_epoch == t.epoch]

    # ---------------------------------------------------------------- truncation
    async def _truncate(self) -> None:
        pending = [(tp, t) for tp, t in self._current() if not t.truncated]
        if not pending:
            return
        topics: dict[str, list] = {}
        for (topic, index), target in pending:
            topics.setdefault(topic, []).append(build(
                epoch_request.OffsetForLeaderPartition, partition=index,
                current_leader_epoch=target.epoch,
                leader_epoch=target.partition.log.leader_epoch_cache.latest_epoch))
        body = build(epoch_request.OffsetForLeaderEpochRequest,
                     replica_id=self.settings.broker_id,
                     topics=tuple(build(epoch_request.OffsetForLeaderTopic, topic=name,
                                        partitions=tuple(ps)) for name, ps in topics.items()))
        answer = await self.channel.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, body)
        for topic in answer.topics:
            for result in topic.partitions:
                found = self.targets.get((topic.topic, result.partition))
                if found is None:
                    continue
                if result.error_code != ErrorCode.none:
                    self._warn(f"{topic.topic}-{result.partition}: leader {self.leader_id} "
                               f"answered {result.error_code.name} to OffsetForLeaderEpoch")
                    continue
                self._truncate_to_leader(found.partition, result.leader_epoch,
                                         result.end_offset)
                found.truncated = True

    @staticmethod
    def _truncate_to_leader(partition: Partition, leader_epoch: int, end_offset: int) -> None:
        log_end = partition.log_end_offset
        cache = partition.log.leader_epoch_cache
        if leader_epoch < 0:
            # The leader knows none of our epochs: keep only what it had committed.
            offset = min(partition.high_watermark, log_end)
        else:
            # KIP-279: where the leader's answer is an older epoch than ours, our own
            # end of that epoch may be earlier still.
            _, own_end = cache.end_offset_for(leader_epoch, log_end)
            offset = min(end_offset, own_end if own_end >= 0 else log_end, log_end)
        partition.truncate_to(offset)

    # --------------------------------------------------------------------- fetch
    async def _fetch(self) -> bool:
        """One fetch round; False if nothing could be fetched (back off)."""
        current = [(tp, t) for tp, t in self._current() if t.truncated]
        if not current:
            return False
        topics: dict[str, list] = {}
        for (topic, index), target in current:
            partition = target.partition
            topics.setdefault(topic, []).append(build(
                fetch_request.FetchPartition, partition=index,
                current_leader_epoch=target.epoch, fetch_offset=partition.log_end_offset,
                log_start_offset=partition.log_start_offset,
                partition_max_bytes=self.settings.partition_max_bytes))
        body = build(fetch_request.FetchRequest, replica_id=self.settings.broker_id,
                     max_wait=datetime.timedelta(milliseconds=self.settings.max_wait_ms),
                     min_bytes=self.settings.min_bytes, max_bytes=self.settings.max_bytes,
                     topics=tuple(build(fetch_request.FetchTopic, topic=name,
                                        partitions=tuple(ps)) for name, ps in topics.items()),
                     forgotten_topics_data=())
        answer = await self.channel.request(ApiKey.FETCH, FETCH_VERSION, body)
        progressed = False
        for topic in answer.responses:
            for data in topic.partitions:
                found = self.targets.get((topic.topic, data.partition_index))
                if found is None or found.epoch != found.partition.leader_epoch:
                    continue  # stopped following it meanwhile
                progressed |= self._apply(found, data)
        return progressed

    def _apply(self, target: _Target, data) -> bool:
        partition = target.partition
        if data.error_code == ErrorCode.offset_out_of_range:
            if partition.log_end_offset < data.log_start_offset:
                # Everything we have is below the leader's log start: start over there.
                partition.log.truncate_fully_and_start_at(data.log_start_offset)
                partition.high_watermark = data.log_start_offset
            else:
                target.truncated = False  # diverged: ask for the epoch's end again
            return True
        if data.error_code != ErrorCode.none:
            if data.error_code not in _WAIT_FOR_METADATA:
                self._warn(f"{partition.name}: leader {self.leader_id} answered "
                           f"{data.error_code.name}")
            return False
        if data.records:
            try:
                partition.log.append_as_follower(data.records)
            except LogAppendError as exc:
                self._warn(f"{partition.name}: cannot append what leader {self.leader_id} "
                           f"sent: {exc}")
                target.truncated = False
                return False
        if data.log_start_offset > partition.log_start_offset:
            partition.log.advance_log_start_offset(data.log_start_offset)
        partition.follower_high_watermark(data.high_watermark)
        self._appended(partition)
        return True
