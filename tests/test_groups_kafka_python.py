"""Consumer groups with kafka-python 3, alone and mixed with librdkafka members.

kafka-python runs its own heartbeat thread and assignors; a group of both clients
works when their assignors agree on a protocol name ("range" here), since the
broker only passes the leader's choice through.
"""

from __future__ import annotations

import logging
import threading
import uuid

import pytest
from group_clients import (
    TIMEOUT,
    PollingConsumer,
    create_topic,
    produce,
    subscribe_when_known,
    wait_until,
)
from kafka import KafkaConsumer
from kafka.coordinator.assignors.range import RangePartitionAssignor

from gregor.broker.process import BrokerProcess


class KafkaPythonMember:
    """A kafka-python group member polled by a thread of its own."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], **config: object) -> None:
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
            session_timeout_ms=6000, heartbeat_interval_ms=500, metadata_max_age_ms=1000,
            **config)
        subscribe_when_known(self.consumer, topics)
        self.values: list[bytes] = []
        self.assignment: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for records in self.consumer.poll(timeout_ms=100).values():
                self.values.extend(r.value for r in records)
            self.assignment = {tp.partition for tp in self.consumer.assignment()}

    def partitions(self) -> set[int]:
        return self.assignment

    def close(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT)
        self.consumer.close()


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def _shared(members: list, partitions: int, sizes: list[int]) -> bool:
    held = [m.partitions() for m in members]
    return (sorted(p for h in held for p in h) == list(range(partitions))
            and sorted(len(h) for h in held) == sorted(sizes))


def _group_log(broker: BrokerProcess, group: str) -> str:
    return "\n".join(line for line in broker.log_tail(100_000).splitlines() if group in line)


def test_kafka_python_members_share_and_rebalance(broker: BrokerProcess, topic_name: str,
                                                  group: str,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    # Should it fail again: the members' joins, rejoins and heartbeat errors are shown
    # with the failure, and what the coordinator did with the group is in its message.
    coordinator_log = logging.getLogger("kafka.coordinator")
    caplog.set_level(min(logging.INFO, coordinator_log.getEffectiveLevel()), coordinator_log.name)
    create_topic(broker.bootstrap, topic_name, 6)
    produce(broker.bootstrap, topic_name, 60, 6)
    members = [KafkaPythonMember(broker.bootstrap, group, [topic_name]) for _ in range(3)]
    try:
        wait_until(lambda: _shared(members, 6, [2, 2, 2]), what="2 partitions each")
        leaver = members.pop()
        leaver.close()
        wait_until(lambda: _shared(members, 6, [3, 3]), what="3 partitions each after a leave")
        # The leaver committed what it consumed (auto-commit) before it left.
        wait_until(lambda: len({v for m in [*members, leaver] for v in m.values}) == 60,
                   what="every record")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the coordinator's log of the group:\n"
                             f"{_group_log(broker, group)}") from exc
    finally:
        for member in members:
            member.close()


def test_mixed_group_of_kafka_python_and_librdkafka(broker: BrokerProcess, topic_name: str,
                                                     group: str) -> None:
    create_topic(broker.bootstrap, topic_name, 4)
    produce(broker.bootstrap, topic_name, 400, 4)
    python_member = KafkaPythonMember(broker.bootstrap, group, [topic_name],
                                      partition_assignment_strategy=[RangePartitionAssignor])
    rdkafka_member = PollingConsumer(broker.bootstrap, group, [topic_name],
                                     **{"partition.assignment.strategy": "range"})
    members = [python_member, rdkafka_member]
    try:
        wait_until(lambda: _shared(members, 4, [2, 2]), what="2 partitions each")
        wait_until(lambda: len(python_member.values) + len(rdkafka_member.received()) >= 400,
                   what="every record")
        values = python_member.values + rdkafka_member.received()
        assert sorted(values) == sorted(b"%d" % n for n in range(400))
    finally:
        python_member.close()
        rdkafka_member.close()
