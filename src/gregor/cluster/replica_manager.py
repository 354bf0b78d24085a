"""ReplicaManager: the partitions this broker hosts, and the data path through them.

Produce appends through the partition leader; fetch reads below the high
watermark. Two purgatories park requests until the replicas move on:

- fetches that find too little data wait until an append to one of their
  partitions wakes them or their deadline passes;
- acks=all produces wait until the high watermark covers their records, the
  partition stops being led here, or their timeout passes.

In a cluster it also runs the replication loops: a fetcher per leader this
broker follows, and the leader's periodic ISR shrink check. ISR changes go to
the cluster through ``alter_isr``; alone, there is no one to change it with.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from gregor.cluster.metadata_image import TopicMetadata
from gregor.cluster.partition import Partition
from gregor.cluster.partition_state import PartitionState
from gregor.cluster.replica_fetcher import FetcherSettings, ReplicaFetcher
from gregor.config import BrokerConfig, TopicConfig
from gregor.protocol.errors import ErrorCode
from gregor.storage.log_manager import LogManager, TopicPartition

log = logging.getLogger(__name__)

AlterIsr = Callable[[TopicPartition, PartitionState], Awaitable[PartitionState | None]]


class ReplicaManager:
    def __init__(self, config: BrokerConfig, log_manager: LogManager, *,
                 broker_address: Callable[[int], tuple[str, int] | None] | None = None,
                 alter_isr: AlterIsr | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.broker_id = config.node_id
        self.log_manager = log_manager
        self.partitions: dict[TopicPartition, Partition] = {}
        self.clock = clock
        self._broker_address = broker_address or (lambda broker_id: None)
        self._alter_isr = alter_isr
        self._waiters: defaultdict[TopicPartition, set[asyncio.Event]] = defaultdict(set)
        # acks=all produces: (offset the HW must reach, future) per partition.
        self._produce_waiters: defaultdict[TopicPartition, list[tuple[int, asyncio.Future]]] = (
            defaultdict(list))
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._fetcher_settings = FetcherSettings(
            broker_id=self.broker_id, max_wait_ms=config["replica.fetch.wait.max.ms"],
            min_bytes=config["replica.fetch.min.bytes"],
            max_bytes=config["replica.fetch.response.max.bytes"],
            partition_max_bytes=config["replica.fetch.max.bytes"],
            backoff_s=config["replica.fetch.backoff.ms"] / 1000,
            timeout_s=config["replica.socket.timeout.ms"] / 1000,
            source_address=config.source_address)
        self._tasks: set[asyncio.Task] = set()

    def topic_config(self, topic: TopicMetadata) -> TopicConfig:
        return TopicConfig(self.config, topic.configs)

    # ------------------------------------------------------------ partitions
    def make_partitions(self, topic: TopicMetadata) -> None:
        """Open (or create) the logs of every partition of ``topic`` this broker hosts
        (single node: each is led here, its ISR this broker alone)."""
        for index, state in enumerate(topic.partitions):
            if (topic.name, index) not in self.partitions and self.broker_id in state.replicas:
                self._open(topic, index, state)

    def _open(self, topic: TopicMetadata, index: int, state: PartitionState) -> Partition:
        tp = (topic.name, index)
        log_ = self.log_manager.get_or_create(topic.name, index, self.topic_config(topic))
        partition = Partition(topic.name, index, log_, self.broker_id, state,
                              high_watermark=self.log_manager.high_watermarks.get(tp, 0))
        self.partitions[tp] = partition
        return partition

    def apply_partition_state(self, topic: TopicMetadata, index: int,
                              state: PartitionState) -> None:
        """Follow the controller's newer state for a hosted partition: lead or follow."""
        tp = (topic.name, index)
        partition = self.partitions.get(tp)
        if partition is None:
            partition = self._open(topic, index, state)
            changed = True
        else:
            changed = partition.update_state(state, self.clock())
        if not changed:
            self._after_hw_change(tp, partition)  # the ISR may have moved the HW
            return
        for fetcher in self.fetchers.values():
            fetcher.remove(tp)
        if partition.is_leader:
            partition.maybe_increment_high_watermark()
        else:
            # Produces waiting here can no longer be acknowledged by this broker.
            self._fail_produce_waiters(tp, ErrorCode.not_leader_or_follower)
            if state.has_leader:
                self._fetcher_for(state.leader).add(partition)
        self.notify(tp)

    def _fetcher_for(self, leader_id: int) -> ReplicaFetcher:
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = ReplicaFetcher(leader_id, self._fetcher_settings, self._broker_address,
                                     self._follower_appended)
            self.fetchers[leader_id] = fetcher
        return fetcher

    def _follower_appended(self, partition: Partition) -> None:
        self.notify((partition.topic, partition.index))

    def remove_partition(self, topic: str, index: int) -> None:
        """This broker no longer hosts the partition: stop it and delete its log."""
        tp = (topic, index)
        if self.partitions.pop(tp, None) is None:
            return
        for fetcher in self.fetchers.values():
            fetcher.remove(tp)
        self._fail_produce_waiters(tp, ErrorCode.not_leader_or_follower)
        self.log_manager.delete(*tp)
        self.notify(tp)

    def remove_topic(self, topic: str) -> None:
        for tp in [tp for tp in self.partitions if tp[0] == topic]:
            self.remove_partition(*tp)

    def update_config(self, topic: TopicMetadata) -> None:
        config = self.topic_config(topic)
        for (name, _), partition in self.partitions.items():
            if name == topic.name:
                partition.log.config_changed(config)

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: p.high_watermark for tp, p in self.partitions.items()}

    # ---------------------------------------------------------------- leader
    def record_follower_fetch(self, partition: Partition, replica_id: int,
                              fetch_offset: int) -> None:
        """A follower fetched: its progress may move the HW and let it rejoin the ISR."""
        if partition.record_follower_fetch(replica_id, fetch_offset, self.clock()):
            self._after_hw_change((partition.topic, partition.index), partition)
        proposal = partition.propose_isr_expansion()
        if proposal is not None:
            self._spawn(self._change_isr(partition, proposal))

    def shrink_isrs(self) -> None:
        """Drop followers that have not caught up for replica.lag.time.max.ms."""
        lag_max_s = self.config["replica.lag.time.max.ms"] / 1000
        now = self.clock()
        for partition in self.partitions.values():
            proposal = partition.propose_isr_shrink(now, lag_max_s)
            if proposal is not None:
                log.info("%s: followers %s fell behind", partition.name,
                         sorted(set(partition.isr) - set(proposal.isr)))
                self._spawn(self._change_isr(partition, proposal))

    async def _change_isr(self, partition: Partition, proposal: PartitionState) -> None:
        written = None
        if self._alter_isr is not None:
            try:
                written = await self._alter_isr((partition.topic, partition.index), proposal)
            except Exception:
                log.warning("%s: ISR change failed", partition.name, exc_info=True)
        partition.isr_changed(proposal, written)
        # A smaller ISR may let the HW (and the acks=all writes waiting on it) move on.
        self._after_hw_change((partition.topic, partition.index), partition)

    def _after_hw_change(self, tp: TopicPartition, partition: Partition) -> None:
        self.notify(tp)
        self._complete_produce_waiters(tp, partition)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run_isr_checks(self) -> None:
        """Kafka's isr-expiration task: every half of replica.lag.time.max.ms."""
        interval = self.config["replica.lag.time.max.ms"] / 2000
        while True:
            await asyncio.sleep(interval)
            self.shrink_isrs()

    async def stop(self) -> None:
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        for task in self._tasks:
            task.cancel()

    # ------------------------------------------------- acks=all purgatory
    async def wait_for_acks(self, partition: Partition, required_offset: int,
                            timeout_s: float) -> ErrorCode:
        """Wait until the HW covers ``required_offset`` (an acks=all write's end)."""
        tp = (partition.topic, partition.index)
        if partition.acks_satisfied(required_offset):
            return self._acks_error(partition)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        entry = (required_offset, future)
        self._produce_waiters[tp].append(entry)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return ErrorCode.request_timed_out
        finally:
            waiters = self._produce_waiters.get(tp)
            if waiters is not None and entry in waiters:
                waiters.remove(entry)

    def _acks_error(self, partition: Partition) -> ErrorCode:
        # Kafka: records covered by the HW while the ISR shrank below min.insync.replicas
        # are in, but not as durable as asked.
        if len(partition.isr) < partition.log.config["min.insync.replicas"]:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    def _complete_produce_waiters(self, tp: TopicPartition, partition: Partition) -> None:
        waiters = self._produce_waiters.get(tp)
        if not waiters:
            return
        for required_offset, future in list(waiters):
            if partition.acks_satisfied(required_offset) and not future.done():
                future.set_result(self._acks_error(partition))

    def _fail_produce_waiters(self, tp: TopicPartition, error: ErrorCode) -> None:
        for _, future in self._produce_waiters.pop(tp, []):
            if not future.done():
                future.set_result(error)

    # --------------------------------------------------------- fetch purgatory
    def notify(self, tp: TopicPartition) -> None:
        """Wake fetches parked on ``tp`` (new data, or the partition went away)."""
        waiters = self._waiters.pop(tp, None)
        if waiters:
            for event in waiters:
                event.set()

    async def wait_for_data(self, tps: list[TopicPartition], timeout: float) -> bool:
        """Park until one of ``tps`` gets data or ``timeout`` seconds pass; True if woken."""
        event = asyncio.Event()
        for tp in tps:
            self._waiters[tp].add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for tp in tps:
                waiters = self._waiters.get(tp)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiters[tp]
