"""TransactionCoordinator: transactional ids, their producer epochs and their transactions.

One broker alone coordinates every transactional id (in a cluster, transactions
are refused until the coordinator can send markers to other brokers with
WriteTxnMarkers). Each change of a transaction's state is written to
``__transaction_state`` before it takes effect, and ending a transaction goes
through Prepare{Commit,Abort} (durable), then a marker in every partition the
transaction wrote to, then Complete{Commit,Abort}: a broker restarted between the
two finishes the markers from the log.

A new producer with the same transactional id (InitProducerId) bumps the epoch,
which fences the old one, and aborts what that one left open; a transaction open
longer than its timeout is aborted the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterable

from gregor.cluster.controller import ClusterAdmin
from gregor.cluster.replica_manager import ReplicaManager
from gregor.config import BrokerConfig
from gregor.groups.coordinator import GroupCoordinator
from gregor.groups.offsets_store import OFFSETS_TOPIC
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.control_record import encode_marker
from gregor.protocol.errors import ErrorCode
from gregor.storage.log import AppendOrigin, LogAppendError
from gregor.transactions.metadata import (
    NO_START,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
)
from gregor.transactions.state_log import (
    TRANSACTION_STATE_TOPIC,
    StateLogError,
    TransactionStateLog,
)

log = logging.getLogger(__name__)

# Kafka bumps to a new producer id rather than reach the largest epoch.
_MAX_EPOCH = 32767 - 1


# PRODUCER_FENCED exists from these versions on (KIP-588); older ones say
# INVALID_PRODUCER_EPOCH instead.
_FIRST_FENCED_VERSION = {ApiKey.ADD_PARTITIONS_TO_TXN: 2, ApiKey.ADD_OFFSETS_TO_TXN: 2,
                         ApiKey.END_TXN: 2, ApiKey.TXN_OFFSET_COMMIT: 3,
                         ApiKey.INIT_PRODUCER_ID: 4}


def client_error(error: ErrorCode, api_key: ApiKey, version: int) -> ErrorCode:
    """The error as this request version can say it."""
    if error == ErrorCode.producer_fenced and version < _FIRST_FENCED_VERSION[api_key]:
        return ErrorCode.invalid_producer_epoch
    return error


class TransactionError(Exception):
    """A request refused with a Kafka error code."""

    def __init__(self, error: ErrorCode, message: str = "") -> None:
        super().__init__(message or error.name)
        self.error = error


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    def __init__(self, config: BrokerConfig, controller: ClusterAdmin,
                 replica_manager: ReplicaManager, groups: GroupCoordinator) -> None:
        self.controller = controller
        self.replica_manager = replica_manager
        self.groups = groups
        self.state_log = TransactionStateLog(config, controller, replica_manager)
        self.max_timeout_ms = config["transaction.max.timeout.ms"]
        self.expiration_ms = config["transactional.id.expiration.ms"]
        self.transactions: dict[str, TransactionMetadata] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Load every transactional id from the log, and finish the transactions a
        stop left between Prepare and Complete (their markers may be missing)."""
        for txn_id, meta in self.state_log.read_all():
            if meta is None:
                self.transactions.pop(txn_id, None)
            else:
                self.transactions[txn_id] = meta
        for meta in list(self.transactions.values()):
            if meta.state.is_prepare:
                log.info("completing transaction of %s left in %s", meta.transactional_id,
                         meta.state.name)
                async with self._lock(meta.transactional_id):
                    await self._complete(meta)

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        return self._locks.setdefault(transactional_id, asyncio.Lock())

    async def _write(self, meta: TransactionMetadata) -> TransactionMetadata:
        try:
            await self.state_log.write(meta)
        except StateLogError as exc:
            raise TransactionError(exc.error, str(exc)) from exc
        self.transactions[meta.transactional_id] = meta
        return meta

    async def _check_coordinator(self, transactional_id: str) -> None:
        if not transactional_id:
            raise TransactionError(ErrorCode.invalid_request, "empty transactional id")
        try:
            await self.state_log.ensure_topic()
        except StateLogError as exc:
            raise TransactionError(exc.error, str(exc)) from exc
        if not self.state_log.leads(transactional_id):
            raise TransactionError(ErrorCode.not_coordinator)

    # ----------------------------------------------------------- InitProducerId
    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               producer_id: int = -1, producer_epoch: int = -1
                               ) -> tuple[int, int]:
        """The producer id and epoch for a (re)starting transactional producer."""
        await self._check_coordinator(transactional_id)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            raise TransactionError(
                ErrorCode.invalid_transaction_timeout,
                f"transaction.timeout.ms {timeout_ms} is outside (0, {self.max_timeout_ms}] "
                "(transaction.max.timeout.ms)")
        async with self._lock(transactional_id):
            meta = self.transactions.get(transactional_id)
            now = _now_ms()
            if meta is None:
                new_id = await self.controller.allocate_producer_id()
                meta = await self._write(TransactionMetadata(
                    transactional_id, new_id, 0, timeout_ms, TransactionState.EMPTY,
                    last_update_ms=now))
                return meta.producer_id, meta.producer_epoch
            if producer_id >= 0 and (producer_id, producer_epoch) != (
                    meta.producer_id, meta.producer_epoch):
                # KIP-360: only the current producer may ask to keep its id.
                raise TransactionError(ErrorCode.producer_fenced,
                                       f"{transactional_id} is used by a newer producer")
            if meta.state.is_prepare:
                meta = await self._complete(meta)
            elif meta.state == TransactionState.ONGOING:
                # The previous producer's transaction: aborted under the new epoch,
                # which fences that producer everywhere the markers go.
                meta = await self._end(meta, commit=False, epoch=self._next_epoch(meta))
            producer_id, epoch = meta.producer_id, self._next_epoch(meta)
            if epoch > _MAX_EPOCH:
                producer_id, epoch = await self.controller.allocate_producer_id(), 0
            meta = await self._write(dataclasses.replace(
                meta, producer_id=producer_id, producer_epoch=epoch, timeout_ms=timeout_ms,
                state=TransactionState.EMPTY, partitions=frozenset(), start_ms=NO_START,
                last_update_ms=now))
            return meta.producer_id, meta.producer_epoch

    @staticmethod
    def _next_epoch(meta: TransactionMetadata) -> int:
        return meta.producer_epoch + 1

    # ------------------------------------------------------- adding partitions
    def _current(self, transactional_id: str, producer_id: int,
                 producer_epoch: int) -> TransactionMetadata:
        """The id's state, if this producer (id and epoch) is the one that holds it."""
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise TransactionError(ErrorCode.invalid_producer_id_mapping,
                                   f"{transactional_id} is not held by producer {producer_id}")
        if producer_epoch != meta.producer_epoch:
            raise TransactionError(ErrorCode.producer_fenced,
                                   f"producer {producer_id} epoch {producer_epoch} is fenced "
                                   f"by epoch {meta.producer_epoch}")
        return meta

    async def add_partitions(self, transactional_id: str, producer_id: int,
                             producer_epoch: int, partitions: Iterable[TopicPartition]) -> None:
        """AddPartitionsToTxn / AddOffsetsToTxn: the transaction will write there."""
        await self._check_coordinator(transactional_id)
        async with self._lock(transactional_id):
            meta = self._current(transactional_id, producer_id, producer_epoch)
            if meta.state.is_prepare:
                raise TransactionError(ErrorCode.concurrent_transactions)
            added = meta.partitions | frozenset(partitions)
            if meta.state == TransactionState.ONGOING and added == meta.partitions:
                return
            now = _now_ms()
            ongoing = meta.state == TransactionState.ONGOING
            await self._write(dataclasses.replace(
                meta, state=TransactionState.ONGOING, partitions=added,
                start_ms=meta.start_ms if ongoing else now, last_update_ms=now))

    def verify_partition(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         tp: TopicPartition) -> ErrorCode | None:
        """Whether a transactional produce may write to ``tp`` (KIP-890's check): only
        into a partition its ongoing transaction added, or the LSO would stall for
        want of a marker."""
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if producer_epoch < meta.producer_epoch:
            return ErrorCode.invalid_producer_epoch
        if (producer_epoch != meta.producer_epoch or meta.state != TransactionState.ONGOING
                or tp not in meta.partitions):
            return ErrorCode.invalid_txn_state
        return None

    def check_offsets_producer(self, transactional_id: str, producer_id: int,
                               producer_epoch: int, group_partition: int) -> ErrorCode | None:
        """TxnOffsetCommit: the producer holds the id and added the group's offsets."""
        try:
            meta = self._current(transactional_id, producer_id, producer_epoch)
        except TransactionError as exc:
            return exc.error
        if (meta.state != TransactionState.ONGOING
                or (OFFSETS_TOPIC, group_partition) not in meta.partitions):
            return ErrorCode.invalid_txn_state
        return None

    # ------------------------------------------------------------------ EndTxn
    async def end_transaction(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, commit: bool) -> None:
        await self._check_coordinator(transactional_id)
        async with self._lock(transactional_id):
            meta = self._current(transactional_id, producer_id, producer_epoch)
            done = (TransactionState.COMPLETE_COMMIT if commit
                    else TransactionState.COMPLETE_ABORT)
            if meta.state == TransactionState.ONGOING:
                await self._end(meta, commit, meta.producer_epoch)
            elif meta.state == done:
                return  # a retry of the request that ended it
            elif meta.state == (TransactionState.PREPARE_COMMIT if commit
                                else TransactionState.PREPARE_ABORT):
                await self._complete(meta)
            else:
                raise TransactionError(ErrorCode.invalid_txn_state,
                                       f"cannot {'commit' if commit else 'abort'} "
                                       f"{transactional_id} in state {meta.state.name}")

    async def _end(self, meta: TransactionMetadata, commit: bool,
                   epoch: int) -> TransactionMetadata:
        prepared = await self._write(dataclasses.replace(
            meta, producer_epoch=epoch, last_update_ms=_now_ms(),
            state=TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT))
        return await self._complete(prepared)

    async def _complete(self, meta: TransactionMetadata) -> TransactionMetadata:
        """Write the markers of a prepared transaction, then record it complete."""
        commit = meta.state == TransactionState.PREPARE_COMMIT
        self._write_markers(meta, commit)
        return await self._write(dataclasses.replace(
            meta, partitions=frozenset(), last_update_ms=_now_ms(),
            state=TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT))

    def _write_markers(self, meta: TransactionMetadata, commit: bool) -> None:
        now = _now_ms()
        coordinator_epoch = self._coordinator_epoch(meta.transactional_id)
        for topic, index in sorted(meta.partitions):
            partition = self.replica_manager.get(topic, index)
            if partition is None:
                log.warning("transaction of %s: %s-%d is gone; no marker written",
                            meta.transactional_id, topic, index)
                continue
            marker = encode_marker(meta.producer_id, meta.producer_epoch, commit,
                                   coordinator_epoch, now)
            try:
                partition.append_as_leader(marker, required_acks=-1,
                                           origin=AppendOrigin.COORDINATOR)
            except LogAppendError as exc:
                log.error("transaction of %s: marker not written to %s-%d: %s",
                          meta.transactional_id, topic, index, exc)
                continue
            self.replica_manager.notify((topic, index))
        if any(topic == OFFSETS_TOPIC for topic, _ in meta.partitions):
            self.groups.complete_transactional_offsets(meta.producer_id, commit)

    def _coordinator_epoch(self, transactional_id: str) -> int:
        partition = self.replica_manager.get(TRANSACTION_STATE_TOPIC,
                                             self.state_log.partition_for(transactional_id))
        return 0 if partition is None else partition.leader_epoch

    # ------------------------------------------------------------- describing
    def describe(self, transactional_id: str) -> TransactionMetadata:
        """DescribeTransactions: one transactional id's state, as coordinated here."""
        if not self.state_log.leads(transactional_id):
            raise TransactionError(ErrorCode.not_coordinator)
        meta = self.transactions.get(transactional_id)
        if meta is None:
            raise TransactionError(ErrorCode.transactional_id_not_found)
        return meta

    def list(self, states: set[TransactionState] | None, producer_ids: set[int],
             min_duration_ms: int) -> list[TransactionMetadata]:
        """ListTransactions: the ids coordinated here, filtered as Kafka filters them
        (no filter given: everything; a duration: open at least that long)."""
        now = _now_ms()
        return [meta for meta in self.transactions.values()
                if (states is None or meta.state in states)
                and (not producer_ids or meta.producer_id in producer_ids)
                and (min_duration_ms < 0 or (meta.state == TransactionState.ONGOING
                                             and now - meta.start_ms >= min_duration_ms))]

    # -------------------------------------------------------------- expiration
    async def expire_transactional_ids(self) -> int:
        """Forget ids idle longer than transactional.id.expiration.ms with no transaction
        open (a tombstone in the log); how many. A producer using one again later
        starts afresh, with a new producer id."""
        now = _now_ms()
        expired = 0
        idle = (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT,
                TransactionState.COMPLETE_ABORT)
        for meta in list(self.transactions.values()):
            if meta.state not in idle or now - meta.last_update_ms <= self.expiration_ms:
                continue
            async with self._lock(meta.transactional_id):
                if self.transactions.get(meta.transactional_id) != meta:
                    continue
                try:
                    await self.state_log.write_tombstone(meta.transactional_id)
                except StateLogError as exc:
                    log.warning("cannot expire %s: %s", meta.transactional_id, exc)
                    continue
                del self.transactions[meta.transactional_id]
                expired += 1
        return expired

    # ---------------------------------------------------------------- timeouts
    async def abort_timed_out(self) -> int:
        """Abort (with an epoch bump, fencing the producer) every transaction open
        longer than its transaction.timeout.ms; how many."""
        now = _now_ms()
        aborted = 0
        for meta in list(self.transactions.values()):
            if meta.state != TransactionState.ONGOING or now - meta.start_ms <= meta.timeout_ms:
                continue
            async with self._lock(meta.transactional_id):
                current = self.transactions.get(meta.transactional_id)
                if current != meta:
                    continue
                log.info("aborting transaction of %s: open for %d ms, timeout %d ms",
                         meta.transactional_id, now - meta.start_ms, meta.timeout_ms)
                await self._end(meta, commit=False, epoch=self._next_epoch(meta))
                aborted += 1
        return aborted
