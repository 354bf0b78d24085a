"""What transactional producers of confluent-kafka, kafka-python and aiokafka are told
when things go wrong, each as a Kafka broker tells them, against a real broker:

- a send the broker refuses (a record above the topic's max.message.bytes) makes the
  transaction abortable: abort_transaction ends it and the next one commits;
- offsets sent with a consumer's group metadata from an old generation are refused
  with ILLEGAL_GENERATION, and from a member that left with UNKNOWN_MEMBER_ID
  (KIP-447: the transaction can be aborted and the consumer go on);
- a transaction.timeout.ms above transaction.max.timeout.ms is INVALID_TRANSACTION_TIMEOUT;
- a transaction that passes its timeout while its producer is idle is aborted with
  the epoch bumped, so the producer's next request is refused as fenced
  (INVALID_PRODUCER_EPOCH from the partition, PRODUCER_FENCED from the coordinator).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import InvalidTransactionTimeout
from aiokafka.errors import KafkaError as AioKafkaError
from aiokafka.errors import MessageSizeTooLargeError as AioMessageSizeTooLarge
from aiokafka.errors import ProducerFenced as AioProducerFenced
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from group_clients import TIMEOUT, create_topic, group_consumer, subscribe_when_known, wait_until
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import (
    CommitFailedError,
    InvalidProducerEpochError,
    InvalidTransactionTimeoutError,
    MessageSizeTooLargeError,
    ProducerFencedError,
)
from kafka.errors import KafkaError as KafkaPythonError
from kafka.structs import OffsetAndMetadata
from test_transactions_confluent import READ_COMMITTED, read_to_end, transactional_producer

from gregor.broker.process import BrokerProcess

# A transaction's timeout here, and how often the broker looks for timed-out ones.
_TXN_TIMEOUT_MS = 1000
_BIG = b"x" * 5000


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker that aborts timed-out transactions within 100 ms of their timeout."""
    process = BrokerProcess(tmp_path_factory.mktemp("txn-errors") / "data", overrides={
        "group.initial.rebalance.delay.ms": "0",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"})
    process.start()
    yield process
    process.stop()


def _small_records_topic(bootstrap: str, name: str) -> None:
    """Two partitions that refuse batches above 2,000 bytes."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 2, 1, config={"max.message.bytes": "2000"})]
                        )[name].result(TIMEOUT)


def _txn_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------- a send the broker refuses
def test_confluent_aborts_after_a_refused_send(txn_broker: BrokerProcess,
                                               topic_name: str) -> None:
    bootstrap = txn_broker.bootstrap
    _small_records_topic(bootstrap, topic_name)
    producer = transactional_producer(bootstrap, _txn_id("refused"))
    failures: list[KafkaError] = []
    producer.begin_transaction()
    producer.produce(topic_name, value=b"aborted", partition=0)
    producer.produce(topic_name, value=_BIG, partition=1,
                     on_delivery=lambda error, _: failures.append(error))
    producer.flush(TIMEOUT)
    assert [error.code() for error in failures] == [KafkaError.MSG_SIZE_TOO_LARGE]
    with pytest.raises(KafkaException) as refused:
        producer.commit_transaction(TIMEOUT)
    assert refused.value.args[0].txn_requires_abort()
    producer.abort_transaction(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic_name, value=b"committed", partition=1)
    producer.commit_transaction(TIMEOUT)
    assert read_to_end(bootstrap, topic_name, 2, READ_COMMITTED) == [b"committed"]


def test_kafka_python_aborts_after_a_refused_send(txn_broker: BrokerProcess,
                                                  topic_name: str) -> None:
    bootstrap = txn_broker.bootstrap
    _small_records_topic(bootstrap, topic_name)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=_txn_id("kp-refused"))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic_name, b"aborted", partition=0)
        with pytest.raises(MessageSizeTooLargeError):
            producer.send(topic_name, _BIG, partition=1).get(TIMEOUT)
        with pytest.raises(KafkaPythonError):
            producer.commit_transaction()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic_name, b"committed", partition=1)
        producer.commit_transaction()
    finally:
        producer.close()
    assert read_to_end(bootstrap, topic_name, 2, READ_COMMITTED) == [b"committed"]


def test_aiokafka_aborts_after_a_refused_send(txn_broker: BrokerProcess,
                                              topic_name: str) -> None:
    bootstrap = txn_broker.bootstrap
    _small_records_topic(bootstrap, topic_name)

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                    transactional_id=_txn_id("ap-refused"))
        await producer.start()
        try:
            await producer.begin_transaction()
            await producer.send_and_wait(topic_name, b"aborted", partition=0)
            with pytest.raises(AioMessageSizeTooLarge):
                await producer.send_and_wait(topic_name, _BIG, partition=1)
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send(topic_name, b"committed", partition=1)
        finally:
            await producer.stop()

    asyncio.run(run())
    assert read_to_end(bootstrap, topic_name, 2, READ_COMMITTED) == [b"committed"]


# ----------------------------------------------------- offsets of an old generation
def _fed(bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic, 2)
    feeder = Producer({"bootstrap.servers": bootstrap})
    for i in range(4):
        feeder.produce(topic, value=b"%d" % i, partition=i % 2)
    assert feeder.flush(TIMEOUT) == 0


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = group_consumer(bootstrap, group)
    try:
        return consumer.committed([TopicPartition(topic, 0)], TIMEOUT)[0].offset
    finally:
        consumer.close()


def test_confluent_offsets_of_an_old_generation_are_refused(txn_broker: BrokerProcess,
                                                            topic_name: str) -> None:
    bootstrap = txn_broker.bootstrap
    _fed(bootstrap, topic_name)
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = group_consumer(bootstrap, group, **{"enable.auto.commit": False})
    second = group_consumer(bootstrap, group, **{"enable.auto.commit": False})
    producer = transactional_producer(bootstrap, _txn_id("generation"))
    try:
        first.subscribe([topic_name])

        def joined() -> bool:
            first.poll(0.2)
            return len(first.assignment()) == 2

        wait_until(joined, what="the first member to be given both partitions")
        old = first.consumer_group_metadata()
        second.subscribe([topic_name])

        def rebalanced() -> bool:
            first.poll(0.1)
            second.poll(0.1)
            return len(first.assignment()) == len(second.assignment()) == 1

        wait_until(rebalanced, what="the second member to join")

        def send_offsets(metadata: object, offset: int) -> None:
            producer.begin_transaction()
            producer.produce(topic_name, value=b"out", partition=0)
            producer.send_offsets_to_transaction([TopicPartition(topic_name, 0, offset)],
                                                 metadata, TIMEOUT)

        with pytest.raises(KafkaException) as stale:
            send_offsets(old, 1)
        assert stale.value.args[0].code() == KafkaError.ILLEGAL_GENERATION
        assert stale.value.args[0].txn_requires_abort()
        producer.abort_transaction(TIMEOUT)
        send_offsets(first.consumer_group_metadata(), 2)
        producer.commit_transaction(TIMEOUT)
        assert _committed(bootstrap, group, topic_name) == 2
        current = second.consumer_group_metadata()
        second.close()
        with pytest.raises(KafkaException) as left:
            send_offsets(current, 3)
        assert left.value.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID
        producer.abort_transaction(TIMEOUT)
    finally:
        first.close()
    assert _committed(bootstrap, group, topic_name) == 2


def test_kafka_python_offsets_of_an_old_generation_are_refused(txn_broker: BrokerProcess,
                                                               topic_name: str) -> None:
    bootstrap = txn_broker.bootstrap
    _fed(bootstrap, topic_name)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    subscribe_when_known(consumer, [topic_name])
    producer = KafkaProducer(bootstrap_servers=bootstrap,
                             transactional_id=_txn_id("kp-generation"))
    try:
        deadline = time.monotonic() + TIMEOUT
        while consumer.group_metadata().generation_id < 0 or not consumer.assignment():
            assert time.monotonic() < deadline, "the consumer did not join"
            consumer.poll(timeout_ms=200)
        current = consumer.group_metadata()
        producer.init_transactions()
        offsets = {KafkaTopicPartition(topic_name, 0): OffsetAndMetadata(1, "", -1)}
        for metadata, refused in (
                (current._replace(generation_id=current.generation_id + 1),
                 "IllegalGenerationError"),
                (current._replace(member_id="gone"), "UnknownMemberIdError")):
            producer.begin_transaction()
            producer.send(topic_name, b"out", partition=0)
            with pytest.raises(CommitFailedError, match=refused):
                producer.send_offsets_to_transaction(offsets, metadata)
            producer.abort_transaction()
        producer.begin_transaction()
        producer.send_offsets_to_transaction(offsets, current)
        producer.commit_transaction()
    finally:
        producer.close()
        consumer.close()
    assert _committed(bootstrap, group, topic_name) == 1


# ------------------------------------------------- a timeout above the broker's max
def test_python_clients_are_refused_a_timeout_above_the_maximum(
        txn_broker: BrokerProcess) -> None:
    too_long = 900_001  # transaction.max.timeout.ms is 900,000
    producer = KafkaProducer(bootstrap_servers=txn_broker.bootstrap,
                             transactional_id=_txn_id("kp-long"),
                             transaction_timeout_ms=too_long)
    try:
        with pytest.raises(KafkaPythonError) as refused:
            producer.init_transactions()
        assert isinstance(refused.value, InvalidTransactionTimeoutError) or (
            "InvalidTransactionTimeoutError" in str(refused.value))
    finally:
        producer.close(timeout=1)

    async def aiokafka_start() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap,
                                    transactional_id=_txn_id("ap-long"),
                                    transaction_timeout_ms=too_long)
        try:
            with pytest.raises(InvalidTransactionTimeout):
                await producer.start()
        finally:
            await producer.stop()

    asyncio.run(aiokafka_start())


# ------------------------------------------------------ a timeout while idle
def _wait_aborted(bootstrap: str, topic: str) -> None:
    """Until the coordinator aborted the idle transaction: its marker makes the record
    before it stable, and read_committed readers skip it."""
    consumer = group_consumer(bootstrap, f"w-{uuid.uuid4().hex[:8]}",
                              **{"isolation.level": READ_COMMITTED})
    try:
        wait_until(lambda: consumer.get_watermark_offsets(TopicPartition(topic, 0),
                                                          TIMEOUT) == (0, 2),
                   what="the idle transaction to be aborted")
    finally:
        consumer.close()


def _confluent_idle_past_its_timeout(bootstrap: str, topic: str, kind: str) -> Producer:
    """A producer whose transaction, one record sent, the coordinator aborted for its
    timeout while the producer stayed idle."""
    create_topic(bootstrap, topic, 1)
    producer = transactional_producer(bootstrap, _txn_id(kind),
                                      **{"transaction.timeout.ms": _TXN_TIMEOUT_MS})
    producer.begin_transaction()
    producer.produce(topic, value=b"idle", partition=0)
    assert producer.flush(TIMEOUT) == 0
    _wait_aborted(bootstrap, topic)
    return producer


def test_confluent_producer_idle_past_its_timeout_is_fenced(txn_broker: BrokerProcess,
                                                            topic_name: str) -> None:
    bootstrap = txn_broker.bootstrap
    producer = _confluent_idle_past_its_timeout(bootstrap, topic_name, "idle")
    # Its next record: INVALID_PRODUCER_EPOCH, which librdkafka takes as fenced.
    producer.produce(topic_name, value=b"late", partition=0)
    with pytest.raises(KafkaException) as fenced:
        producer.flush(TIMEOUT)  # raises the fatal error
    assert fenced.value.args[0].code() == KafkaError._FENCED
    assert fenced.value.args[0].fatal()
    assert read_to_end(bootstrap, topic_name, 1, READ_COMMITTED) == []


def test_confluent_producer_idle_past_its_timeout_cannot_commit(txn_broker: BrokerProcess,
                                                                topic_name: str) -> None:
    """Nothing more sent: EndTxn of the old epoch is PRODUCER_FENCED."""
    bootstrap = txn_broker.bootstrap
    producer = _confluent_idle_past_its_timeout(bootstrap, topic_name, "idle-commit")
    with pytest.raises(KafkaException) as fenced:
        producer.commit_transaction(TIMEOUT)
    assert fenced.value.args[0].code() == KafkaError._FENCED
    assert read_to_end(bootstrap, topic_name, 1, READ_COMMITTED) == []


@pytest.mark.parametrize("send_more", [True, False], ids=["sends-again", "commits"])
def test_kafka_python_producer_idle_past_its_timeout_is_fenced(
        txn_broker: BrokerProcess, topic_name: str, send_more: bool) -> None:
    """Its next record is refused with INVALID_PRODUCER_EPOCH (the transaction then
    fails to commit); with nothing more sent, EndTxn of the old epoch is PRODUCER_FENCED."""
    bootstrap = txn_broker.bootstrap
    create_topic(bootstrap, topic_name, 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=_txn_id("kp-idle"),
                             transaction_timeout_ms=_TXN_TIMEOUT_MS)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic_name, b"idle", partition=0).get(TIMEOUT)
        _wait_aborted(bootstrap, topic_name)
        if send_more:
            with pytest.raises(InvalidProducerEpochError):
                producer.send(topic_name, b"late", partition=0).get(TIMEOUT)
        with pytest.raises(KafkaPythonError if send_more else ProducerFencedError):
            producer.commit_transaction()
    finally:
        producer.close(timeout=1)
    assert read_to_end(bootstrap, topic_name, 1, READ_COMMITTED) == []


def test_aiokafka_producer_idle_past_its_timeout_is_fenced(txn_broker: BrokerProcess,
                                                           topic_name: str) -> None:
    bootstrap = txn_broker.bootstrap

    async def run(topic: str, send_more: bool) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                    transactional_id=_txn_id("ap-idle"),
                                    transaction_timeout_ms=_TXN_TIMEOUT_MS)
        await producer.start()
        try:
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"idle", partition=0)
            await asyncio.to_thread(_wait_aborted, bootstrap, topic)
            with pytest.raises(AioProducerFenced):
                if send_more:
                    await producer.send_and_wait(topic, b"late", partition=0)
                await producer.commit_transaction()
        finally:
            with contextlib.suppress(AioKafkaError):  # the fatal error again
                await producer.stop()

    for topic, send_more in ((topic_name, True), (f"{topic_name}-commit", False)):
        create_topic(bootstrap, topic, 1)
        asyncio.run(run(topic, send_more))
        assert read_to_end(bootstrap, topic, 1, READ_COMMITTED) == []
