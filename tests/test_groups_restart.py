"""Committed offsets and group state outlive the broker process: they are read back
from ``__consumer_offsets`` after a clean restart and after ``kill -9``."""

from __future__ import annotations

from collections import Counter

import pytest
from group_clients import (
    TIMEOUT,
    PollingConsumer,
    create_topic,
    produce,
    subscribe_when_known,
    wait_for_assignments,
    wait_until,
)
from kafka import KafkaConsumer, OffsetAndMetadata
from kafka import TopicPartition as KafkaTopicPartition

from gregor.broker.process import BrokerProcess


@pytest.mark.parametrize("stop", ["restart", "kill"])
def test_committed_offsets_survive_the_broker(fresh_broker: BrokerProcess, topic_name: str,
                                              stop: str) -> None:
    fresh_broker.start()
    create_topic(fresh_broker.bootstrap, topic_name, 2)
    produce(fresh_broker.bootstrap, topic_name, 20, 2)
    writer = KafkaConsumer(bootstrap_servers=fresh_broker.bootstrap, group_id="survivors",
                           enable_auto_commit=False)
    writer.assign([KafkaTopicPartition(topic_name, 0), KafkaTopicPartition(topic_name, 1)])
    writer.commit({KafkaTopicPartition(topic_name, 0): OffsetAndMetadata(6, "six", -1),
                   KafkaTopicPartition(topic_name, 1): OffsetAndMetadata(9, "nine", -1)})
    writer.close()
    if stop == "kill":
        fresh_broker.kill()
        fresh_broker.start()
    else:
        fresh_broker.restart()
    reader = KafkaConsumer(bootstrap_servers=fresh_broker.bootstrap, group_id="survivors",
                           enable_auto_commit=False)
    try:
        committed = {p: reader.committed(KafkaTopicPartition(topic_name, p), metadata=True)
                     for p in (0, 1)}
        assert {p: (c.offset, c.metadata) for p, c in committed.items()} == {
            0: (6, "six"), 1: (9, "nine")}
        subscribe_when_known(reader, [topic_name])
        values: list[bytes] = []
        wait_until(lambda: _poll(reader, values) >= 5, what="the uncommitted records")
        # Partition 0 holds even values at offsets 0..9, partition 1 odd ones.
        assert sorted(values) == sorted([b"12", b"14", b"16", b"18", b"19"])
    finally:
        reader.close()


def _poll(consumer: KafkaConsumer, into: list[bytes]) -> int:
    for records in consumer.poll(timeout_ms=200).values():
        into.extend(r.value for r in records)
    return len(into)


def test_group_keeps_consuming_through_a_broker_crash(fresh_broker: BrokerProcess,
                                                      topic_name: str) -> None:
    """Members committing after each record ride out a ``kill -9`` of the broker: the
    restarted coordinator resumes the Stable group from __consumer_offsets (so no
    rebalance), and no record is skipped or, once committed, delivered again."""
    fresh_broker.start()
    create_topic(fresh_broker.bootstrap, topic_name, 4)
    produce(fresh_broker.bootstrap, topic_name, 1000, 4)
    members = [PollingConsumer(fresh_broker.bootstrap, "crash", [topic_name], commit_each=True)
               for _ in range(2)]
    try:
        wait_for_assignments(members, 4, [2, 2])
        wait_until(lambda: sum(len(m.received()) for m in members) >= 1000, what="1000 records")
        rebalances = [(m.assign_calls, m.revoke_calls) for m in members]
        fresh_broker.kill()
        fresh_broker.start()
        produce(fresh_broker.bootstrap, topic_name, 1000, 4, start=1000)

        def seen() -> list[bytes]:
            return [v for m in members for v in m.received()]
        wait_until(lambda: len(set(seen())) >= 2000, timeout=TIMEOUT, what="every record")
        assert set(seen()) == {b"%d" % n for n in range(2000)}
        deliveries = Counter(seen())
        committed = set().union(*(m.committed_values for m in members))
        assert not {v for v in committed if deliveries[v] > 1}
        assert [(m.assign_calls, m.revoke_calls) for m in members] == rebalances
    finally:
        for member in members:
            member.close()
