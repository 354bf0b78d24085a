"""aiokafka, the asyncio client: it opens with ApiVersions v0 and uses older,
non-flexible versions of Produce, Fetch and ListOffsets than the other clients."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from clients import BASE_TIMESTAMP, TIMEOUT, sample_records
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.broker.process import BrokerProcess


async def _round_trip(bootstrap: str, topic: str, compression: str | None) -> None:
    records = sample_records(300, partitions=2, null_header_values=False,
                             keyless_and_valueless=False)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                compression_type=compression, linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                                       partition=r.partition, timestamp_ms=r.timestamp)
                   for r in records]
        offsets = [(m.partition, m.offset) for m in await asyncio.gather(*futures)]
    finally:
        await producer.stop()
    assert sorted(offsets) == sorted((p, o) for p in range(2) for o in range(150))

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(2)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        got = []
        while len(got) < len(records):
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), TIMEOUT)
            got += [m for messages in batches.values() for m in messages]
        for p in range(2):
            mine = [m for m in got if m.partition == p]
            assert [m.offset for m in mine] == list(range(150))
            assert [(m.key, m.value, tuple(m.headers), m.timestamp) for m in mine] == [
                (r.key, r.value, r.headers, r.timestamp) for r in records if r.partition == p]

        tp = partitions[0]
        assert await consumer.end_offsets([tp]) == {tp: 150}
        found = (await consumer.offsets_for_times({tp: records[100].timestamp}))[tp]
        assert found.offset <= 50 and found.timestamp >= records[100].timestamp
        consumer.seek(tp, 140)
        tail = await asyncio.wait_for(consumer.getone(tp), TIMEOUT)
        assert tail.offset == 140
    finally:
        await consumer.stop()


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
def test_round_trip(broker: BrokerProcess, topic_name: str, compression: str | None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(TIMEOUT)
    asyncio.run(_round_trip(broker.bootstrap, topic_name, compression))


def test_auto_created_topic(broker: BrokerProcess, topic_name: str) -> None:
    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            metadata = await producer.send_and_wait(topic_name, b"first",
                                                    timestamp_ms=BASE_TIMESTAMP)
        finally:
            await producer.stop()
        assert (metadata.partition, metadata.offset) == (0, 0)

        consumer = AIOKafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap,
                                    group_id=None, auto_offset_reset="earliest")
        await consumer.start()
        try:
            message = await asyncio.wait_for(consumer.getone(), TIMEOUT)
        finally:
            await consumer.stop()
        assert (message.value, message.timestamp) == (b"first", BASE_TIMESTAMP)

    asyncio.run(run())
