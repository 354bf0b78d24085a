"""Producer-epoch fencing through the broker, as each real idempotent client meets it.

A client produces under its producer id at epoch 0; then a batch under the same id at
epoch 1 lands (sent raw: a newer incarnation of the producer, as a Java producer that
bumps its epoch locally after a sequence error would send it). The client's next batch,
still at epoch 0, is older than what the partition has seen: Kafka refuses it with
INVALID_PRODUCER_EPOCH and writes nothing of it. Each client says so in its own words.
"""

from __future__ import annotations

import asyncio
import json

from aiokafka import AIOKafkaProducer
from aiokafka.errors import ProducerFenced
from clients import (
    PRODUCE_VERSION,
    TIMEOUT,
    WireConnection,
    confluent_consume,
    confluent_consumer,
    make_batch,
    produce_request,
    stored_batches,
)
from confluent_kafka import KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.errors import InvalidProducerEpochError

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT)


def _newer_epoch_writes(bootstrap: str, topic: str, producer_id: int, epoch: int) -> None:
    """A batch of the same producer at the next epoch, its first (sequence 0)."""
    with WireConnection(bootstrap) as connection:
        answer = connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
            topic, 0, make_batch([b"newer"], producer_id=producer_id,
                                 producer_epoch=epoch + 1, base_sequence=0)))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none


def _assert_only_the_accepted_batches(bootstrap: str, topic: str, producer_id: int) -> None:
    """The log holds the epoch-0 record and the newer epoch's, not the refused one."""
    headers = stored_batches(bootstrap, topic)
    assert [(h.producer_id, h.producer_epoch, h.base_sequence) for h in headers] == [
        (producer_id, 0, 0), (producer_id, 1, 0)]
    consumer = confluent_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert [m.value() for m in confluent_consume(consumer, 2)] == [b"first", b"newer"]
    finally:
        consumer.close()


def test_confluent_producer_at_an_old_epoch_gets_invalid_producer_epoch(
        broker: BrokerProcess, topic_name: str) -> None:
    """librdkafka reports it per record, in the delivery report, and not as a fatal
    error (that is for transactional producers)."""
    _create_topic(broker.bootstrap, topic_name)
    stats: list[dict] = [{}]
    fatal: list[KafkaError] = []

    def on_error(error: KafkaError) -> None:
        if error.fatal():
            fatal.append(error)
    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0,
        "statistics.interval.ms": 100,
        "stats_cb": lambda text: stats.__setitem__(0, json.loads(text)), "error_cb": on_error})
    outcomes: list[KafkaError | None] = []
    producer.produce(topic_name, b"first", partition=0,
                     on_delivery=lambda error, _message: outcomes.append(error))
    assert producer.flush(TIMEOUT) == 0 and outcomes == [None]
    # librdkafka's statistics name the producer id and epoch it holds.
    while stats[0].get("eos", {}).get("producer_id", -1) < 0:
        producer.poll(0.1)
    producer_id, epoch = stats[0]["eos"]["producer_id"], stats[0]["eos"]["producer_epoch"]
    assert epoch == 0

    _newer_epoch_writes(broker.bootstrap, topic_name, producer_id, epoch)
    producer.produce(topic_name, b"fenced", partition=0,
                     on_delivery=lambda error, _message: outcomes.append(error))
    assert producer.flush(TIMEOUT) == 0
    (error,) = outcomes[1:]
    assert error is not None and error.code() == KafkaError.INVALID_PRODUCER_EPOCH
    assert fatal == []
    _assert_only_the_accepted_batches(broker.bootstrap, topic_name, producer_id)


def test_kafka_python_producer_at_an_old_epoch_gets_invalid_producer_epoch(
        broker: BrokerProcess, topic_name: str) -> None:
    """kafka-python fails the send's future with InvalidProducerEpochError."""
    _create_topic(broker.bootstrap, topic_name)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True,
                             linger_ms=0)
    try:
        producer.send(topic_name, b"first", partition=0).get(TIMEOUT)
        held = producer._transaction_manager.producer_id_and_epoch
        assert held.epoch == 0
        _newer_epoch_writes(broker.bootstrap, topic_name, held.producer_id, held.epoch)
        future = producer.send(topic_name, b"fenced", partition=0)
        try:
            future.get(TIMEOUT)
        except InvalidProducerEpochError:
            pass
        else:
            raise AssertionError("a batch at an old epoch was accepted")
    finally:
        producer.close(TIMEOUT)
    _assert_only_the_accepted_batches(broker.bootstrap, topic_name, held.producer_id)


def test_aiokafka_producer_at_an_old_epoch_is_fenced(broker: BrokerProcess,
                                                     topic_name: str) -> None:
    """aiokafka fails the send with ProducerFenced ("a newer producer ...")."""
    _create_topic(broker.bootstrap, topic_name)

    async def scenario() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                    enable_idempotence=True, linger_ms=0)
        await producer.start()
        try:
            await asyncio.wait_for(await producer.send(topic_name, b"first", partition=0),
                                   TIMEOUT)
            manager = producer._txn_manager
            producer_id, epoch = manager.producer_id, manager.producer_epoch
            assert epoch == 0
            await asyncio.to_thread(_newer_epoch_writes, broker.bootstrap, topic_name,
                                    producer_id, epoch)
            try:
                await asyncio.wait_for(await producer.send(topic_name, b"fenced", partition=0),
                                       TIMEOUT)
            except ProducerFenced:
                return producer_id
            raise AssertionError("a batch at an old epoch was accepted")
        finally:
            await asyncio.wait_for(producer.stop(), TIMEOUT)

    producer_id = asyncio.run(scenario())
    _assert_only_the_accepted_batches(broker.bootstrap, topic_name, producer_id)
