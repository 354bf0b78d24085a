"""Transactions with kafka-python and aiokafka against a real broker process: their
transactional producers commit and abort (aborted records reach the log first),
send consumed offsets with a transaction, and their read_committed consumers see
only committed records while read_uncommitted ones see everything; a second
producer with the same transactional id fences the first."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced
from aiokafka.structs import TopicPartition as AioTopicPartition
from group_clients import create_topic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import InvalidProducerEpochError, ProducerFencedError
from kafka.structs import OffsetAndMetadata

from gregor.broker.process import BrokerProcess

COMMITTED = {b"c-%d" % i for i in range(6)}
ABORTED = {b"a-%d" % i for i in range(4)}


def kafka_python_read(bootstrap: str, topic: str, isolation: str) -> set[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                             auto_offset_reset="earliest", consumer_timeout_ms=2000)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(2)])
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(2)])
        values = set()
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            for records in consumer.poll(timeout_ms=500).values():
                values.update(r.value for r in records)
        return values
    finally:
        consumer.close()


def test_kafka_python_transactions(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap,
                             transactional_id=f"kp-{uuid.uuid4().hex[:8]}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(4):
            producer.send(topic_name, b"a-%d" % i, partition=i % 2)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        for i in range(6):
            producer.send(topic_name, b"c-%d" % i, partition=i % 2)
        producer.send_offsets_to_transaction(
            {TopicPartition(topic_name, 0): OffsetAndMetadata(3, "", -1)}, group)
        producer.commit_transaction()
    finally:
        producer.close()
    assert kafka_python_read(broker.bootstrap, topic_name, "read_committed") == COMMITTED
    assert kafka_python_read(broker.bootstrap, topic_name,
                             "read_uncommitted") == COMMITTED | ABORTED
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group)
    try:
        assert consumer.committed(TopicPartition(topic_name, 0)) == 3
    finally:
        consumer.close()


async def _aiokafka_read(bootstrap: str, topic: str, isolation: str) -> set[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [AioTopicPartition(topic, p) for p in range(2)]
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        values: set[bytes] = set()
        async def behind() -> bool:
            return any([await consumer.position(tp) < end for tp, end in ends.items()])

        while await behind():
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.update(r.value for r in records if r.value is not None)
        return values
    finally:
        await consumer.stop()


def test_aiokafka_transactions(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    group = f"g-{uuid.uuid4().hex[:8]}"

    async def run() -> tuple[set[bytes], set[bytes], int | None]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                    transactional_id=f"ap-{uuid.uuid4().hex[:8]}")
        await producer.start()
        try:
            await producer.begin_transaction()
            for i in range(4):
                await producer.send_and_wait(topic_name, b"a-%d" % i, partition=i % 2)
            await producer.abort_transaction()
            async with producer.transaction():
                for i in range(6):
                    await producer.send(topic_name, b"c-%d" % i, partition=i % 2)
                await producer.send_offsets_to_transaction(
                    {AioTopicPartition(topic_name, 1): 2}, group)
        finally:
            await producer.stop()
        committed = await _aiokafka_read(broker.bootstrap, topic_name, "read_committed")
        everything = await _aiokafka_read(broker.bootstrap, topic_name, "read_uncommitted")
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group)
        await consumer.start()
        try:
            offset = await consumer.committed(AioTopicPartition(topic_name, 1))
        finally:
            await consumer.stop()
        return committed, everything, offset

    committed, everything, offset = asyncio.run(run())
    assert committed == COMMITTED
    assert everything == COMMITTED | ABORTED
    assert offset == 2


def test_kafka_python_producer_is_fenced_by_a_new_one(broker: BrokerProcess,
                                                       topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    transactional_id = f"kp-fence-{uuid.uuid4().hex[:8]}"
    old = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=transactional_id)
    new = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=transactional_id)
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic_name, b"old", partition=0)
        old.flush()
        new.init_transactions()  # aborts what the old one left open
        with pytest.raises((ProducerFencedError, InvalidProducerEpochError)):
            old.commit_transaction()
        new.begin_transaction()
        new.send(topic_name, b"new", partition=1)
        new.commit_transaction()
    finally:
        old.close(timeout=1)
        new.close()
    assert kafka_python_read(broker.bootstrap, topic_name, "read_committed") == {b"new"}


def test_aiokafka_producer_is_fenced_by_a_new_one(broker: BrokerProcess,
                                                   topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    transactional_id = f"ap-fence-{uuid.uuid4().hex[:8]}"

    async def run() -> set[bytes]:
        old = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                               transactional_id=transactional_id)
        new = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                               transactional_id=transactional_id)
        await old.start()
        try:
            await old.begin_transaction()
            await old.send_and_wait(topic_name, b"old", partition=0)
            await new.start()  # init: aborts what the old one left open
            with pytest.raises((ProducerFenced, InvalidProducerEpoch)):
                await old.commit_transaction()
            async with new.transaction():
                await new.send(topic_name, b"new", partition=1)
        finally:
            await new.stop()
            await old.stop()
        return await _aiokafka_read(broker.bootstrap, topic_name, "read_committed")

    assert asyncio.run(run()) == {b"new"}
