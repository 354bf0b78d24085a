"""The internal topic ``__consumer_offsets``: where committed offsets and group state live.

It is an ordinary compacted topic on the same log storage as user topics, so it
gets the same durability (a ``kill -9`` loses nothing acknowledged) and the same
recovery. Each group maps to one partition (Kafka's formula, so a group lands on
the same partition number as in Kafka); that partition's leader is the group's
coordinator, and reading the partition from the start rebuilds its groups.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator, Sequence

from gregor.cluster.controller import ClusterAdmin, ControllerError
from gregor.cluster.partition import Partition
from gregor.cluster.replica_manager import ReplicaManager
from gregor.cluster.znodes import BrokerRegistration
from gregor.config import BrokerConfig
from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_batch import BatchHeader, InvalidRecordBatch, read_header
from gregor.protocol.record_codec import Record, decode_records, encode_batch, iter_batches
from gregor.storage.log import AppendOrigin, LogAppendError

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's offsets.topic.segment.bytes default: smaller segments than user topics, so
# compaction can reclaim superseded commits sooner.
_SEGMENT_BYTES = 100 * 1024 * 1024
_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(_SEGMENT_BYTES)}
_LOAD_CHUNK_BYTES = 1024 * 1024


class StoreError(Exception):
    """A write to ``__consumer_offsets`` failed; ``error`` is what the client should see.

    ``too_large`` tells a write that can never succeed (one record batch over the
    topic's max.message.bytes) from a transient failure.
    """

    def __init__(self, error: ErrorCode, message: str, too_large: bool = False) -> None:
        super().__init__(message)
        self.error = error
        self.too_large = too_large


@functools.lru_cache(maxsize=4096)
def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: 31-based over UTF-16 code units, as a signed int32.

    Cached: a transactional producer's every produce request and transaction step
    looks its id's coordinator partition up, and the loop costs microseconds per call
    (13% of the broker's time under bench.txn_bench before the cache)."""
    h = 0
    encoded = text.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        h = (31 * h + ((encoded[i] << 8) | encoded[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % partitions`` (abs maps MIN_VALUE to 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


class OffsetsStore:
    def __init__(self, config: BrokerConfig, controller: ClusterAdmin,
                 replica_manager: ReplicaManager) -> None:
        self.controller = controller
        self.replica_manager = replica_manager
        self._configured_partitions = config["offsets.topic.num.partitions"]
        self._replication_factor = config["offsets.topic.replication.factor"]
        self._broker_id = config.node_id

    @property
    def num_partitions(self) -> int:
        """The topic's real partition count once it exists: the mapping must never change."""
        topic = self.controller.image.topics.get(OFFSETS_TOPIC)
        return len(topic.partitions) if topic else self._configured_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def coordinator_for(self, group_id: str) -> BrokerRegistration | None:
        """The broker leading the group's partition: the group's coordinator."""
        topic = self.controller.image.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return None
        leader = topic.partitions[self.partition_for(group_id)].leader
        return self.controller.image.brokers.get(leader)

    def leads(self, group_id: str) -> bool:
        """Whether this broker coordinates the group (or nothing decides yet: no topic)."""
        topic = self.controller.image.topics.get(OFFSETS_TOPIC)
        return topic is None or (
            topic.partitions[self.partition_for(group_id)].leader == self._broker_id)

    def exists(self) -> bool:
        return OFFSETS_TOPIC in self.controller.image.topics

    async def ensure_topic(self) -> None:
        """Create the topic on first use, as Kafka does when a group first looks up its
        coordinator, so brokers that never see a group carry no empty partitions."""
        if self.exists():
            return
        # Kafka refuses to create it until offsets.topic.replication.factor brokers are
        # up; capping it at the live brokers lets a single broker (and a cluster
        # started one broker at a time) serve groups at once.
        replication = min(self._replication_factor, len(self.controller.live_brokers))
        try:
            await self.controller.create_topic(OFFSETS_TOPIC, self._configured_partitions,
                                               replication, _TOPIC_CONFIGS, internal=True)
        except ControllerError as exc:
            raise StoreError(ErrorCode.coordinator_not_available,
                             f"cannot create {OFFSETS_TOPIC}: {exc}") from exc

    def append(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]],
               producer: tuple[int, int] | None = None) -> None:
        """Write ``(key, value)`` records (value None: tombstone) to the group's partition.

        With a ``(producer id, epoch)`` they are written as that producer's
        transactional batch (TxnOffsetCommit), which its transaction's marker in this
        partition commits or aborts, as Kafka does.
        """
        if not records:
            return
        index = self.partition_for(group_id)
        partition = self.replica_manager.get(OFFSETS_TOPIC, index)
        if partition is None:
            raise StoreError(ErrorCode.coordinator_not_available,
                             f"{OFFSETS_TOPIC}-{index} is not hosted here")
        now_ms = int(time.time() * 1000)
        pid, epoch = producer if producer is not None else (-1, -1)
        batch = encode_batch([Record(offset=i, timestamp=now_ms, key=key, value=value)
                              for i, (key, value) in enumerate(records)],
                             producer_id=pid, producer_epoch=epoch,
                             is_transactional=producer is not None)
        origin = AppendOrigin.CLIENT if producer is None else AppendOrigin.TRANSACTIONAL_CLIENT
        try:
            partition.append_as_leader(batch, required_acks=-1, origin=origin)
        except LogAppendError as exc:
            raise StoreError(_STORE_ERRORS.get(exc.error, ErrorCode.unknown_server_error),
                             str(exc), too_large=exc.error == ErrorCode.message_too_large
                             ) from exc
        self.replica_manager.notify((OFFSETS_TOPIC, index))

    async def replicated(self, group_id: str, timeout_s: float) -> ErrorCode:
        """Wait until what was written for the group is on every in-sync replica.

        Kafka commits offsets with acks=all (``offsets.commit.required.acks``): an
        acknowledged commit survives the loss of its coordinator's broker. Alone, the
        high watermark is already there and nothing waits.
        """
        partition = self.replica_manager.get(OFFSETS_TOPIC, self.partition_for(group_id))
        if partition is None:
            return ErrorCode.not_coordinator
        error = await self.replica_manager.wait_for_acks(partition, partition.log_end_offset,
                                                         timeout_s)
        return _STORE_ERRORS.get(error, error)

    def read(self, index: int) -> Iterator[tuple[BatchHeader, list[Record]]]:
        """Every batch of one partition with its records, oldest first, up to its log end.

        Only a leader reads (to coordinate the partition's groups), and everything in
        a leader's log is what its followers will hold: reading to the log end, as
        Kafka's GroupMetadataManager does, keeps commits a new leader's high watermark
        has not caught up with yet.

        A corrupt batch (which recovery should already have truncated away) is skipped
        with an error in the log rather than stopping the load of every other group.
        """
        partition = self.replica_manager.get(OFFSETS_TOPIC, index)
        if partition is not None:
            yield from read_log(partition)


def read_log(partition: Partition) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Every batch of a partition's log with its records, oldest first, up to its log
    end: what a coordinator reads back to load its state (never the hot path). A corrupt
    batch is skipped with an error in the log rather than stopping the load."""
    position = partition.log_start_offset
    while True:
        region = partition.log.read(position, _LOAD_CHUNK_BYTES, partition.log_end_offset)
        if region is None:
            return
        for batch in iter_batches(region.read()):
            try:
                header, records = decode_records(batch)
            except InvalidRecordBatch as exc:
                header = read_header(batch)
                log.error("%s: skipping unreadable batch at offset %d: %s",
                          partition.name, header.base_offset, exc)
                records = []
            yield header, records
            position = header.last_offset + 1


# Kafka's GroupMetadataManager maps storage errors to errors group clients understand.
_STORE_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
}
