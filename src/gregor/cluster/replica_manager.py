"""ReplicaManager: the partitions this broker hosts, and the data path through them.

Produce appends through the partition leader; fetch reads below the high
watermark. Two purgatories park requests until the replicas move on:

- fetches that find too little data wait until an append or a high-watermark
  move on one of their partitions wakes them, or their deadline passes (a fetch
  in a session waits on its session, which every such change marks);
- acks=all produces wait in the delayed-produce purgatory until the high
  watermark covers their records, the partition stops being led here, or their
  timeout passes.

In a cluster it applies the controller's partition states (lead, follow, stop),
runs the fetchers that copy leaders' logs to this broker, and, as leader, the
periodic ISR shrink check. ISR changes go to the cluster through ``alter_isr``;
alone, there is no one to change it with, and the ISR is this broker.

With several log directories it moves replicas between them (AlterReplicaLogDirs),
and when one fails (KIP-112) the partitions it held go offline here only: they are
answered KAFKA_STORAGE_ERROR, never opened again in another directory, and
``on_offline`` tells the cluster, whose controller moves their leadership elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any

from gregor.cluster.delayed_produce import DelayedProducePurgatory
from gregor.cluster.fetch_sessions import FetchSessionCache
from gregor.cluster.log_dir_moves import LogDirMoves
from gregor.cluster.metadata_image import MetadataImage, TopicMetadata
from gregor.cluster.partition import Partition, StateChange
from gregor.cluster.partition_state import PartitionState
from gregor.cluster.replica_fetcher import FetcherSettings, ReplicaFetcher, fetcher_id
from gregor.cluster.replication_quota import ReplicationQuota, throttles
from gregor.config import BrokerConfig, TopicConfig
from gregor.protocol.errors import ErrorCode
from gregor.security.inter_broker import ChannelSecurity
from gregor.storage.log import OffsetOutOfRange
from gregor.storage.log_manager import LogManager, TopicPartition

log = logging.getLogger(__name__)

AlterIsr = Callable[[TopicPartition, PartitionState], Awaitable[PartitionState | None]]


class ReplicaManager:
    def __init__(self, config: BrokerConfig, log_manager: LogManager, *,
                 broker_address: Callable[[int], tuple[str, int] | None] | None = None,
                 alter_isr: AlterIsr | None = None,
                 isr_eligible: Callable[[int], bool] | None = None,
                 channel_security: ChannelSecurity | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.broker_id = config.node_id
        self.log_manager = log_manager
        self.partitions: dict[TopicPartition, Partition] = {}
        self.clock = clock
        self._broker_address = broker_address or (lambda broker_id: None)
        # Alone, every replica (this broker) is eligible.
        self._isr_eligible = isr_eligible or (lambda broker_id: True)
        self._alter_isr = alter_isr
        self._lag_max_s = config["replica.lag.time.max.ms"] / 1000
        # A follower's session counts as fetching for two of its long polls.
        self._session_freshness_s = 2 * config["replica.fetch.wait.max.ms"] / 1000 + 0.5
        self._waiters: defaultdict[TopicPartition, set[asyncio.Event]] = defaultdict(set)
        self.delayed_produce = DelayedProducePurgatory(self.partitions.get)
        self.fetch_sessions = FetchSessionCache(
            config["max.incremental.fetch.session.cache.slots"], clock)
        # Keyed by (leader broker id, fetcher id): num.replica.fetchers per leader.
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._fetcher_settings = FetcherSettings(
            broker_id=self.broker_id, max_wait_ms=config["replica.fetch.wait.max.ms"],
            min_bytes=config["replica.fetch.min.bytes"],
            max_bytes=config["replica.fetch.response.max.bytes"],
            partition_max_bytes=config["replica.fetch.max.bytes"],
            backoff_s=config["replica.fetch.backoff.ms"] / 1000,
            timeout_s=config["replica.socket.timeout.ms"] / 1000,
            source_address=config.source_address, security=channel_security)
        self._tasks: set[asyncio.Task] = set()
        # Replication throttles (a reassignment's): what leaders send, followers fetch.
        self.leader_quota = ReplicationQuota(clock)
        self.follower_quota = ReplicationQuota(clock)
        log_manager.on_dir_failure = self._dir_failed
        self.moves = LogDirMoves(log_manager, self.partitions.get, ReplicationQuota(clock))
        self._set_quota_bounds()
        # ISR changes of partitions led here, for metrics (Kafka's IsrShrinks/ExpandsPerSec).
        self.isr_shrinks = 0
        self.isr_expands = 0
        # Partitions whose log directory failed (Kafka's HostedPartition.Offline), and
        # who to tell about them (the cluster, given every offline partition here).
        self.offline: set[TopicPartition] = set()
        self.on_offline: Callable[[list[TopicPartition]], None] | None = None
        # Told of the whole set whenever it changes (every broker's Metadata lists them).
        self.on_offline_changed: Callable[[set[TopicPartition]], None] | None = None
        # The partition epoch of each offline partition's state last reported.
        self._reported: dict[TopicPartition, int] = {}

    def topic_config(self, topic: TopicMetadata) -> TopicConfig:
        return TopicConfig(self.config, topic.configs)

    # ------------------------------------------------------------ partitions
    def make_partitions(self, topic: TopicMetadata, existing: bool = False) -> None:
        """Open (or create) the logs of every partition of ``topic`` this broker hosts
        (single node: each is led here, its ISR this broker alone). Of an ``existing``
        topic (at start), a partition whose log may be in an offline directory goes
        offline rather than start again empty."""
        for index, state in enumerate(topic.partitions):
            tp = (topic.name, index)
            if tp not in self.partitions and self.broker_id in state.replicas:
                if existing and self._lost_with_a_dir(tp):
                    self._take_offline(tp)
                    continue
                self._open(topic, index, state)

    def _open(self, topic: TopicMetadata, index: int, state: PartitionState) -> Partition:
        tp = (topic.name, index)
        log_ = self.log_manager.get_or_create(topic.name, index, self.topic_config(topic))
        partition = Partition(topic.name, index, log_, self.broker_id, state,
                              high_watermark=self.log_manager.high_watermarks.get(tp, 0),
                              clock=self.clock, replica_lag_time_max_s=self._lag_max_s,
                              isr_eligible=self._isr_eligible,
                              session_fetch_s=partial(self.fetch_sessions.last_fetch, tp))
        self._set_throttles(partition, self.topic_config(topic))
        self.partitions[tp] = partition
        return partition

    def apply_partition_state(self, topic: TopicMetadata, index: int,
                              state: PartitionState) -> None:
        """Follow the controller's state for a partition: lead it, follow its leader, or
        stop hosting it. Called for every hosted partition at start and on every change;
        a state no newer than the replica's changes nothing."""
        tp = (topic.name, index)
        if self.broker_id not in state.replicas:
            self.remove_partition(topic.name, index)
            return
        if tp in self.offline:
            self._offline_state(tp, state)
            return
        partition = self.partitions.get(tp)
        if partition is None and self._lost_with_a_dir(tp):
            self._take_offline(tp)
            self._offline_state(tp, state)
            return
        if partition is None:
            try:
                partition = self._open(topic, index, state)
            except OSError:  # its directory failed as the log was made (and went offline)
                self._take_offline(tp)
                self._offline_state(tp, state)
                return
            change = StateChange.LEADER_EPOCH
        else:
            change = partition.update_state(state)
        if change is StateChange.NONE:
            return
        if change is StateChange.LEADER_EPOCH:
            # A new epoch restarts fetching, even from the same leader, as in Kafka.
            self._stop_fetching(tp)
            if not partition.is_leader and state.has_leader:
                self._fetcher_for(state.leader, tp).add(partition)
        # Produces waiting here are answered (NOT_LEADER_OR_FOLLOWER once it follows; the
        # ISR may have moved the HW or fallen below min.insync.replicas), fetches woken.
        self._partition_changed(tp)
        self._maybe_expand_isr(partition)

    def _fetcher_for(self, leader_id: int, tp: TopicPartition) -> ReplicaFetcher:
        key = (leader_id, fetcher_id(tp, self.config["num.replica.fetchers"]))
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = ReplicaFetcher(leader_id, self._fetcher_settings, self._broker_address,
                                     self._follower_appended, self.follower_quota,
                                     self.storage_failed)
            self.fetchers[key] = fetcher
        return fetcher

    def _stop_fetching(self, tp: TopicPartition) -> None:
        for key, fetcher in list(self.fetchers.items()):
            fetcher.remove(tp)
            if fetcher.idle:
                # Kafka shuts idle fetchers down: no connection kept to a broker no
                # longer followed (which may be dead).
                del self.fetchers[key]
                task = fetcher.shutdown()
                if task is not None:
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)

    def _follower_appended(self, partition: Partition) -> None:
        self.notify((partition.topic, partition.index))

    def remove_partition(self, topic: str, index: int) -> None:
        """This broker no longer hosts the partition: stop it and delete its log."""
        tp = (topic, index)
        if tp in self.offline:
            self.offline.discard(tp)
            self._offline_changed()
        self._reported.pop(tp, None)
        if self.partitions.pop(tp, None) is None:
            return
        self._stop_fetching(tp)
        self.log_manager.delete(*tp)
        self._partition_changed(tp)

    def remove_topic(self, topic: str) -> None:
        for tp in [tp for tp in (*self.partitions, *self.offline) if tp[0] == topic]:
            self.remove_partition(*tp)

    # ----------------------------------------------------------- log directories
    def alter_log_dir(self, tp: TopicPartition, destination: Path) -> ErrorCode:
        """AlterReplicaLogDirs for one partition, as Kafka's alterReplicaLogDirs: an
        unknown directory is LOG_DIR_NOT_FOUND, an offline one (or an offline replica)
        KAFKA_STORAGE_ERROR; a partition not hosted yet is REPLICA_NOT_AVAILABLE, and
        will be created in the directory when it comes; a move to another directory
        than the one under way replaces it."""
        found = self.log_manager.dirs.get(destination)
        if found is None:
            return ErrorCode.log_dir_not_found
        if not found.online or tp in self.offline:
            return ErrorCode.kafka_storage_error
        if self.moves.destination(tp) not in (None, destination):
            self.log_manager.abandon_future(tp)
        self.log_manager.preferred_dirs[tp] = destination
        partition = self.partitions.get(tp)
        if partition is None:
            return ErrorCode.replica_not_available
        self.log_manager.preferred_dirs.pop(tp, None)
        if self.log_manager.dir_of(partition.log) == destination:
            return ErrorCode.none
        if self.log_manager.offline_dirs:
            # As Kafka: no future log while a directory is offline, which may hold one.
            return ErrorCode.kafka_storage_error
        try:
            self.moves.start(tp, destination)
        except OSError:
            return ErrorCode.kafka_storage_error
        return ErrorCode.none

    def storage_failed(self, partition: Partition, exc: OSError) -> None:
        """An IO error on a partition's log: its directory fails."""
        self.log_manager.dir_failed(self.log_manager.dir_of(partition.log), exc)

    def _dir_failed(self, path: Path, lost: list[TopicPartition],
                    lost_futures: list[TopicPartition]) -> None:
        """A log directory failed: its partitions go offline here (the others serve on),
        and the cluster is told."""
        for tp in lost:
            self.partitions.pop(tp, None)
            self._take_offline(tp)
            self._stop_fetching(tp)
            # Produces waiting on it are answered, fetches woken.
            self._partition_changed(tp)
        log.error("stopped serving %d partition(s) and %d move(s) of failed log directory "
                  "%s", len(lost), len(lost_futures), path)
        self._report_offline()

    def _lost_with_a_dir(self, tp: TopicPartition) -> bool:
        """Whether a partition with no log here may have had one in a directory that is
        offline (it failed, or was unusable at start). As Kafka refuses to create such
        a log, it is not made again, empty, elsewhere (an empty replica in the ISR could
        be elected, and the old one would be a duplicate once the directory is back):
        it goes offline and the controller moves on without it. Kafka still creates the
        replicas its controller marks as new; partition states in ZooKeeper do not say
        which are, so while a directory is offline this broker takes no new replica."""
        return bool(self.log_manager.offline_dirs) and tp not in self.log_manager.logs

    def _offline_state(self, tp: TopicPartition, state: PartitionState) -> None:
        """A state for a partition offline here: if it still counts on this replica
        (as leader or in the ISR), the controller did not hear of it yet (a new
        controller, a failure at start, a new partition): tell it, once per state."""
        if ((state.leader == self.broker_id or self.broker_id in state.isr)
                and self._reported.get(tp) != state.partition_epoch):
            self._reported[tp] = state.partition_epoch
            self._report_offline()

    def _take_offline(self, tp: TopicPartition) -> None:
        if tp not in self.offline:
            self.offline.add(tp)
            self._offline_changed()

    def _offline_changed(self) -> None:
        if self.on_offline_changed is not None:
            self.on_offline_changed(self.offline)

    def _report_offline(self) -> None:
        if self.on_offline is not None and self.offline:
            self.on_offline(sorted(self.offline))

    def broker_configs_changed(self, image: MetadataImage) -> None:
        """Dynamic broker configs changed: they are the topics' defaults, so every log
        takes its topic's configs again, as Kafka reconfigures its logs."""
        self.config.set_dynamic(*image.dynamic_broker_configs(self.broker_id))
        self._set_quota_bounds()
        for topic in image.topics.values():
            self.update_config(topic)

    def _set_throttles(self, partition: Partition, config: TopicConfig) -> None:
        """Whether this broker's replica of the partition is throttled, as leader and as
        follower (read once per config change, not per fetch)."""
        partition.leader_throttled = throttles(
            config["leader.replication.throttled.replicas"], partition.index, self.broker_id)
        partition.follower_throttled = throttles(
            config["follower.replication.throttled.replicas"], partition.index, self.broker_id)

    def _set_quota_bounds(self) -> None:
        self.leader_quota.set_bound(
            self.config.broker_value("leader.replication.throttled.rate")[0])
        self.follower_quota.set_bound(
            self.config.broker_value("follower.replication.throttled.rate")[0])
        self.moves.quota.set_bound(
            self.config.broker_value("replica.alter.log.dirs.io.max.bytes.per.second")[0])

    def update_config(self, topic: TopicMetadata) -> None:
        config = self.topic_config(topic)
        for (name, index), partition in self.partitions.items():
            if name == topic.name:
                partition.log.config_changed(config)
                self._set_throttles(partition, config)
                # min.insync.replicas may have changed what acks=all waits for.
                if partition.maybe_increment_high_watermark():
                    self.notify((name, index))
                self.delayed_produce.check((name, index))

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def missing_error(self, topic: str, partition: int) -> ErrorCode:
        """How a request for a partition not served here is answered: KAFKA_STORAGE_ERROR
        if its log directory failed (clients refresh their metadata and go to the new
        leader), else UNKNOWN_TOPIC_OR_PARTITION."""
        return (ErrorCode.kafka_storage_error if (topic, partition) in self.offline
                else ErrorCode.unknown_topic_or_partition)

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: p.high_watermark for tp, p in self.partitions.items()}

    # ---------------------------------------------------------------- leader
    def record_follower_fetch(self, partition: Partition, replica_id: int, fetch_offset: int,
                              log_start_offset: int, leader_end: int) -> None:
        """A follower fetched: its progress may move the HW and let it rejoin the ISR."""
        if partition.record_follower_fetch(replica_id, fetch_offset, log_start_offset,
                                           leader_end):
            self._partition_changed((partition.topic, partition.index))
        self._propose_expansion(partition, replica_id)

    def _propose_expansion(self, partition: Partition, replica_id: int) -> bool:
        proposal = partition.propose_isr_expansion(replica_id)
        if proposal is None:
            return False
        log.info("%s: follower %d caught up (log end %d, high watermark %d)", partition.name,
                 replica_id, partition.followers[replica_id].log_end_offset,
                 partition.high_watermark)
        self._spawn(self._change_isr(partition, proposal))
        return True

    def _maybe_expand_isr(self, partition: Partition) -> None:
        """Admit a caught-up follower that no fetch will show again.

        A follower in a fetch session names a partition only when its own position
        changes: one that caught up while its leader could not admit it (an ISR
        change in flight, the follower's registration not seen yet) may not name it
        again while the partition is quiet. So whatever can end such a wait (an ISR
        change settled, a new state, a broker joining) checks again here.
        """
        if not partition.is_leader or partition.pending_isr is not None:
            return
        tp = (partition.topic, partition.index)
        # Only a follower still fetching the partition: what the leader knows of its
        # position is then current (else a follower cut off would be let back in on the
        # strength of a position it reached before).
        since = self.clock() - self._session_freshness_s
        for replica, follower in partition.followers.items():
            if replica in partition.isr:
                continue
            wanted = self.fetch_sessions.position(tp, replica, since)
            if wanted is None:
                continue
            if follower.log_end_offset != wanted.fetch_offset and _counts(partition, wanted):
                # What this leader recorded of it is stale or missing (it named the
                # partition before this broker led it, or before its position was
                # reset): its session's fetches count the partition where the session
                # holds it, as a fetch naming it would (which records the fetch and
                # proposes admitting the follower). A quiet partition is never named
                # again, so without this it waited for new data.
                self.record_follower_fetch(partition, replica, wanted.fetch_offset,
                                           getattr(wanted, "log_start_offset", -1),
                                           partition.log_end_offset)
                if partition.pending_isr is not None:
                    return
            elif self._propose_expansion(partition, replica):
                return

    def brokers_changed(self) -> None:
        """Brokers joined, left or began shutting down: which followers may be in an ISR
        changed (a rare event: every partition led here is looked at)."""
        for partition in self.partitions.values():
            self._maybe_expand_isr(partition)

    def shrink_isrs(self) -> None:
        """Drop followers that have not caught up for replica.lag.time.max.ms, and admit
        caught-up ones whose admission failed (ZooKeeper unreachable).

        High watermarks are checked again first: a follower outside the ISR that was
        caught up holds the HW only until the lag time passes or its broker dies, and
        neither is an event that would move it (a producer whose acks=all request
        waits on that HW sends nothing more, and the follower may not fetch again).
        """
        for tp, partition in self.partitions.items():
            if partition.maybe_increment_high_watermark():
                self._partition_changed(tp)
            proposal = partition.propose_isr_shrink()
            if proposal is not None:
                log.info("%s: followers %s fell behind (log end %d, high watermark %d)",
                         partition.name, sorted(set(partition.isr) - set(proposal.isr)),
                         partition.log_end_offset, partition.high_watermark)
                self._spawn(self._change_isr(partition, proposal))
            else:
                self._maybe_expand_isr(partition)

    async def _change_isr(self, partition: Partition, proposal: PartitionState) -> None:
        tp = (partition.topic, partition.index)
        if self._alter_isr is None:
            partition.isr_change_failed(proposal)  # alone: nobody to ask
            return
        try:
            written = await self._alter_isr(tp, proposal)
        except Exception:
            log.warning("%s: ISR change to %s failed", partition.name, list(proposal.isr),
                        exc_info=True)
            partition.isr_change_failed(proposal)
            return
        if self.partitions.get(tp) is partition:
            before = len(partition.isr)
            partition.isr_changed(proposal, written)
            self.isr_shrinks += len(partition.isr) < before
            self.isr_expands += len(partition.isr) > before
            # A smaller ISR may let the HW move, or leave acks=all writes short of
            # min.insync.replicas.
            self._partition_changed(tp)
            self._maybe_expand_isr(partition)

    def _partition_changed(self, tp: TopicPartition) -> None:
        self.notify(tp)
        self.delayed_produce.check(tp)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run_isr_checks(self) -> None:
        """Kafka's isr-expiration task: every half of replica.lag.time.max.ms."""
        while True:
            await asyncio.sleep(self._lag_max_s / 2)
            self.shrink_isrs()

    async def stop(self) -> None:
        await self.moves.stop()
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        for fetcher in fetchers:
            await fetcher.stop()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------- acks=all purgatory
    async def wait_for_acks(self, partition: Partition, required_offset: int,
                            timeout_s: float) -> ErrorCode:
        """acks=all for one write ending before ``required_offset`` (the group
        coordinator's offset commits); produce requests wait for all their partitions
        together in ``delayed_produce``."""
        (error,) = await self.delayed_produce.wait([(partition, required_offset)], timeout_s)
        return error

    # --------------------------------------------------------- fetch purgatory
    def notify(self, tp: TopicPartition) -> None:
        """Wake fetches parked on ``tp`` (new data, a moved high watermark, or the
        partition went away), and mark it in the fetch sessions holding it."""
        self.fetch_sessions.touched(tp)
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


def _counts(partition: Partition, wanted: Any) -> bool:
    """Whether a fetch as a session holds it counts as the follower's position (as
    broker.fetch reads one): made for this leadership, from a log that does not part
    from this leader's."""
    if getattr(wanted, "current_leader_epoch", -1) != partition.leader_epoch:
        return False
    last_fetched_epoch = getattr(wanted, "last_fetched_epoch", -1)
    try:
        return (last_fetched_epoch < 0
                or partition.diverging_epoch(last_fetched_epoch, wanted.fetch_offset) is None)
    except OffsetOutOfRange:
        return False
