"""Consumer groups with aiokafka, the asyncio client (not one of the issue's named
clients: it checks that the coordinator is not tuned to librdkafka and kafka-python)."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from group_clients import create_topic, produce

from gregor.broker.process import BrokerProcess


def test_aiokafka_members_share_partitions_and_commit(broker: BrokerProcess,
                                                      topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 4)
    produce(broker.bootstrap, topic_name, 40, 4)

    async def run() -> None:
        members = [AIOKafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap,
                                    group_id=f"aio-{topic_name}", auto_offset_reset="earliest",
                                    enable_auto_commit=False, session_timeout_ms=6000,
                                    heartbeat_interval_ms=500) for _ in range(2)]
        for member in members:
            await member.start()
        try:
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while (len(values) < 40 or any(len(m.assignment()) != 2 for m in members)) \
                    and time.monotonic() < deadline:
                for member in members:
                    for tp, records in (await member.getmany(timeout_ms=100)).items():
                        values.extend(r.value for r in records)
                        await member.commit({tp: records[-1].offset + 1})
            assert sorted(values) == sorted(b"%d" % n for n in range(40))
            assert sorted(tp.partition for m in members for tp in m.assignment()) == [0, 1, 2, 3]
            for partition in range(4):
                assert await members[0].committed(TopicPartition(topic_name, partition)) == 10
        finally:
            for member in members:
                await member.stop()

    asyncio.run(run())
