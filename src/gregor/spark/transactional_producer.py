"""A transactional producer that leaves its transaction open for someone else to end.

The exactly-once sink's tasks write, but the driver decides (a two-phase commit, as
Flink's Kafka sink does it): a task produces inside a transaction and hands back its
``transactional.id``, producer id and epoch; the driver sends EndTxn for all of them.
librdkafka neither exposes the producer id and epoch nor lets another process end a
transaction, so this module speaks the wire protocol itself (InitProducerId,
AddPartitionsToTxn, Produce of transactional record batches with sequence numbers, and
EndTxn), over the blocking connections the source's executors use.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.add_partitions_to_txn.v3 import request as add_partitions_request
from kio.schema.describe_transactions.v0 import request as describe_transactions_request
from kio.schema.end_txn.v3 import request as end_txn_request
from kio.schema.find_coordinator.v3 import request as find_coordinator_request
from kio.schema.init_producer_id.v4 import request as init_producer_id_request
from kio.schema.produce.v9 import request as produce_request

from gregor.client.connection import BrokerConnection, BrokerUnavailable, bootstrap_connection
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build
from gregor.protocol.errors import ErrorCode
from gregor.spark.partition_leader import METADATA_VERSION, FetchSettings, metadata_body
from gregor.spark.record_encoder import BatchBuilder

log = logging.getLogger(__name__)

FIND_COORDINATOR_VERSION = 3
INIT_PRODUCER_ID_VERSION = 4
ADD_PARTITIONS_VERSION = 3
END_TXN_VERSION = 3
DESCRIBE_TRANSACTIONS_VERSION = 0
PRODUCE_VERSION = 9
TRANSACTION_KEY_TYPE = 1
ACKS_ALL = -1
PRODUCE_TIMEOUT = datetime.timedelta(seconds=30)
MAX_IN_FLIGHT = 5
"""Kafka's limit for an idempotent producer: the broker keeps the last five batches'
sequence numbers per producer, enough to tell a retry from a gap."""
BATCH_BYTES = 512 * 1024
"""A partition's records are sent once they reach this size: below Kafka's default
``message.max.bytes`` (1 MiB), large enough that a request carries many records."""
RECORD_OVERHEAD = 64
"""Bytes counted per record besides its key and value (headers, varints), generously."""
RETRIES = 300
"""Attempts at a request answered with a retriable error, ``retry.backoff.ms`` apart: 30 s
by default, about as long as Kafka's clients keep retrying (``max.block.ms``, 60 s)."""
_RETRIABLE = frozenset({
    ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator, ErrorCode.concurrent_transactions,
})
_REFIND = frozenset({ErrorCode.coordinator_not_available, ErrorCode.not_coordinator})


Headers = Sequence[tuple[str, bytes | None]]


class TransactionFailed(Exception):
    """A transactional request refused for good (fenced, timed out, unknown topic...)."""


@dataclass(frozen=True)
class Transaction:
    """What ends a transaction: the driver needs nothing else to commit or abort it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass
class _Partition:
    """One topic-partition the transaction writes: its leader and next sequence number."""

    leader: tuple[str, int]
    sequence: int = 0
    batch: BatchBuilder = field(default_factory=BatchBuilder)


class Coordinators:
    """Connections to transaction coordinators, shared by every transactional id one
    caller ends or fences: one bootstrap connection finds them all (FindCoordinator) and
    one connection reaches each coordinator, where each id had opened one of each (a
    micro-batch of 200 tasks ended over 400 connections)."""

    def __init__(self, settings: FetchSettings) -> None:
        self.settings = settings
        self._bootstrap: BrokerConnection | None = None
        self._connections: dict[tuple[str, int], BrokerConnection] = {}

    def find(self, transactional_id: str) -> BrokerConnection:
        """The connection to the id's coordinator; raises :class:`BrokerUnavailable`."""
        body = build(find_coordinator_request.FindCoordinatorRequest,
                     key=transactional_id, key_type=TRANSACTION_KEY_TYPE)
        if self._bootstrap is None:
            self._bootstrap = bootstrap_connection(self.settings)
        try:
            answer = self._bootstrap.request(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                                             body)
        except BrokerUnavailable:
            self._bootstrap.close()
            self._bootstrap = None
            raise
        if answer.error_code != ErrorCode.none:
            raise BrokerUnavailable(f"FindCoordinator({transactional_id}): "
                                    f"{ErrorCode(answer.error_code).name}")
        address = (answer.host, int(answer.port))
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = BrokerConnection(address, self.settings)
        return connection

    def drop(self, connection: BrokerConnection) -> None:
        """A connection that failed: closed for everyone, opened again by the next find."""
        connection.close()
        self._connections = {a: c for a, c in self._connections.items() if c is not connection}

    def close(self) -> None:
        for connection in [*self._connections.values(), *filter(None, [self._bootstrap])]:
            connection.close()
        self._connections, self._bootstrap = {}, None


class TransactionCoordinatorClient:
    """Requests to the coordinator of one transactional id, found with FindCoordinator
    (key type 1) and found again when it moves; over ``coordinators`` shared with other
    ids, or over connections of its own, which ``close`` closes."""

    def __init__(self, settings: FetchSettings, transactional_id: str,
                 coordinators: Coordinators | None = None) -> None:
        self.settings = settings
        self.transactional_id = transactional_id
        self._own = coordinators is None
        self.coordinators = coordinators or Coordinators(settings)
        self._connection: BrokerConnection | None = None

    def request(self, api_key: ApiKey, version: int, body: Any,
                error_of: Any = lambda answer: answer.error_code) -> Any:
        """The answer, after retrying the errors Kafka's clients retry."""
        for _ in range(RETRIES):
            try:
                answer = self._coordinator().request(api_key, version, body)
            except BrokerUnavailable:
                self._drop()
                time.sleep(self.settings.retry_backoff_ms / 1000)
                continue
            error = ErrorCode(error_of(answer))
            if error not in _RETRIABLE:
                return answer
            if error in _REFIND:
                self._connection = None  # the id moved; the connection serves others
            time.sleep(self.settings.retry_backoff_ms / 1000)
        raise TransactionFailed(f"{self.transactional_id}: {api_key.name} still refused "
                                f"after {RETRIES} attempts")

    def connect(self) -> None:
        """Find the coordinator and connect, once; raises :class:`BrokerUnavailable`."""
        self._coordinator()

    def send(self, api_key: ApiKey, version: int, body: Any) -> None:
        """Send once, without waiting for the answer (:meth:`receive`); raises
        :class:`BrokerUnavailable` if the coordinator cannot be found or reached."""
        self._coordinator().send(api_key, version, body)

    def receive(self) -> Any:
        """The answer to what :meth:`send` sent (answers on a shared connection come in
        the order of the sends); on :class:`BrokerUnavailable` the connection is
        dropped, so that :meth:`request` starts afresh."""
        assert self._connection is not None, "receive() without send()"
        try:
            return self._connection.receive()
        except BrokerUnavailable:
            self._drop()
            raise

    def close(self) -> None:
        if self._own:
            self.coordinators.close()
        self._connection = None

    def _drop(self) -> None:
        if self._connection is not None:
            self.coordinators.drop(self._connection)
            self._connection = None

    def _coordinator(self) -> BrokerConnection:
        if self._connection is None:
            self._connection = self.coordinators.find(self.transactional_id)
        return self._connection


def end_transactions(settings: FetchSettings, transactions: Iterable[Transaction],
                     commit: bool) -> None:
    """EndTxn for each transaction, as its producer would have sent it.

    Every coordinator is found first, then every EndTxn sent before any answer is
    awaited: the transactions of a micro-batch become visible within about one round
    trip of each other, not one after another, and once the requests are out the
    coordinators end them all even if this process dies (it would otherwise leave the
    rest open, the micro-batch half visible, until the query restarts). A request that
    could not be sent, or was answered with a retriable error, is retried alone.

    Committing again a transaction that this very producer epoch already committed is
    answered with no error (Kafka's TransactionCoordinator treats it as a retry), which
    makes a replayed commit harmless.  Any other refusal raises, naming every
    transaction that could not be ended.
    """
    coordinators = Coordinators(settings)
    ending = [(txn, TransactionCoordinatorClient(settings, txn.transactional_id, coordinators),
               build(end_txn_request.EndTxnRequest, transactional_id=txn.transactional_id,
                     producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                     committed=commit))
              for txn in transactions]
    failures = []
    try:
        for _, client, _ in ending:
            with contextlib.suppress(BrokerUnavailable):  # found again when it is sent
                client.connect()
        sent = []
        for _, client, body in ending:
            try:
                client.send(ApiKey.END_TXN, END_TXN_VERSION, body)
                sent.append(True)
            except BrokerUnavailable:
                sent.append(False)
        # Every answer read before any retry: a retry's request on a shared connection
        # would otherwise read an answer meant for another id.
        answers = []
        for (_, client, _), was_sent in zip(ending, sent, strict=True):
            try:
                answers.append(client.receive() if was_sent else None)
            except BrokerUnavailable:
                answers.append(None)
        for (txn, client, body), answer in zip(ending, answers, strict=True):
            try:
                if answer is None or ErrorCode(answer.error_code) in _RETRIABLE:
                    # Never sent, lost with its connection, or to be retried: alone now.
                    answer = client.request(ApiKey.END_TXN, END_TXN_VERSION, body)
            except TransactionFailed as exc:
                failures.append(f"{txn}: {exc}")
                continue
            if answer.error_code != ErrorCode.none:
                failures.append(f"{txn}: {ErrorCode(answer.error_code).name}")
    finally:
        coordinators.close()
    if failures:
        action = "commit" if commit else "abort"
        raise TransactionFailed(f"cannot {action} {len(failures)} transaction(s): "
                                + "; ".join(failures))


def known(settings: FetchSettings, transactional_id: str) -> bool:
    """Whether the transaction coordinators know this id (DescribeTransactions)."""
    client = TransactionCoordinatorClient(settings, transactional_id)
    body = build(describe_transactions_request.DescribeTransactionsRequest,
                 transactional_ids=(transactional_id,))
    try:
        (state,) = client.request(ApiKey.DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSION,
                                  body, lambda answer: answer.transaction_states[0].error_code
                                  ).transaction_states
    finally:
        client.close()
    error = ErrorCode(state.error_code)
    if error not in (ErrorCode.none, ErrorCode.transactional_id_not_found):
        raise TransactionFailed(f"DescribeTransactions({transactional_id}): {error.name}")
    return error == ErrorCode.none


def fence(settings: FetchSettings, transactional_ids: Iterable[str], timeout_ms: int) -> None:
    """Abort what the producers of these ids left open, as a new attempt of their task
    would: a new epoch of each (InitProducerId), which also refuses the old epoch's
    batches still on their way. Ids that cannot be reached are left to their
    transaction's timeout, with a warning. The coordinators' connections are shared."""
    coordinators = Coordinators(settings)
    try:
        for transactional_id in transactional_ids:
            try:
                init_producer_id(TransactionCoordinatorClient(
                    settings, transactional_id, coordinators), timeout_ms)
            except (TransactionFailed, BrokerUnavailable) as exc:
                log.warning("could not abort the transaction of %s (%s): it ends at its "
                            "timeout", transactional_id, exc)
    finally:
        coordinators.close()


def init_producer_id(client: TransactionCoordinatorClient, timeout_ms: int) -> Transaction:
    """InitProducerId of the client's id: a new epoch, which fences every earlier
    producer of the id and aborts what it left open."""
    body = build(init_producer_id_request.InitProducerIdRequest,
                 transactional_id=client.transactional_id,
                 transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
                 producer_id=-1, producer_epoch=-1)
    answer = client.request(ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION, body)
    if answer.error_code != ErrorCode.none:
        raise TransactionFailed(f"InitProducerId({client.transactional_id}): "
                                f"{ErrorCode(answer.error_code).name}")
    return Transaction(client.transactional_id, int(answer.producer_id),
                       int(answer.producer_epoch))


def _metadata(settings: FetchSettings, topics: Sequence[str], create: bool) -> Any:
    connection = bootstrap_connection(settings)
    try:
        return connection.request(ApiKey.METADATA, METADATA_VERSION,
                                  metadata_body(topics, create))
    finally:
        connection.close()


def topic_exists(settings: FetchSettings, topic: str) -> bool:
    (found,) = _metadata(settings, [topic], create=False).topics
    error = ErrorCode(found.error_code)
    if error not in (ErrorCode.none, ErrorCode.unknown_topic_or_partition):
        raise BrokerUnavailable(f"metadata of {topic}: {error.name}")
    return error == ErrorCode.none


def partition_leaders(settings: FetchSettings,
                      topics: Iterable[str]) -> dict[str, list[tuple[str, int]]]:
    """Each topic's partition leaders, in partition order (auto-creating topics where the
    broker allows it, as a producer's metadata request does)."""
    wanted = sorted(set(topics))
    for _ in range(RETRIES):
        answer = _metadata(settings, wanted, create=True)
        brokers = {b.node_id: (b.host, int(b.port)) for b in answer.brokers}
        leaders: dict[str, list[tuple[str, int]]] = {}
        retry = False
        for topic in answer.topics:
            error = ErrorCode(topic.error_code)
            if error == ErrorCode.leader_not_available:
                retry = True
            elif error != ErrorCode.none:
                raise TransactionFailed(f"topic {topic.name!r}: {error.name}")
            partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
            if not partitions or any(p.leader_id not in brokers for p in partitions):
                retry = True
            leaders[topic.name] = [brokers.get(p.leader_id, ("", 0)) for p in partitions]
        if not retry:
            return leaders
        time.sleep(settings.retry_backoff_ms / 1000)
    raise TransactionFailed(f"topics {wanted} have no leader for every partition")


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's Java producer (and librdkafka's murmur2 partitioners) pick
    for a key: ``toPositive(murmur2(key)) % partitions``."""
    m, r = 0x5BD1E995, 24
    length = len(key)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(key[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    if tail == 3:
        h ^= key[whole + 2] << 16
    if tail >= 2:
        h ^= key[whole + 1] << 8
    if tail >= 1:
        h ^= key[whole]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


class TransactionalProducer:
    """Produces into one open transaction of ``transactional_id``; never ends it.

    Starting fences every earlier producer with the same id (a failed or zombie attempt
    of the same Spark task) and aborts what it left open.  Batches to one partition are
    pipelined on the leader's connection, at most :data:`MAX_IN_FLIGHT` unanswered.
    """

    def __init__(self, settings: FetchSettings, transactional_id: str,
                 timeout_ms: int) -> None:
        self.settings = settings
        self.coordinator = TransactionCoordinatorClient(settings, transactional_id)
        self.transaction = init_producer_id(self.coordinator, timeout_ms)
        self._leaders: dict[str, list[tuple[str, int]]] = {}
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._in_flight: dict[tuple[str, int], int] = {}
        self.records = 0

    def partition_count(self, topic: str) -> int:
        if topic not in self._leaders:
            self._leaders.update(partition_leaders(self.settings, [topic]))
        return len(self._leaders[topic])

    def choose_partition(self, topic: str, key: bytes | None, partition: int | None,
                         sticky: dict[str, int]) -> int:
        """The given partition, the key's murmur2 partition, or for a record with
        neither one partition per call of :meth:`add` and topic (``sticky``), as
        librdkafka's sticky partitioner keeps a batch of unkeyed records together."""
        if partition is not None and partition >= 0:
            return partition
        count = self.partition_count(topic)
        if key is not None:
            return murmur2_partition(key, count)
        if topic not in sticky:
            sticky[topic] = random.randrange(count)
        return sticky[topic]

    def add(self, topics: str | Sequence[str], keys: Sequence[bytes | None] | None,
            values: Sequence[bytes | None], partitions: Sequence[int | None] | None,
            headers: Sequence[Headers | None] | None, timestamp_ms: int) -> None:
        """Queue a column of records (``topics`` one name for all, ``keys``,
        ``partitions`` and ``headers`` None when no record has one); full batches are
        sent."""
        sticky: dict[str, int] = {}
        if isinstance(topics, str) and keys is None and partitions is None:
            tp = (topics, self.choose_partition(topics, None, None, sticky))
            self._append(tp, None, values, headers, timestamp_ms)
            return
        rows: dict[tuple[str, int], list[int]] = {}
        for index in range(len(values)):
            topic = topics if isinstance(topics, str) else topics[index]
            tp = (topic, self.choose_partition(
                topic, None if keys is None else keys[index],
                None if partitions is None else partitions[index], sticky))
            rows.setdefault(tp, []).append(index)
        for tp, indexes in rows.items():
            self._append(tp, None if keys is None else [keys[i] for i in indexes],
                         [values[i] for i in indexes],
                         None if headers is None else [headers[i] for i in indexes],
                         timestamp_ms)

    def _append(self, tp: tuple[str, int], keys: Sequence[bytes | None] | None,
                values: Sequence[bytes | None], headers: Sequence[Headers | None] | None,
                timestamp_ms: int) -> None:
        """Records of one partition, in slices that keep each batch near
        :data:`BATCH_BYTES`, guessed from the sizes of the records before."""
        state = self._partitions.get(tp)
        if state is None:
            self._add_partitions([tp])
            state = self._partitions[tp] = _Partition(self._leader(tp))
        start = 0
        while start < len(values):
            batch = state.batch
            if batch.count:
                estimate = batch.size / batch.count
            else:
                estimate = (len(values[start] or b"") + RECORD_OVERHEAD
                            + (len(keys[start] or b"") if keys is not None else 0))
            end = min(len(values), start + max(1, int((BATCH_BYTES - batch.size) / estimate)))
            batch.add(None if keys is None else keys[start:end], values[start:end],
                      None if headers is None else headers[start:end], timestamp_ms)
            start = end
            if batch.size + estimate > BATCH_BYTES:
                self._send(tp, state)

    def flush(self) -> Transaction:
        """Send what is queued and wait until every batch is acknowledged by all
        in-sync replicas; the transaction stays open."""
        for tp, state in self._partitions.items():
            if state.batch.count:
                self._send(tp, state)
        for leader in list(self._in_flight):
            while self._in_flight[leader]:
                self._receive(leader)
        return self.transaction

    def close(self) -> None:
        self.coordinator.close()
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def _leader(self, tp: tuple[str, int]) -> tuple[str, int]:
        topic, index = tp
        count = self.partition_count(topic)
        if not 0 <= index < count:
            raise TransactionFailed(f"{topic} has no partition {index} ({count} partitions)")
        return self._leaders[topic][index]

    def _add_partitions(self, tps: list[tuple[str, int]]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, index in tps:
            by_topic.setdefault(topic, []).append(index)
        txn = self.transaction
        body = build(add_partitions_request.AddPartitionsToTxnRequest,
                     v3_and_below_transactional_id=txn.transactional_id,
                     v3_and_below_producer_id=txn.producer_id,
                     v3_and_below_producer_epoch=txn.producer_epoch,
                     v3_and_below_topics=tuple(
                         build(add_partitions_request.AddPartitionsToTxnTopic, name=topic,
                               partitions=tuple(indexes))
                         for topic, indexes in sorted(by_topic.items())))

        def first_error(answer: Any) -> int:
            return next((p.partition_error_code for t in answer.results_by_topic_v3_and_below
                         for p in t.results_by_partition
                         if p.partition_error_code != ErrorCode.none), ErrorCode.none)

        answer = self.coordinator.request(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_VERSION,
                                          body, first_error)
        error = ErrorCode(first_error(answer))
        if error != ErrorCode.none:
            raise TransactionFailed(f"AddPartitionsToTxn({txn.transactional_id}, {tps}): "
                                    f"{error.name}")

    def _send(self, tp: tuple[str, int], state: _Partition) -> None:
        txn = self.transaction
        batch = state.batch.build(txn.producer_id, txn.producer_epoch, state.sequence)
        state.sequence += state.batch.count
        self.records += state.batch.count
        state.batch = BatchBuilder()
        topic, index = tp
        body = build(produce_request.ProduceRequest, transactional_id=txn.transactional_id,
                     acks=ACKS_ALL, timeout=PRODUCE_TIMEOUT,
                     topic_data=(build(produce_request.TopicProduceData, name=topic,
                                       partition_data=(build(
                                           produce_request.PartitionProduceData, index=index,
                                           records=batch),)),))
        leader = state.leader
        while self._in_flight.get(leader, 0) >= MAX_IN_FLIGHT:
            self._receive(leader)
        if leader not in self._connections:
            self._connections[leader] = BrokerConnection(leader, self.settings)
        self._connections[leader].send(ApiKey.PRODUCE, PRODUCE_VERSION, body)
        self._in_flight[leader] = self._in_flight.get(leader, 0) + 1

    def _receive(self, leader: tuple[str, int]) -> None:
        answer = self._connections[leader].receive()
        self._in_flight[leader] -= 1
        for topic in answer.responses:
            for p in topic.partition_responses:
                if p.error_code != ErrorCode.none:
                    raise TransactionFailed(
                        f"{self.transaction.transactional_id}: produce to {topic.name}-"
                        f"{p.index} refused: {ErrorCode(p.error_code).name} "
                        f"{p.error_message or ''}".rstrip())
