"""Transactions in a replicated cluster: a confluent-kafka transactional producer whose
coordinator (the leader of its ``__transaction_state`` partition) writes markers, with
WriteTxnMarkers, into partitions led by the other brokers; a coordinator killed while a
commit waits for its markers, and a partition leader killed while the commit's marker
is on its way to it. A transaction is seen by a read_committed reader exactly once if
its commit returned, never if it was aborted, and whole or not at all otherwise.
"""

from __future__ import annotations

import asyncio
import datetime
import select
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from checker import read_partitions
from clients import WireConnection, advertised_versions, versioned_request
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from harness import WAIT_S, Cluster
from kafka import KafkaProducer
from test_transactions_wire import Client, transactional_batch

from gregor.cluster.zookeeper_server import ZooKeeperServer
from gregor.groups.offsets_store import partition_for
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.transactions.state_log import TRANSACTION_STATE_TOPIC

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 6
SETTINGS = {
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    # A marker to an unreachable leader is given up on (and resent) within seconds.
    "request.timeout.ms": "3000",
}


@pytest.fixture
def txn_cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster(zookeeper, tmp_path, **SETTINGS).start()
    yield started
    started.stop()


def _producer(cluster: Cluster, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.bootstrap,
                         "transactional.id": transactional_id, "acks": "all",
                         "linger.ms": 5, "transaction.timeout.ms": 60000,
                         "topic.metadata.refresh.interval.ms": 500, "log_level": 0})
    producer.init_transactions(WAIT_S)
    return producer


def _write(producer: Producer, topic: str, name: str) -> None:
    """One record of transaction ``name`` in every partition."""
    for partition in range(PARTITIONS):
        producer.produce(topic, f"{name}-{partition}".encode(), partition=partition)


def _coordinator(cluster: Cluster, transactional_id: str, asked: int = 1) -> int:
    """FindCoordinator (key type 1) as broker ``asked`` answers it (-1: the partition
    has no leader right now)."""
    with WireConnection(cluster.brokers[asked].bootstrap) as connection:
        answer = connection.request(ApiKey.FIND_COORDINATOR, 4, versioned_request(
            ApiKey.FIND_COORDINATOR, 4, "FindCoordinatorRequest", key_type=1,
            coordinator_keys=(transactional_id,)))
    (found,) = answer.coordinators
    assert found.error_code in (ErrorCode.none, ErrorCode.coordinator_not_available), found
    return found.node_id


def _state(cluster: Cluster, coordinator: int, transactional_id: str) -> str:
    with WireConnection(cluster.brokers[coordinator].bootstrap) as connection:
        answer = connection.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, versioned_request(
            ApiKey.DESCRIBE_TRANSACTIONS, 0, "DescribeTransactionsRequest",
            transactional_ids=(transactional_id,)))
    (described,) = answer.transaction_states
    assert described.error_code == 0, described
    return described.transaction_state


def _producer_of(cluster: Cluster, coordinator: int, transactional_id: str
                 ) -> tuple[int, int]:
    with WireConnection(cluster.brokers[coordinator].bootstrap) as connection:
        answer = connection.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, versioned_request(
            ApiKey.DESCRIBE_TRANSACTIONS, 0, "DescribeTransactionsRequest",
            transactional_ids=(transactional_id,)))
    (described,) = answer.transaction_states
    return described.producer_id, described.producer_epoch


def _wait(condition, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _committed_view(cluster: Cluster, topic: str) -> Counter[str]:
    """How many times a read_committed reader sees each transaction's records, by name."""
    read = read_partitions(cluster.bootstrap, topic, PARTITIONS, isolation="read_committed")
    return Counter(value.decode().rsplit("-", 1)[0] for records in read.values()
                   for _, value in records)


def _leaders(cluster: Cluster, topic: str) -> dict[int, int]:
    return {p: cluster.leader(topic, p) for p in range(PARTITIONS)}


def test_commits_and_aborts_across_brokers(txn_cluster: Cluster) -> None:
    cluster = txn_cluster
    topic = "txn-spread"
    cluster.create_topic(topic, partitions=PARTITIONS)
    for broker in cluster.brokers.values():
        with WireConnection(broker.bootstrap) as connection:
            assert advertised_versions(connection, ApiKey.WRITE_TXN_MARKERS) == range(1, 2)
    # Markers go to a partition's leader: a follower refuses them, and an unknown
    # partition is named as such.
    follower = min(set(cluster.brokers) - {cluster.leader(topic, 0)})
    assert _write_markers(cluster, follower, topic, 0) == ErrorCode.not_leader_or_follower
    assert _write_markers(cluster, follower, "no-such-topic", 0) == (
        ErrorCode.unknown_topic_or_partition)
    transactional_id = f"spread-{uuid.uuid4().hex[:8]}"
    producer = _producer(cluster, transactional_id)
    coordinator = _coordinator(cluster, transactional_id)
    state_partitions = int(SETTINGS["transaction.state.log.num.partitions"])
    assert coordinator == cluster.leader(TRANSACTION_STATE_TOPIC,
                                         partition_for(transactional_id, state_partitions))
    assert set(_leaders(cluster, topic).values()) - {coordinator}, \
        "some partition must be led by a broker other than the coordinator"
    for broker_id in set(cluster.brokers) - {coordinator}:
        with WireConnection(cluster.brokers[broker_id].bootstrap) as connection:
            answer = connection.request(ApiKey.INIT_PRODUCER_ID, 4, versioned_request(
                ApiKey.INIT_PRODUCER_ID, 4, "InitProducerIdRequest",
                transactional_id=transactional_id,
                transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
                producer_epoch=-1))
        assert answer.error_code == ErrorCode.not_coordinator
    # The group's offsets go with each transaction: its coordinator (the leader of its
    # __consumer_offsets partition) takes them from the commit marker on.
    group = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "txn-offsets"})
    outcomes = {}
    for i in range(11):
        producer.begin_transaction()
        _write(producer, topic, f"t{i}")
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, i + 1)],
                                             group.consumer_group_metadata(), WAIT_S)
        if i % 3 == 1:
            assert producer.flush(WAIT_S) == 0  # written, not purged from the queue
            producer.abort_transaction(WAIT_S)
            outcomes[f"t{i}"] = 0
        else:
            producer.commit_transaction(WAIT_S)
            outcomes[f"t{i}"] = PARTITIONS
    # EndTxn is answered before the markers: the abort completes soon after.
    _wait(lambda: _state(cluster, coordinator, transactional_id) == "CompleteAbort",
          "the last abort to complete")
    seen = _committed_view(cluster, topic)
    assert {name: seen[name] for name in outcomes} == outcomes
    # Read uncommitted, the aborted records are there: it is the markers that hide them.
    everything = read_partitions(cluster.bootstrap, topic, PARTITIONS)
    assert sum(len(records) for records in everything.values()) == len(outcomes) * PARTITIONS
    try:
        # The last transaction (t10) aborted: t9's offset stands.
        (committed,) = group.committed([TopicPartition(topic, 0)], WAIT_S)
        assert committed.offset == 10
    finally:
        group.close()


def _write_markers(cluster: Cluster, broker_id: int, topic: str, partition: int,
                   producer_id: int = 0, producer_epoch: int = 0) -> int:
    """A WriteTxnMarkers (abort, coordinator epoch 0) for one partition, sent to
    ``broker_id``: the error it answers."""
    key = ApiKey.WRITE_TXN_MARKERS
    marker = versioned_request(key, 1, "WritableTxnMarker", producer_id=producer_id,
                               producer_epoch=producer_epoch, transaction_result=False,
                               coordinator_epoch=0, topics=(
                                   versioned_request(key, 1, "WritableTxnMarkerTopic",
                                                     name=topic, partition_indexes=(partition,)),))
    with WireConnection(cluster.brokers[broker_id].bootstrap) as connection:
        answer = connection.request(key, 1, versioned_request(
            key, 1, "WriteTxnMarkersRequest", markers=(marker,)))
    ((result,),) = [topic.partitions for topic in answer.markers[0].topics]
    assert result.partition_index == partition
    return result.error_code


def _cut_a_leader_and_commit(cluster: Cluster, topic: str, producer: Producer,
                             transactional_id: str, coordinator: int
                             ) -> tuple[int, threading.Thread, list[BaseException]]:
    """Write a transaction, cut the coordinator off from a data partition's leader, and
    start the commit in a thread; return once the coordinator is in PrepareCommit,
    which it stays in: its marker to that leader cannot be delivered."""
    cut = next(leader for leader in _leaders(cluster, topic).values() if leader != coordinator)
    producer.begin_transaction()
    _write(producer, topic, "doomed-leader")
    assert producer.flush(WAIT_S) == 0
    cluster.cut(coordinator, cut)
    failures: list[BaseException] = []

    def commit() -> None:
        try:
            producer.commit_transaction(120)
        except BaseException as exc:  # reported by the test
            failures.append(exc)

    committing = threading.Thread(target=commit, daemon=True)
    committing.start()
    _wait(lambda: _state(cluster, coordinator, transactional_id) == "PrepareCommit",
          "the commit to be prepared")
    return cut, committing, failures


def _add_partition_request(transactional_id: str, producer_id: int, producer_epoch: int,
                           topic: str):
    return versioned_request(
        ApiKey.ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnRequest",
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=producer_epoch,
        v3_and_below_topics=(versioned_request(ApiKey.ADD_PARTITIONS_TO_TXN, 3,
                                               "AddPartitionsToTxnTopic", name=topic,
                                               partitions=(0,)),))


def test_the_next_transaction_waits_for_the_markers_of_the_last(txn_cluster: Cluster
                                                                ) -> None:
    """EndTxn is answered once PrepareCommit is written, as Kafka answers it, while a
    marker still cannot reach its leader; the producer's next AddPartitionsToTxn waits
    for that transaction to complete (Kafka refuses it with CONCURRENT_TRANSACTIONS,
    and clients retry after a backoff) and is answered once it has."""
    cluster = txn_cluster
    topic = "txn-pending-markers"
    cluster.create_topic(topic, partitions=PARTITIONS)
    transactional_id = f"pending-markers-{uuid.uuid4().hex[:8]}"
    producer = _producer(cluster, transactional_id)
    coordinator = _coordinator(cluster, transactional_id)
    cut = next(leader for leader in _leaders(cluster, topic).values() if leader != coordinator)
    producer.begin_transaction()
    _write(producer, topic, "committed")
    assert producer.flush(WAIT_S) == 0
    cluster.cut(coordinator, cut)
    try:
        producer.commit_transaction(WAIT_S)
        # Answered, and the marker to the leader cut off is still to be written.
        assert _state(cluster, coordinator, transactional_id) == "PrepareCommit"
        producer_id, producer_epoch = _producer_of(cluster, coordinator, transactional_id)
        with WireConnection(cluster.brokers[coordinator].bootstrap, WAIT_S) as connection:
            connection.send(ApiKey.ADD_PARTITIONS_TO_TXN, 3, _add_partition_request(
                transactional_id, producer_id, producer_epoch, topic))
            # Taken in after the request above, which the coordinator holds meanwhile.
            assert _state(cluster, coordinator, transactional_id) == "PrepareCommit"
            cluster.heal(coordinator, cut)
            answer = connection.receive(ApiKey.ADD_PARTITIONS_TO_TXN, 3)
            (result,) = answer.results_by_topic_v3_and_below[0].results_by_partition
            assert result.partition_error_code == ErrorCode.none
            assert _state(cluster, coordinator, transactional_id) == "Ongoing"
            ended = connection.request(ApiKey.END_TXN, 3, versioned_request(
                ApiKey.END_TXN, 3, "EndTxnRequest", transactional_id=transactional_id,
                producer_id=producer_id, producer_epoch=producer_epoch, committed=False))
            assert ended.error_code == ErrorCode.none
    finally:
        cluster.heal(coordinator, cut)
    _wait(lambda: _state(cluster, coordinator, transactional_id) == "CompleteAbort",
          "the empty transaction's abort to complete")
    assert dict(_committed_view(cluster, topic)) == {"committed": PARTITIONS}


def test_partition_leader_killed_during_commit(txn_cluster: Cluster) -> None:
    cluster = txn_cluster
    topic = "txn-leader-dies"
    cluster.create_topic(topic, partitions=PARTITIONS)
    transactional_id = f"leader-dies-{uuid.uuid4().hex[:8]}"
    producer = _producer(cluster, transactional_id)
    coordinator = _coordinator(cluster, transactional_id)
    producer.begin_transaction()
    _write(producer, topic, "before")
    producer.commit_transaction(WAIT_S)

    cut, committing, failures = _cut_a_leader_and_commit(
        cluster, topic, producer, transactional_id, coordinator)
    cluster.brokers[cut].kill()
    committing.join(120)
    assert not committing.is_alive() and not failures, failures
    _wait(lambda: _state(cluster, coordinator, transactional_id) == "CompleteCommit",
          "the commit to complete once the partition has a new leader")
    producer.begin_transaction()
    _write(producer, topic, "aborted")
    assert producer.flush(WAIT_S) == 0
    producer.abort_transaction(WAIT_S)
    producer.begin_transaction()
    _write(producer, topic, "after")
    producer.commit_transaction(WAIT_S)

    seen = _committed_view(cluster, topic)
    assert dict(seen) == {"before": PARTITIONS, "doomed-leader": PARTITIONS,
                          "after": PARTITIONS}


# The application of test_coordinator_killed_during_commit: commits "before", writes
# "doomed-coordinator" in a second transaction, and commits it when told to.
_APPLICATION = """
import sys
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
bootstrap, topic, transactional_id, partitions = sys.argv[1:5]
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                     "acks": "all", "linger.ms": 5, "log_level": 0})
producer.init_transactions(30)
for name in ("before", "doomed-coordinator"):
    producer.begin_transaction()
    for partition in range(int(partitions)):
        producer.produce(topic, f"{name}-{partition}".encode(), partition=partition)
    if name == "before":
        producer.commit_transaction(30)
assert producer.flush(30) == 0
print("written", flush=True)
sys.stdin.readline()
producer.commit_transaction(120)
print("committed", flush=True)
sys.stdin.readline()
"""


def test_coordinator_killed_during_commit(txn_cluster: Cluster) -> None:
    """The coordinator dies in PrepareCommit with a marker unwritten, after answering
    the application's commit (EndTxn is answered once PrepareCommit is written), and so
    does the application: the new leader of the id's __transaction_state partition
    loads the transaction and finishes it by itself."""
    cluster = txn_cluster
    topic = "txn-coordinator-dies"
    cluster.create_topic(topic, partitions=PARTITIONS)
    transactional_id = f"coordinator-dies-{uuid.uuid4().hex[:8]}"
    application = subprocess.Popen(
        [sys.executable, "-c", _APPLICATION, cluster.bootstrap, topic, transactional_id,
         str(PARTITIONS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert application.stdout is not None and application.stdin is not None
        assert application.stdout.readline() == "written\n"
        coordinator = _coordinator(cluster, transactional_id)
        cut = next(leader for leader in _leaders(cluster, topic).values()
                   if leader != coordinator)
        (third,) = set(cluster.brokers) - {coordinator, cut}
        cluster.cut(coordinator, cut)
        application.stdin.write("commit\n")
        application.stdin.flush()
        _wait(lambda: _state(cluster, coordinator, transactional_id) == "PrepareCommit",
              "the commit to be prepared")
        answered, _, _ = select.select([application.stdout], [], [], WAIT_S)
        assert answered and application.stdout.readline() == "committed\n"
        assert _state(cluster, coordinator, transactional_id) == "PrepareCommit"
    finally:
        application.kill()
        application.wait()
    cluster.brokers[coordinator].kill()
    cluster.heal(coordinator, cut)
    _wait(lambda: _coordinator(cluster, transactional_id, third) == third,
          "the coordinator's in-sync follower to take over")
    _wait(lambda: _state(cluster, third, transactional_id) == "CompleteCommit",
          "the new coordinator to complete the commit")
    seen = _committed_view(cluster, topic)
    assert dict(seen) == {"before": PARTITIONS, "doomed-coordinator": PARTITIONS}
    # The dead coordinator's epoch is fenced where its successor wrote markers.
    producer_id, producer_epoch = _producer_of(cluster, third, transactional_id)
    assert _write_markers(cluster, cluster.leader(topic, 0), topic, 0, producer_id,
                          producer_epoch) == ErrorCode.transaction_coordinator_fenced


def test_coordinator_killed_mid_transaction(txn_cluster: Cluster) -> None:
    """The coordinator dies with a transaction open: the new one loads it Ongoing, and
    the producer's commit (sent to it) commits it once, everywhere."""
    cluster = txn_cluster
    topic = "txn-open-coordinator-dies"
    cluster.create_topic(topic, partitions=PARTITIONS)
    transactional_id = f"open-coordinator-dies-{uuid.uuid4().hex[:8]}"
    producer = _producer(cluster, transactional_id)
    coordinator = _coordinator(cluster, transactional_id)
    producer.begin_transaction()
    _write(producer, topic, "aborted")
    assert producer.flush(WAIT_S) == 0
    producer.abort_transaction(WAIT_S)
    producer.begin_transaction()
    _write(producer, topic, "open")
    assert producer.flush(WAIT_S) == 0
    cluster.brokers[coordinator].kill()
    producer.commit_transaction(120)
    asked = min(set(cluster.brokers) - {coordinator})
    successor = _coordinator(cluster, transactional_id, asked)
    assert successor != coordinator
    _wait(lambda: _state(cluster, successor, transactional_id) == "CompleteCommit",
          "the commit to complete")
    seen = _committed_view(cluster, topic)
    assert dict(seen) == {"open": PARTITIONS}


class TransactionalLoad:
    """Transactions one after another in a thread, one record in every partition each,
    every third aborted; records how each ended as the producer learnt it: committed,
    aborted, or unknown (the producer failed fatally and was replaced, whose
    init_transactions then ended it one way or the other)."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.cluster = cluster
        self.topic = topic
        self.transactional_id = f"load-{uuid.uuid4().hex[:8]}"
        self.outcomes: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TransactionalLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def committed(self) -> int:
        return sum(outcome == "committed" for outcome in list(self.outcomes.values()))

    def _new_producer(self) -> Producer:
        while True:
            try:
                return _producer(self.cluster, self.transactional_id)
            except KafkaException:
                if self._stop.is_set():
                    raise

    def _run(self) -> None:
        producer = self._new_producer()
        count = 0
        while not self._stop.is_set():
            name, count = f"t{count}", count + 1
            abort = count % 3 == 0
            try:
                producer.begin_transaction()
                _write(producer, self.topic, name)
                if abort:
                    producer.flush(WAIT_S)
                    producer.abort_transaction(WAIT_S)
                else:
                    producer.commit_transaction(WAIT_S)
                self.outcomes[name] = "aborted" if abort else "committed"
            except KafkaException as exc:
                self.outcomes[name] = self._recover(producer, exc.args[0])
                if self.outcomes[name] == "unknown":
                    producer = self._new_producer()

    @staticmethod
    def _recover(producer: Producer, error: KafkaError) -> str:
        """Abort what can be aborted, as an application does; "unknown" otherwise."""
        if not error.txn_requires_abort():
            return "unknown"
        try:
            producer.abort_transaction(WAIT_S)
        except KafkaException:
            return "unknown"
        return "aborted"

    def wait_for_commits(self, count: int) -> None:
        target = self.committed() + count
        _wait(lambda: self.committed() >= target, f"{count} more commits", timeout=90)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S * 4)
        assert not self._thread.is_alive(), "the transactional load did not stop"


def test_kills_under_transactional_load(txn_cluster: Cluster) -> None:
    """Transactions keep committing across a kill -9 of the coordinator's broker and
    then of a partition leader: every committed one is seen exactly once, no aborted
    one at all, and one whose end the producer never learnt is whole or absent."""
    cluster = txn_cluster
    topic = "txn-load"
    cluster.create_topic(topic, partitions=PARTITIONS)
    with TransactionalLoad(cluster, topic) as load:
        load.wait_for_commits(5)
        coordinator = _coordinator(cluster, load.transactional_id)
        cluster.brokers[coordinator].kill()
        load.wait_for_commits(5)
        cluster.brokers[coordinator].start()
        cluster.wait_for(lambda m: all(
            len(p.isrs) == 3 for name in (topic, TRANSACTION_STATE_TOPIC)
            for p in m.topics[name].partitions.values()), "every replica back in sync")
        asked = min(set(cluster.brokers) - {coordinator})
        now_coordinating = _coordinator(cluster, load.transactional_id, asked)
        victim = next(leader for leader in _leaders(cluster, topic).values()
                      if leader != now_coordinating)
        cluster.brokers[victim].kill()
        load.wait_for_commits(5)
    outcomes = dict(load.outcomes)
    seen = _committed_view(cluster, topic)
    assert set(seen) <= set(outcomes), "records of no transaction the producer began"
    wrong = {name: (outcome, seen[name]) for name, outcome in outcomes.items()
             if seen[name] not in {"committed": (PARTITIONS,), "aborted": (0,),
                                   "unknown": (0, PARTITIONS)}[outcome]}
    assert not wrong, wrong
    assert Counter(outcomes.values())["committed"] >= 15


def test_kafka_python_and_aiokafka_transactions(txn_cluster: Cluster) -> None:
    """The Python clients' transactional producers find their coordinator in the
    cluster and end transactions in partitions led by every broker."""
    cluster = txn_cluster
    topic = "txn-python-clients"
    cluster.create_topic(topic, partitions=PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all",
                             transactional_id=f"kp-{uuid.uuid4().hex[:8]}")
    try:
        producer.init_transactions()
        for name in ("kp_aborted", "kp_committed"):
            producer.begin_transaction()
            for partition in range(PARTITIONS):
                producer.send(topic, f"{name}-{partition}".encode(), partition=partition)
            producer.flush()
            if name == "kp_aborted":
                producer.abort_transaction()
            else:
                producer.commit_transaction()
    finally:
        producer.close()

    async def aiokafka_transactions() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap,
                                    transactional_id=f"ap-{uuid.uuid4().hex[:8]}")
        await producer.start()
        try:
            await producer.begin_transaction()
            for partition in range(PARTITIONS):
                await producer.send_and_wait(topic, f"ap_aborted-{partition}".encode(),
                                             partition=partition)
            await producer.abort_transaction()
            async with producer.transaction():
                for partition in range(PARTITIONS):
                    await producer.send(topic, f"ap_committed-{partition}".encode(),
                                        partition=partition)
        finally:
            await producer.stop()

    asyncio.run(aiokafka_transactions())
    seen = _committed_view(cluster, topic)
    assert dict(seen) == {"kp_committed": PARTITIONS, "ap_committed": PARTITIONS}


def test_a_leader_asks_the_coordinator_before_a_transactional_batch(txn_cluster: Cluster
                                                                    ) -> None:
    """KIP-890 across brokers: a partition leader that is not the transaction's
    coordinator takes a producer's first transactional batch only once the coordinator
    (AddPartitionsToTxn v4, VerifyOnly) says its transaction added the partition. A stray
    batch, and a late one of a transaction already committed, are refused, and the
    partition's LSO does not wait for a marker that would never come."""
    cluster = txn_cluster
    topic = "txn-verified"
    cluster.create_topic(topic, partitions=PARTITIONS)
    transactional_id = f"verified-{uuid.uuid4().hex[:8]}"
    _wait(lambda: _coordinator(cluster, transactional_id) > 0, "a transaction coordinator")
    coordinator = _coordinator(cluster, transactional_id)
    partition = next(p for p in range(PARTITIONS) if cluster.leader(topic, p) != coordinator)
    leader = cluster.leader(topic, partition)
    with WireConnection(cluster.brokers[coordinator].bootstrap) as at_coordinator, \
            WireConnection(cluster.brokers[leader].bootstrap) as at_leader:
        client, writer = Client(at_coordinator), Client(at_leader)
        error, pid, epoch = client.init(transactional_id)
        assert error == ErrorCode.none

        def produce(sequence: int, value: bytes) -> int:
            return writer.produce_to(transactional_id, topic, partition,
                                     transactional_batch(pid, epoch, sequence, [value]))

        assert produce(0, b"stray") == ErrorCode.invalid_txn_state
        assert client.add_partition(3, transactional_id, pid, epoch, topic, partition) == 0
        assert produce(0, b"in-1") == ErrorCode.none
        assert produce(1, b"in-2") == ErrorCode.none
        assert client.end(3, transactional_id, pid, epoch, True) == ErrorCode.none
        _wait(lambda: _state(cluster, coordinator, transactional_id) == "CompleteCommit",
              "the commit's markers")
        # A request of the committed transaction that arrives late (a retry, a slow
        # network): its marker is written already, and none would follow this batch.
        assert produce(2, b"late") == ErrorCode.invalid_txn_state
    read = read_partitions(cluster.bootstrap, topic, PARTITIONS, isolation="read_committed")
    assert [value for _, value in read[partition]] == [b"in-1", b"in-2"]
