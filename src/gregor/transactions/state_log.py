"""``__transaction_state``: the coordinator's record of every transactional id.

A compacted internal topic, replicated like ``__consumer_offsets``
(``transaction.state.log.replication.factor`` replicas, at least
``transaction.state.log.min.isr`` of them in sync for a write): the latest record
per transactional id is its state, so reading a partition when this broker becomes
its leader rebuilds what it coordinates. Records use Kafka's layouts
(TransactionLogKey v0 and TransactionLogValue v0), so the topic reads the same as
Kafka's.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import AsyncIterator

from gregor.cluster.controller import ClusterAdmin, ControllerError
from gregor.cluster.replica_manager import ReplicaManager
from gregor.cluster.znodes import BrokerRegistration
from gregor.config import BrokerConfig
from gregor.groups.offsets_store import partition_for, read_log
from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_codec import Record, encode_batch
from gregor.storage.log import LogAppendError
from gregor.transactions.metadata import TransactionMetadata, TransactionState

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
# Kafka's transaction.state.log.segment.bytes default.
_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
# Records read between two yields to the event loop while a partition loads.
_LOAD_CHUNK = 1000
_KEY_VERSION = 0
_VALUE_VERSION = 0
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")  # last update, start


class StateLogError(Exception):
    """A write to ``__transaction_state`` failed; ``error`` is what the client sees."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


def _string(text: str) -> bytes:
    raw = text.encode()
    return _I16.pack(len(raw)) + raw


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(_KEY_VERSION) + _string(transactional_id)


def decode_key(key: bytes) -> str:
    (version,) = _I16.unpack_from(key, 0)
    if version != _KEY_VERSION:
        raise ValueError(f"unknown transaction log key version {version}")
    (length,) = _I16.unpack_from(key, 2)
    return key[4 : 4 + length].decode()


def encode_value(meta: TransactionMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(index)
    out = bytearray(_VALUE_HEAD.pack(_VALUE_VERSION, meta.producer_id, meta.producer_epoch,
                                     meta.timeout_ms, meta.state))
    out += _I32.pack(len(by_topic))
    for topic, indexes in by_topic.items():
        out += _string(topic) + _I32.pack(len(indexes))
        out += b"".join(_I32.pack(i) for i in indexes)
    out += _TIMES.pack(meta.last_update_ms, meta.start_ms)
    return bytes(out)


def decode_value(transactional_id: str, value: bytes) -> TransactionMetadata:
    version, producer_id, epoch, timeout_ms, status = _VALUE_HEAD.unpack_from(value, 0)
    if version != _VALUE_VERSION:
        # Version 1 (flexible) is Kafka's newer layout; gregor writes only version 0.
        raise ValueError(f"unsupported transaction log value version {version}")
    pos = _VALUE_HEAD.size
    (topics,) = _I32.unpack_from(value, pos)
    pos += 4
    partitions = set()
    for _ in range(max(topics, 0)):
        (length,) = _I16.unpack_from(value, pos)
        topic = value[pos + 2 : pos + 2 + length].decode()
        pos += 2 + length
        (count,) = _I32.unpack_from(value, pos)
        pos += 4
        for _ in range(count):
            partitions.add((topic, _I32.unpack_from(value, pos)[0]))
            pos += 4
    last_update, start = _TIMES.unpack_from(value, pos)
    return TransactionMetadata(transactional_id, producer_id, epoch, timeout_ms,
                               TransactionState(status), frozenset(partitions), start,
                               last_update)


class TransactionStateLog:
    def __init__(self, config: BrokerConfig, controller: ClusterAdmin,
                 replica_manager: ReplicaManager) -> None:
        self.controller = controller
        self.replica_manager = replica_manager
        self._configured_partitions = config["transaction.state.log.num.partitions"]
        self._replication_factor = config["transaction.state.log.replication.factor"]
        self._min_isr = config["transaction.state.log.min.isr"]
        self._broker_id = config.node_id

    def exists(self) -> bool:
        return TRANSACTION_STATE_TOPIC in self.controller.image.topics

    @property
    def num_partitions(self) -> int:
        """The topic's real partition count once it exists: the mapping must never change."""
        topic = self.controller.image.topics.get(TRANSACTION_STATE_TOPIC)
        return len(topic.partitions) if topic else self._configured_partitions

    def partition_for(self, transactional_id: str) -> int:
        """Kafka's mapping (as for groups)."""
        return partition_for(transactional_id, self.num_partitions)

    def coordinator_for(self, transactional_id: str) -> BrokerRegistration | None:
        topic = self.controller.image.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return None
        leader = topic.partitions[self.partition_for(transactional_id)].leader
        return self.controller.image.brokers.get(leader)

    def leads(self, transactional_id: str) -> bool:
        coordinator = self.coordinator_for(transactional_id)
        return coordinator is not None and coordinator.broker_id == self._broker_id

    async def ensure_topic(self) -> bool:
        """Create the topic on first use, as Kafka does on the first transactional
        lookup; whether it was created now."""
        if self.exists():
            return False
        replication = min(self._replication_factor, len(self.controller.live_brokers))
        configs = {**_TOPIC_CONFIGS,
                   "min.insync.replicas": str(min(self._min_isr, replication))}
        try:
            await self.controller.create_topic(TRANSACTION_STATE_TOPIC,
                                               self._configured_partitions, replication,
                                               configs, internal=True)
        except ControllerError as exc:
            raise StateLogError(ErrorCode.coordinator_not_available,
                                f"cannot create {TRANSACTION_STATE_TOPIC}: {exc}") from exc
        return True

    async def write(self, meta: TransactionMetadata, coordinator_epoch: int) -> None:
        """Append the state and wait until every in-sync replica has it (acks=all)."""
        await self._append(meta.transactional_id, encode_value(meta), coordinator_epoch)

    async def write_tombstone(self, transactional_id: str, coordinator_epoch: int) -> None:
        """Forget the id (compaction then removes its records)."""
        await self._append(transactional_id, None, coordinator_epoch)

    async def _append(self, transactional_id: str, value: bytes | None,
                      coordinator_epoch: int) -> None:
        """As Kafka's appendTransactionToLog: only while this broker still leads the
        partition at the epoch it loaded it with (a newer leader may have moved on)."""
        index = self.partition_for(transactional_id)
        partition = self.replica_manager.get(TRANSACTION_STATE_TOPIC, index)
        if partition is None or partition.leader_epoch != coordinator_epoch:
            raise StateLogError(ErrorCode.not_coordinator,
                                f"{TRANSACTION_STATE_TOPIC}-{index} is not led here at "
                                f"epoch {coordinator_epoch}")
        batch = encode_batch([Record(offset=0, timestamp=int(time.time() * 1000),
                                     key=encode_key(transactional_id), value=value)])
        try:
            partition.append_as_leader(batch, required_acks=-1)
        except LogAppendError as exc:
            raise StateLogError(_coordinator_error(exc.error), str(exc)) from exc
        self.replica_manager.notify((TRANSACTION_STATE_TOPIC, index))
        error = await self.replica_manager.wait_for_acks(partition, partition.log_end_offset,
                                                         30.0)
        if error != ErrorCode.none:
            raise StateLogError(_coordinator_error(error),
                                f"state of {transactional_id} not replicated: {error!r}")

    async def read_partition(self, index: int
                             ) -> AsyncIterator[tuple[str, TransactionMetadata | None]]:
        """Every record of one partition led here, oldest first (None: a tombstone),
        yielding to the event loop now and then so a long log does not stall it."""
        partition = self.replica_manager.get(TRANSACTION_STATE_TOPIC, index)
        if partition is None or not partition.is_leader:
            return
        count = 0
        for _, records in read_log(partition):
            for record in records:
                if record.key is None:
                    continue
                txn_id = decode_key(record.key)
                yield txn_id, (None if record.value is None
                               else decode_value(txn_id, record.value))
            count += len(records)
            if count >= _LOAD_CHUNK:
                count = 0
                await asyncio.sleep(0)


def _coordinator_error(error: ErrorCode) -> ErrorCode:
    """What a producer is told when its state could not be written: Kafka's mapping in
    TransactionStateManager.appendTransactionToLog."""
    if error == ErrorCode.not_leader_or_follower:
        return ErrorCode.not_coordinator
    return ErrorCode.coordinator_not_available
