"""TransactionCoordinator: transactional ids, their producer epochs and their transactions.

A transactional id is coordinated by the leader of its ``__transaction_state``
partition: a broker loads a partition's ids when it becomes its leader (until
then they answer COORDINATOR_LOAD_IN_PROGRESS), forgets them when it stops leading
it (NOT_COORDINATOR; the new leader reads them from its replica), and stamps the
partition's leader epoch on its markers as the coordinator epoch. Each change of a
transaction's state is written to ``__transaction_state`` before it takes effect,
and ending a transaction goes through Prepare{Commit,Abort} (durable), then a
marker in every partition the transaction wrote to, sent to each partition's
leader (the marker channel), then Complete{Commit,Abort} once all of them are
acknowledged: a coordinator that restarts or takes over between the two finishes
the markers from the log. So EndTxn is answered once Prepare is written, as
Kafka's is, and the rest is done while the producer starts its next transaction.

A new producer with the same transactional id (InitProducerId) bumps the epoch,
which fences the old one, and aborts what that one left open; a transaction open
longer than its timeout is aborted the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine, Iterable

from gregor.cluster.controller import ClusterAdmin
from gregor.cluster.replica_manager import ReplicaManager
from gregor.config import BrokerConfig
from gregor.groups.coordinator import GroupCoordinator
from gregor.groups.offsets_store import OFFSETS_TOPIC
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.security.inter_broker import ChannelSecurity
from gregor.transactions.marker_channel import CoordinatorFenced, TransactionMarkerChannel
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
from gregor.transactions.verification import TransactionVerifier

log = logging.getLogger(__name__)

# Kafka bumps to a new producer id rather than reach the largest epoch.
_MAX_EPOCH = 32767 - 1
# Kafka's retry.backoff.ms: the pause before markers, or a completion, are written again.
_MARKER_RETRY_BACKOFF_S = 0.1
# The longest pause between attempts after unexpected failures (a failing disk, a bug):
# the pause doubles from the one above, so that such a failure is retried soon but not
# logged ten times a second for as long as it lasts.
_MAX_RETRY_BACKOFF_S = 5.0


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
                 replica_manager: ReplicaManager, groups: GroupCoordinator,
                 broker_address: Callable[[int], tuple[str, int] | None],
                 channel_security: ChannelSecurity | None = None) -> None:
        self.controller = controller
        self.replica_manager = replica_manager
        self.state_log = TransactionStateLog(config, controller, replica_manager)
        self.markers = TransactionMarkerChannel(
            config.node_id, lambda: controller.image, replica_manager, groups, broker_address,
            config["request.timeout.ms"] / 1000, _MARKER_RETRY_BACKOFF_S,
            config.source_address, channel_security)
        # This broker's questions, as a partition leader, to the coordinators of others.
        self.verifier = TransactionVerifier(
            config.node_id, self.state_log, broker_address, config["request.timeout.ms"] / 1000,
            config.source_address, channel_security)
        self.max_timeout_ms = config["transaction.max.timeout.ms"]
        self.expiration_ms = config["transactional.id.expiration.ms"]
        self._in_cluster = config.zookeeper_mode
        self.transactions: dict[str, TransactionMetadata] = {}
        # __transaction_state partitions coordinated here, by the coordinator epoch
        # (their leader epoch) they were loaded at; those still being read.
        self.epochs: dict[int, int] = {}
        self.loading: set[int] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task] = set()

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Alone, the broker leads every partition of the log: load them all, and
        finish the transactions a stop left between Prepare and Complete, before
        serving. In a cluster partitions load as their leadership arrives."""
        if self._in_cluster or not self.state_log.exists():
            return
        for index in range(self.state_log.num_partitions):
            partition = self.replica_manager.get(TRANSACTION_STATE_TOPIC, index)
            if partition is not None:
                self.epochs[index] = partition.leader_epoch
                self.loading.add(index)
                await self._load(index, partition.leader_epoch)

    def leadership_changed(self, index: int, leading: bool, leader_epoch: int) -> None:
        """This broker started or stopped leading ``__transaction_state`` partition
        ``index`` (Kafka's onElection / onResignation)."""
        if leading and self.epochs.get(index) == leader_epoch:
            return  # an ISR change
        if index in self.epochs:
            self._unload(index)
        if leading:
            self.epochs[index] = leader_epoch
            self.loading.add(index)
            self._spawn(self._load(index, leader_epoch))

    def _unload(self, index: int) -> None:
        del self.epochs[index]
        self.loading.discard(index)
        for txn_id in [t for t in self.transactions if self.state_log.partition_for(t) == index]:
            del self.transactions[txn_id]
        log.info("no longer coordinating the transactions of %s-%d", TRANSACTION_STATE_TOPIC,
                 index)

    async def _load(self, index: int, epoch: int) -> None:
        """Read the partition's ids, then complete its prepared transactions (their
        markers may be missing: the previous coordinator died or moved meanwhile)."""
        loaded: dict[str, TransactionMetadata | None] = {}
        try:
            async for txn_id, meta in self.state_log.read_partition(index):
                loaded[txn_id] = meta
        except Exception:
            log.exception("loading %s-%d failed", TRANSACTION_STATE_TOPIC, index)
            if self.epochs.get(index) == epoch:
                self._unload(index)
            return
        if self.epochs.get(index) != epoch:
            return  # leadership moved on while reading
        self.transactions.update((t, m) for t, m in loaded.items() if m is not None)
        self.loading.discard(index)
        log.info("coordinating %d transactional ids of %s-%d at epoch %d",
                 sum(m is not None for m in loaded.values()), TRANSACTION_STATE_TOPIC, index,
                 epoch)
        prepared = [meta for meta in loaded.values() if meta is not None
                    and meta.state.is_prepare]
        for meta in prepared:
            log.info("completing transaction of %s left in %s", meta.transactional_id,
                     meta.state.name)
        # Side by side: one whose partition has no leader does not hold the others back.
        await asyncio.gather(*(self._complete_prepared(meta.transactional_id)
                               for meta in prepared))

    async def _complete_prepared(self, transactional_id: str) -> None:
        lock = self._lock(transactional_id)
        await lock.acquire()
        meta = self.transactions.get(transactional_id)
        if meta is None or not meta.state.is_prepare:
            lock.release()
            return
        await self._complete_and_release(meta, lock)

    async def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.markers.close()
        self.verifier.close()

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        return self._locks.setdefault(transactional_id, asyncio.Lock())

    def _epoch_of(self, transactional_id: str) -> int:
        """The coordinator epoch of the id's partition; NOT_COORDINATOR if not led here."""
        epoch = self.epochs.get(self.state_log.partition_for(transactional_id))
        if epoch is None:
            raise TransactionError(ErrorCode.not_coordinator)
        return epoch

    async def _write(self, meta: TransactionMetadata) -> TransactionMetadata:
        index = self.state_log.partition_for(meta.transactional_id)
        epoch = self._epoch_of(meta.transactional_id)
        try:
            await self.state_log.write(meta, epoch)
        except StateLogError as exc:
            raise TransactionError(exc.error, str(exc)) from exc
        if self.epochs.get(index) != epoch:
            # Unloaded while the write waited for the replicas: the new coordinator
            # decides what became of it.
            raise TransactionError(ErrorCode.not_coordinator)
        self.transactions[meta.transactional_id] = meta
        return meta

    async def ensure_state_log(self) -> None:
        """Create ``__transaction_state`` on first use (FindCoordinator, or a request
        sent straight here); alone, its new partitions are led here at once."""
        if await self.state_log.ensure_topic():
            await self.start()

    def coordinates(self, transactional_id: str) -> bool:
        """Whether the id's partition is led and loaded here."""
        index = self.state_log.partition_for(transactional_id)
        return index in self.epochs and index not in self.loading

    async def _check_coordinator(self, transactional_id: str) -> None:
        if not transactional_id:
            raise TransactionError(ErrorCode.invalid_request, "empty transactional id")
        try:
            await self.ensure_state_log()
        except StateLogError as exc:
            raise TransactionError(exc.error, str(exc)) from exc
        index = self.state_log.partition_for(transactional_id)
        if index in self.loading:
            raise TransactionError(ErrorCode.coordinator_load_in_progress)
        if index not in self.epochs:
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

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]
                          ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4 with VerifyOnly, which a partition leader sends before
        the first transactional batch of a producer it has no transaction open for
        (KIP-890): whether the id's ongoing transaction added each partition, from
        memory, writing nothing. The checks and codes of Kafka 3.7's
        handleVerifyPartitionsInTransaction; an error of the id holds for each of its
        partitions."""
        tps = list(partitions)
        try:
            if not transactional_id:
                raise TransactionError(ErrorCode.invalid_request)
            index = self.state_log.partition_for(transactional_id)
            if index in self.loading:
                raise TransactionError(ErrorCode.coordinator_load_in_progress)
            if index not in self.epochs:
                raise TransactionError(ErrorCode.not_coordinator)
            meta = self._current(transactional_id, producer_id, producer_epoch)
        except TransactionError as exc:
            return dict.fromkeys(tps, exc.error)
        if meta.state.is_prepare:
            return dict.fromkeys(tps, ErrorCode.concurrent_transactions)
        return {tp: ErrorCode.none if tp in meta.partitions else ErrorCode.invalid_txn_state
                for tp in tps}

    def verify_partition(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         tp: TopicPartition) -> ErrorCode | None:
        """Whether a transactional produce may write to ``tp``: only into a partition its
        ongoing transaction added, or the LSO would stall for want of a marker. Checked
        for every batch where the id is coordinated (None elsewhere: the partition's
        leader asks the coordinator with AddPartitionsToTxn v4 instead,
        :class:`~gregor.transactions.verification.TransactionVerifier`)."""
        if not self.coordinates(transactional_id):
            return None
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
        """TxnOffsetCommit: the producer holds the id and added the group's offsets
        (known only where the id is coordinated; the group's coordinator may be another
        broker, which takes the offsets as Kafka's does, on the producer's word)."""
        if not self.coordinates(transactional_id):
            return None
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
        """As Kafka's: answered once Prepare{Commit,Abort} is durable (the outcome is
        decided: a restart or a new coordinator finishes it from the log); the markers
        and Complete{Commit,Abort} follow in a task that keeps the id's lock until they
        are written. The producer's next request for the id (AddPartitionsToTxn of its
        next transaction) waits for that lock, where Kafka answers
        CONCURRENT_TRANSACTIONS and the client retries after a backoff."""
        await self._check_coordinator(transactional_id)
        lock = self._lock(transactional_id)
        await lock.acquire()
        completing = False
        try:
            meta = self._current(transactional_id, producer_id, producer_epoch)
            done = (TransactionState.COMPLETE_COMMIT if commit
                    else TransactionState.COMPLETE_ABORT)
            if meta.state == TransactionState.ONGOING:
                prepared = await self._prepare(meta, commit, meta.producer_epoch)
                self._spawn(self._complete_and_release(prepared, lock))
                completing = True
            elif meta.state == done:
                return  # a retry of the request that ended it
            elif meta.state == (TransactionState.PREPARE_COMMIT if commit
                                else TransactionState.PREPARE_ABORT):
                await self._complete(meta)
            else:
                raise TransactionError(ErrorCode.invalid_txn_state,
                                       f"cannot {'commit' if commit else 'abort'} "
                                       f"{transactional_id} in state {meta.state.name}")
        finally:
            if not completing:
                lock.release()

    async def _complete_and_release(self, meta: TransactionMetadata,
                                    lock: asyncio.Lock) -> None:
        """Complete a prepared transaction in the background, holding the id's lock
        (taken by the caller) until it is done or no longer this broker's to do."""
        try:
            await self._complete(meta)
        except TransactionError as exc:
            # No longer coordinated here: the new coordinator loads the transaction in
            # its Prepare state and completes it.
            log.warning("transaction of %s not completed here: %s", meta.transactional_id,
                        exc)
        finally:
            lock.release()

    def _spawn(self, work: Coroutine[None, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _prepare(self, meta: TransactionMetadata, commit: bool,
                       epoch: int) -> TransactionMetadata:
        return await self._write(dataclasses.replace(
            meta, producer_epoch=epoch, last_update_ms=_now_ms(),
            state=TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT))

    async def _end(self, meta: TransactionMetadata, commit: bool,
                   epoch: int) -> TransactionMetadata:
        """Prepare and complete, before answering (a fencing InitProducerId, a timeout)."""
        return await self._complete(await self._prepare(meta, commit, epoch))

    async def _complete(self, meta: TransactionMetadata) -> TransactionMetadata:
        """Have every marker of a prepared transaction written, then record it complete.

        As Kafka's marker channel, whatever fails is tried again (after a backoff) until
        it is written: the outcome is decided and durable, and until it is complete the
        id can start nothing new. Only two things end the attempts: this broker no
        longer coordinating the id at the epoch it prepared it (TransactionError
        NOT_COORDINATOR; the new coordinator completes it from the log), and the task's
        cancellation when the broker stops (a restart completes it)."""
        commit = meta.state == TransactionState.PREPARE_COMMIT
        index = self.state_log.partition_for(meta.transactional_id)
        epoch = self._epoch_of(meta.transactional_id)
        markers_written = False
        failure_backoff = _MARKER_RETRY_BACKOFF_S
        while True:
            if self.epochs.get(index) != epoch:
                raise TransactionError(ErrorCode.not_coordinator,
                                       f"{meta.transactional_id} moved while completing")
            step = "completion" if markers_written else "markers"
            try:
                if not markers_written:
                    await self.markers.write(meta.producer_id, meta.producer_epoch, commit,
                                             epoch, meta.partitions,
                                             lambda: self.epochs.get(index) == epoch)
                    markers_written = True
                return await self._write(dataclasses.replace(
                    meta, partitions=frozenset(), last_update_ms=_now_ms(),
                    state=TransactionState.COMPLETE_COMMIT if commit
                    else TransactionState.COMPLETE_ABORT))
            except CoordinatorFenced as exc:
                raise TransactionError(ErrorCode.not_coordinator, str(exc)) from exc
            except TransactionError as exc:
                # The ISR is short, and so on (Kafka's COORDINATOR_NOT_AVAILABLE).
                if exc.error != ErrorCode.coordinator_not_available:
                    raise
                log.info("transaction of %s: %s not written yet (%s); retrying",
                         meta.transactional_id, step, exc)
                delay = _MARKER_RETRY_BACKOFF_S
            except Exception:
                delay = failure_backoff
                failure_backoff = min(failure_backoff * 2, _MAX_RETRY_BACKOFF_S)
                log.exception("transaction of %s: writing its %s failed; retrying in %.1f s",
                              meta.transactional_id, step, delay)
            await asyncio.sleep(delay)

    # ------------------------------------------------------------- describing
    def describe(self, transactional_id: str) -> TransactionMetadata:
        """DescribeTransactions: one transactional id's state, as coordinated here."""
        if not transactional_id:
            raise TransactionError(ErrorCode.invalid_request, "empty transactional id")
        index = self.state_log.partition_for(transactional_id)
        if index in self.loading:
            raise TransactionError(ErrorCode.coordinator_load_in_progress)
        if index not in self.epochs:
            raise TransactionError(ErrorCode.not_coordinator)
        meta = self.transactions.get(transactional_id)
        if meta is None:
            raise TransactionError(ErrorCode.transactional_id_not_found)
        return meta

    def list(self, states: set[TransactionState] | None, producer_ids: set[int],
             min_duration_ms: int) -> list[TransactionMetadata]:
        """ListTransactions: the ids coordinated here, filtered as Kafka's
        TransactionStateManager filters them: no filter given, everything; a duration
        (>= 0), those whose last transaction began more than that long ago, whatever
        their state, so also an id with none begun (its start is -1). Nothing while a
        partition is still being loaded (COORDINATOR_LOAD_IN_PROGRESS: the admin client
        asks again)."""
        if self.loading:
            raise TransactionError(ErrorCode.coordinator_load_in_progress)
        now = _now_ms()
        return [meta for meta in self.transactions.values()
                if (states is None or meta.state in states)
                and (not producer_ids or meta.producer_id in producer_ids)
                and (min_duration_ms < 0 or now - meta.start_ms > min_duration_ms)]

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
                    await self.state_log.write_tombstone(
                        meta.transactional_id, self._epoch_of(meta.transactional_id))
                except (StateLogError, TransactionError) as exc:
                    log.warning("cannot expire %s: %s", meta.transactional_id, exc)
                    continue
                del self.transactions[meta.transactional_id]
                expired += 1
        return expired

    # ---------------------------------------------------------------- timeouts
    async def abort_timed_out(self) -> int:
        """Abort (with an epoch bump, fencing the producer) every transaction open
        longer than its transaction.timeout.ms; how many. Each is prepared here and
        completed in a task of its own, as a producer's EndTxn is, so that one whose
        markers cannot be written yet holds up no other."""
        now = _now_ms()
        aborted = 0
        for meta in list(self.transactions.values()):
            if meta.state != TransactionState.ONGOING or now - meta.start_ms <= meta.timeout_ms:
                continue
            lock = self._lock(meta.transactional_id)
            await lock.acquire()
            completing = False
            try:
                if self.transactions.get(meta.transactional_id) != meta:
                    continue
                log.info("aborting transaction of %s: open for %d ms, timeout %d ms",
                         meta.transactional_id, now - meta.start_ms, meta.timeout_ms)
                prepared = await self._prepare(meta, False, self._next_epoch(meta))
                self._spawn(self._complete_and_release(prepared, lock))
                completing = True
                aborted += 1
            except TransactionError as exc:
                # No longer coordinated here, or its state not written: the next round
                # (or the new coordinator) tries again.
                log.warning("transaction of %s not aborted: %s", meta.transactional_id, exc)
            finally:
                if not completing:
                    lock.release()
        return aborted
