"""Transactions with confluent-kafka (librdkafka) against a real broker process.

Transactional producers commit and abort across partitions while read_committed
and read_uncommitted consumers check exactly which records each sees; offsets
sent with a transaction become the group's only when it commits; a second
producer with the same transactional id fences the first and aborts what it left
open; a transaction past its timeout is aborted; a broker killed with SIGKILL
keeps committed transactions and still holds an open one back from
read_committed readers until it is aborted; a restart finishes the markers of a
transaction prepared to commit.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from group_clients import TIMEOUT, create_topic, group_consumer, wait_until
from storage_helpers import read_all

from gregor.broker.process import BrokerProcess
from gregor.config import BrokerConfig, TopicConfig
from gregor.groups.offsets_store import partition_for
from gregor.protocol.record_codec import Record, encode_batch
from gregor.storage.log import Log
from gregor.transactions.metadata import TransactionState
from gregor.transactions.state_log import (
    TRANSACTION_STATE_TOPIC,
    decode_value,
    encode_key,
    encode_value,
)

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"


def transactional_producer(bootstrap: str, transactional_id: str | None = None,
                           **config: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": transactional_id or f"tx-{uuid.uuid4().hex[:8]}",
                         "linger.ms": 5, **config})
    producer.init_transactions(TIMEOUT)
    return producer


def read_to_end(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value a consumer at ``isolation`` gets, up to the end it may read to."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"stuck at {values} ({isolation})"
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add(message.partition())
                continue
            value = message.value()
            assert value is not None
            values.append(value)
    finally:
        consumer.close()
    return values


def test_read_committed_sees_only_committed_records(broker: BrokerProcess,
                                                    topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 3)
    first = transactional_producer(broker.bootstrap)
    second = transactional_producer(broker.bootstrap)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    first.begin_transaction()
    second.begin_transaction()
    for i in range(6):
        first.produce(topic_name, value=b"commit-%d" % i, partition=i % 3)
        second.produce(topic_name, value=b"abort-%d" % i, partition=i % 3)
        plain.produce(topic_name, value=b"plain-%d" % i, partition=i % 3)
    assert plain.flush(TIMEOUT) == 0
    assert first.flush(TIMEOUT) == 0 and second.flush(TIMEOUT) == 0
    second.abort_transaction(TIMEOUT)
    first.commit_transaction(TIMEOUT)
    # A transaction left open holds read_committed readers back from its first record.
    first.begin_transaction()
    first.produce(topic_name, value=b"open", partition=0)
    assert first.flush(TIMEOUT) == 0
    plain.produce(topic_name, value=b"after-open", partition=0)
    assert plain.flush(TIMEOUT) == 0

    committed = read_to_end(broker.bootstrap, topic_name, 3, READ_COMMITTED)
    everything = read_to_end(broker.bootstrap, topic_name, 3, READ_UNCOMMITTED)
    expected = {b"commit-%d" % i for i in range(6)} | {b"plain-%d" % i for i in range(6)}
    assert sorted(committed) == sorted(expected)
    assert sorted(everything) == sorted(
        expected | {b"abort-%d" % i for i in range(6)} | {b"open", b"after-open"})

    first.commit_transaction(TIMEOUT)
    assert sorted(read_to_end(broker.bootstrap, topic_name, 3, READ_COMMITTED)) == sorted(
        expected | {b"open", b"after-open"})


def test_high_watermark_at_read_committed_is_the_last_stable_offset(
        broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    producer = transactional_producer(broker.bootstrap)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic_name, value=b"%d" % i, partition=0)
    assert producer.flush(TIMEOUT) == 0
    tp = TopicPartition(topic_name, 0)
    committed = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso",
                          "isolation.level": READ_COMMITTED})
    uncommitted = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso",
                            "isolation.level": READ_UNCOMMITTED})
    try:
        assert committed.get_watermark_offsets(tp, TIMEOUT) == (0, 0)
        assert uncommitted.get_watermark_offsets(tp, TIMEOUT) == (0, 3)
        producer.commit_transaction(TIMEOUT)
        # Three records and the commit marker.
        assert committed.get_watermark_offsets(tp, TIMEOUT) == (0, 4)
    finally:
        committed.close()
        uncommitted.close()


def test_offsets_sent_with_a_transaction_count_only_once_it_commits(
        broker: BrokerProcess, topic_name: str) -> None:
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(broker.bootstrap, source, 1)
    create_topic(broker.bootstrap, sink, 1)
    feeder = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        feeder.produce(source, value=b"%d" % i, partition=0)
    assert feeder.flush(TIMEOUT) == 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = group_consumer(broker.bootstrap, group, **{
        "enable.auto.commit": False, "isolation.level": READ_COMMITTED})
    producer = transactional_producer(broker.bootstrap)
    try:
        consumer.subscribe([source])
        messages = []
        while len(messages) < 10:
            message = consumer.poll(1.0)
            if message is not None:
                assert not message.error(), message.error()
                messages.append(message)
        source_tp = [TopicPartition(source, 0)]

        def transform(batch: list, commit: bool) -> None:
            producer.begin_transaction()
            for message in batch:
                producer.produce(sink, value=b"out-" + message.value(), partition=0)
            offsets = [TopicPartition(source, 0, batch[-1].offset() + 1)]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(),
                                                 TIMEOUT)
            if commit:
                producer.commit_transaction(TIMEOUT)
            else:
                producer.abort_transaction(TIMEOUT)

        transform(messages[:4], commit=True)
        assert consumer.committed(source_tp, TIMEOUT)[0].offset == 4
        transform(messages[4:], commit=False)
        assert consumer.committed(source_tp, TIMEOUT)[0].offset == 4
        transform(messages[4:], commit=True)
        assert consumer.committed(source_tp, TIMEOUT)[0].offset == 10
    finally:
        consumer.close()
    assert read_to_end(broker.bootstrap, sink, 1, READ_COMMITTED) == [
        b"out-%d" % i for i in range(10)]


def test_a_new_producer_with_the_same_id_fences_the_old_one(broker: BrokerProcess,
                                                             topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    transactional_id = f"fence-{uuid.uuid4().hex[:8]}"
    old = transactional_producer(broker.bootstrap, transactional_id)
    old.begin_transaction()
    for i in range(4):
        old.produce(topic_name, value=b"old-%d" % i, partition=i % 2)
    assert old.flush(TIMEOUT) == 0

    new = transactional_producer(broker.bootstrap, transactional_id)
    # The old producer's open transaction was aborted when the new one started.
    assert read_to_end(broker.bootstrap, topic_name, 2, READ_COMMITTED) == []
    with pytest.raises(KafkaException) as fenced:
        old.commit_transaction(TIMEOUT)
    assert fenced.value.args[0].fatal()
    assert fenced.value.args[0].code() == KafkaError._FENCED

    new.begin_transaction()
    new.produce(topic_name, value=b"new", partition=0)
    new.commit_transaction(TIMEOUT)
    assert read_to_end(broker.bootstrap, topic_name, 2, READ_COMMITTED) == [b"new"]
    assert len(read_to_end(broker.bootstrap, topic_name, 2, READ_UNCOMMITTED)) == 5


def test_init_refuses_a_timeout_above_the_brokers_maximum(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": f"long-{uuid.uuid4().hex[:8]}",
                         "transaction.timeout.ms": 900001})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(TIMEOUT)
    assert refused.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT


@pytest.fixture
def quick_timeouts_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own that looks for timed-out transactions often."""
    process = BrokerProcess(tmp_path / "data", overrides={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    process.start()
    yield process
    process.kill()


def test_a_transaction_past_its_timeout_is_aborted(quick_timeouts_broker: BrokerProcess,
                                                   topic_name: str) -> None:
    broker = quick_timeouts_broker
    create_topic(broker.bootstrap, topic_name, 1)
    producer = transactional_producer(broker.bootstrap, **{"transaction.timeout.ms": 1500})
    producer.begin_transaction()
    producer.produce(topic_name, value=b"too-slow", partition=0)
    assert producer.flush(TIMEOUT) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "timeouts",
                         "isolation.level": READ_COMMITTED})
    tp = TopicPartition(topic_name, 0)
    try:
        # The abort marker moves the last stable offset past the record and itself.
        wait_until(lambda: consumer.get_watermark_offsets(tp, TIMEOUT) == (0, 2),
                   what="the timed-out transaction to be aborted")
    finally:
        consumer.close()
    with pytest.raises(KafkaException):
        producer.commit_transaction(TIMEOUT)
    assert read_to_end(broker.bootstrap, topic_name, 1, READ_COMMITTED) == []


def test_a_killed_broker_keeps_commits_and_holds_open_transactions_back(
        fresh_broker: BrokerProcess, topic_name: str) -> None:
    broker = fresh_broker.start()
    create_topic(broker.bootstrap, topic_name, 2)
    transactional_id = f"killed-{uuid.uuid4().hex[:8]}"
    producer = transactional_producer(broker.bootstrap, transactional_id)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic_name, value=b"kept-%d" % i, partition=i % 2)
    producer.commit_transaction(TIMEOUT)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic_name, value=b"open-%d" % i, partition=i % 2)
    assert producer.flush(TIMEOUT) == 0
    broker.kill()
    broker.start()
    kept = sorted(b"kept-%d" % i for i in range(4))
    # The open transaction survived the crash: still invisible, and still holding
    # back what follows it, until a new producer with its id aborts it (the
    # coordinator knows from its log where the markers go).
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic_name, value=b"after", partition=0)
    assert plain.flush(TIMEOUT) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "killed",
                         "isolation.level": READ_COMMITTED})
    tp = TopicPartition(topic_name, 0)
    try:
        assert consumer.get_watermark_offsets(tp, TIMEOUT) == (0, 3)  # 2 records, a marker
        transactional_producer(broker.bootstrap, transactional_id)
        assert consumer.get_watermark_offsets(tp, TIMEOUT) == (0, 7)
    finally:
        consumer.close()
    assert sorted(read_to_end(broker.bootstrap, topic_name, 2, READ_COMMITTED)) == sorted(
        [*kept, b"after"])


def test_a_restart_finishes_a_prepared_commit(fresh_broker: BrokerProcess,
                                              topic_name: str) -> None:
    """A broker stopped between PrepareCommit and the markers (the state written to
    ``__transaction_state`` by hand while it is down) writes them when it starts, and
    the offsets the transaction sent become the group's then."""
    broker = fresh_broker.start()
    create_topic(broker.bootstrap, topic_name, 2)
    transactional_id = f"prepared-{uuid.uuid4().hex[:8]}"
    producer = transactional_producer(broker.bootstrap, transactional_id)
    group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "prepared"})
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic_name, value=b"p-%d" % i, partition=i % 2)
    producer.send_offsets_to_transaction([TopicPartition(topic_name, 1, 42)],
                                         group.consumer_group_metadata(), TIMEOUT)
    group.close()
    assert producer.flush(TIMEOUT) == 0
    broker.stop()

    index = partition_for(transactional_id, 50)
    state_log = Log(broker.data_dir / f"{TRANSACTION_STATE_TOPIC}-{index}",
                    TRANSACTION_STATE_TOPIC, index, TopicConfig(BrokerConfig.from_mapping({})))
    try:
        (ongoing,) = [decode_value(transactional_id, record.value)
                      for record in read_all(state_log) if record.value is not None][-1:]
        assert ongoing.state == TransactionState.ONGOING
        assert {(topic_name, 0), (topic_name, 1)} < ongoing.partitions
        prepared = dataclasses.replace(ongoing, state=TransactionState.PREPARE_COMMIT)
        state_log.append_as_leader(encode_batch([Record(
            0, int(time.time() * 1000), encode_key(transactional_id),
            encode_value(prepared))]), 0)
    finally:
        state_log.close()

    broker.start()
    assert sorted(read_to_end(broker.bootstrap, topic_name, 2, READ_COMMITTED)) == [
        b"p-%d" % i for i in range(4)]
    group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "prepared"})
    try:
        assert group.committed([TopicPartition(topic_name, 1)], TIMEOUT)[0].offset == 42
    finally:
        group.close()


def test_gregor_consume_reads_at_either_isolation_level(broker: BrokerProcess,
                                                        topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    producer = transactional_producer(broker.bootstrap)
    for commit in (True, False, True):
        producer.begin_transaction()
        producer.produce(topic_name, value=b"kept" if commit else b"aborted", partition=0)
        if commit:
            producer.commit_transaction(TIMEOUT)
        else:
            assert producer.flush(TIMEOUT) == 0
            producer.abort_transaction(TIMEOUT)

    def consume(count: int, *flags: str) -> list[str]:
        result = subprocess.run(
            [sys.executable, "-m", "gregor.cli.main", "consume", topic_name, "-b",
             broker.bootstrap, "--from-beginning", "--max-messages", str(count), "--quiet",
             *flags], capture_output=True, timeout=60, check=True)
        return result.stdout.decode().splitlines()

    assert consume(2, "--isolation-level", "read_committed") == ["kept", "kept"]
    assert consume(3) == ["kept", "aborted", "kept"]


def test_gregor_transactions_list_and_describe(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    open_id, idle_id = (f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("cli-open", "cli-idle"))
    producer = transactional_producer(broker.bootstrap, open_id,
                                      **{"transaction.timeout.ms": 50000})
    producer.begin_transaction()
    producer.produce(topic_name, value=b"x", partition=1)
    assert producer.flush(TIMEOUT) == 0
    transactional_producer(broker.bootstrap, idle_id)

    def gregor(*args: str) -> list[list[str]]:
        result = subprocess.run([sys.executable, "-m", "gregor.cli.main", "transactions",
                                 *args, "-b", broker.bootstrap],
                                capture_output=True, timeout=60)
        assert result.returncode == 0, result.stderr.decode()
        return [line.split() for line in result.stdout.decode().splitlines()]

    header, *rows = gregor("list")
    assert header == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    listed = {row[0]: row for row in rows}
    assert listed[open_id][1:] == ["1", listed[open_id][2], "Ongoing"]
    assert listed[idle_id][3] == "Empty"

    # kafka-transactions.sh list --duration-filter: begun more than that long ago, as
    # the broker filters (an id with no transaction begun has begun "long ago").
    _, *rows = gregor("list", "--duration-filter", "3600000")
    hour = {row[0]: row[3] for row in rows}
    assert open_id not in hour and hour[idle_id] == "Empty"
    wait_until(lambda: open_id in {row[0] for row in gregor("list", "--duration-filter", "0")},
               what="the open transaction to be listed as begun more than 0 ms ago")

    header, row = gregor("describe", open_id)
    # As kafka-transactions.sh spells it, too.
    assert gregor("describe", "--transactional-id", open_id)[1][:6] == row[:6]
    assert header[:5] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                          "TransactionState"]
    assert row[:2] == ["1", open_id] and row[2] == listed[open_id][2]
    assert row[4:6] == ["Ongoing", "50000"]
    assert int(row[6]) <= time.time() * 1000 and int(row[7]) >= 0
    assert row[8] == f"{topic_name}-1"
    _, idle = gregor("describe", idle_id)
    assert idle[4:8] == ["Empty", "60000", "None", "None"]
    producer.abort_transaction(TIMEOUT)

    result = subprocess.run([sys.executable, "-m", "gregor.cli.main", "transactions",
                             "describe", "no-such-id", "-b", broker.bootstrap],
                            capture_output=True, timeout=60)
    assert result.returncode == 1
    assert b"TRANSACTIONAL_ID_NOT_FOUND" in result.stderr
