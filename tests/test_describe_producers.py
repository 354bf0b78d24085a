"""DescribeProducers (KIP-664) against a real broker written to by confluent-kafka's
idempotent and transactional producers: each producer's epoch, last sequence and
timestamp, the coordinator epoch of its last marker, and where its open transaction
began; the same after a clean restart (from the producer snapshot) and after kill -9
(replayed from the log); and ``gregor transactions describe-producers``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from clients import WireConnection
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_producers.v0 import request as producers_request
from kio.static.primitive import i32

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

TIMEOUT = 30
STAMP = 1_700_000_000_000


def describe(broker: BrokerProcess, topic: str, *partitions: int) -> list:
    with WireConnection(broker.bootstrap) as connection:
        answer = connection.request(ApiKey.DESCRIBE_PRODUCERS, 0,
                                    producers_request.DescribeProducersRequest(topics=(
                                        producers_request.TopicRequest(
                                            name=topic,
                                            partition_indexes=tuple(map(i32, partitions))),)))
    (described,) = answer.topics
    assert described.name == topic
    return list(described.partitions)


def producers(broker: BrokerProcess, topic: str) -> dict[int, tuple[int, int, int, int, int]]:
    """Producer id -> (epoch, last sequence, last timestamp, coordinator epoch, open
    transaction's first offset) of partition 0."""
    (partition,) = describe(broker, topic, 0)
    assert partition.error_code == ErrorCode.none
    return {p.producer_id: (p.producer_epoch, p.last_sequence, p.last_timestamp,
                            p.coordinator_epoch, p.current_txn_start_offset)
            for p in partition.active_producers}


def test_describe_producers_of_a_partition(fresh_broker: BrokerProcess, topic_name: str) -> None:
    fresh_broker.start()
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(TIMEOUT)

    idempotent = Producer({"bootstrap.servers": fresh_broker.bootstrap,
                           "enable.idempotence": True, "linger.ms": 0})
    for i in range(3):  # one batch each: sequences 0, 1, 2
        idempotent.produce(topic_name, b"plain-%d" % i, partition=0, timestamp=STAMP + i)
        assert idempotent.flush(TIMEOUT) == 0
    transactional = Producer({"bootstrap.servers": fresh_broker.bootstrap,
                              "transactional.id": f"tx-{topic_name}", "linger.ms": 0})
    transactional.init_transactions(TIMEOUT)
    transactional.begin_transaction()
    transactional.produce(topic_name, b"open", partition=0, timestamp=STAMP + 10)
    assert transactional.flush(TIMEOUT) == 0

    described = producers(fresh_broker, topic_name)
    assert len(described) == 2
    plain_id, txn_id = sorted(described, key=lambda pid: described[pid][1] != 2)
    # The open transaction began at offset 3, after the three idempotent records; no
    # marker yet, so no coordinator epoch.
    assert described[plain_id] == (0, 2, STAMP + 2, -1, -1)
    assert described[txn_id] == (0, 0, STAMP + 10, -1, 3)

    transactional.commit_transaction(TIMEOUT)
    committed = producers(fresh_broker, topic_name)
    # The marker: no transaction open, the coordinator's epoch (__transaction_state's
    # leader epoch, 0 on a broker alone), and the marker's timestamp.
    epoch, last_sequence, last_timestamp, coordinator_epoch, open_at = committed[txn_id]
    assert (epoch, last_sequence, coordinator_epoch, open_at) == (0, 0, 0, -1)
    assert last_timestamp > STAMP + 10
    assert committed[plain_id] == described[plain_id]

    # Partition 1 was never written; unknown partitions and topics are named as such.
    empty, beyond = describe(fresh_broker, topic_name, 1, 2)
    assert (empty.partition_index, empty.error_code, empty.active_producers) == (
        1, ErrorCode.none, ())
    assert (beyond.partition_index, beyond.error_code) == (
        2, ErrorCode.unknown_topic_or_partition)
    (unknown,) = describe(fresh_broker, "no-such-topic", 0)
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition

    # A clean restart loads the producer snapshot; kill -9 replays the log as well.
    fresh_broker.stop()
    fresh_broker.start()
    assert producers(fresh_broker, topic_name) == committed
    fresh_broker.kill()
    for snapshot in (fresh_broker.data_dir / f"{topic_name}-0").glob("*.snapshot"):
        snapshot.unlink()
    fresh_broker.start()
    assert producers(fresh_broker, topic_name) == committed

    def gregor(partition: int, *more: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "gregor.cli.main", "transactions",
                               "describe-producers", "--topic", topic_name, "--partition",
                               str(partition), *more, "-b", fresh_broker.bootstrap],
                              capture_output=True, timeout=60)

    for asked in ((), ("--broker-id", "1")):  # the leader, found or named
        result = gregor(0, *asked)
        assert result.returncode == 0, result.stderr.decode()
        header, *rows = [line.split() for line in result.stdout.decode().splitlines()]
        assert header == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch",
                          "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset"]
        assert sorted(rows) == sorted(
            [str(pid), str(e), str(c), str(s), str(t), "None" if o < 0 else str(o)]
            for pid, (e, s, t, c, o) in committed.items())
    missing = gregor(7)
    assert missing.returncode == 1 and b"no such partition" in missing.stderr
    nobody = gregor(0, "--broker-id", "9")
    assert nobody.returncode == 1 and b"no broker 9" in nobody.stderr


def test_a_fenced_producer_is_described_until_it_expires(tmp_path: Path,
                                                         topic_name: str) -> None:
    """A producer fenced by a new one with its transactional id leaves only the abort
    written at its bumped epoch; the partition keeps it, and describes it, until
    producer.id.expiration.ms after that marker, not just until retention next runs."""
    expiration_ms = 5000
    broker = BrokerProcess(tmp_path / "data", overrides={
        "producer.id.expiration.ms": str(expiration_ms),
        "log.retention.check.interval.ms": "200"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(TIMEOUT)
        config = {"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name}
        fenced = Producer(config)
        fenced.init_transactions(TIMEOUT)
        fenced.begin_transaction()
        fenced.produce(topic_name, b"left open", partition=0)
        assert fenced.flush(TIMEOUT) == 0
        successor = Producer(config)
        successor.init_transactions(TIMEOUT)  # aborts the open one at epoch 1
        fenced_at = time.monotonic()
        time.sleep(1)  # retention passes, each 200 ms
        ((epoch, last_sequence, _, _, open_at),) = producers(broker, topic_name).values()
        assert (epoch, last_sequence, open_at) == (1, -1, -1)
        assert time.monotonic() - fenced_at < expiration_ms / 1000, "too slow to tell"
        deadline = time.monotonic() + 15
        while producers(broker, topic_name) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert producers(broker, topic_name) == {}
    finally:
        broker.kill()
