"""The fault tests' checker catches each anomaly it claims to: on made-up histories
holding exactly one anomaly each, then end to end against a real broker."""

from __future__ import annotations

from checker import Acked, LoadGenerator, find_anomalies, read_partitions
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.broker.process import BrokerProcess


def acked(*entries: tuple[int, int, str]) -> list[Acked]:
    return [Acked(p, o, v.encode()) for p, o, v in entries]


def read(*entries: tuple[int, int, str]) -> dict[int, list[tuple[int, bytes]]]:
    result: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}
    for p, o, v in entries:
        result[p].append((o, v.encode()))
    return result


def test_a_faithful_history_has_no_anomaly() -> None:
    found = find_anomalies(acked((0, 0, "v-0"), (1, 0, "v-1"), (0, 1, "v-2")),
                           read((0, 0, "v-0"), (0, 1, "v-2"), (1, 0, "v-1"),
                                (1, 1, "v-3")))  # v-3: sent, never acknowledged
    assert found.none, found


def test_lost_write() -> None:
    found = find_anomalies(acked((0, 0, "v-0"), (0, 1, "v-1")), read((0, 0, "v-0")))
    assert found.lost == acked((0, 1, "v-1"))
    assert not (found.moved or found.duplicated or found.conflicting or found.nonmonotonic)


def test_value_at_another_offset_than_acknowledged() -> None:
    found = find_anomalies(acked((0, 0, "v-0"), (0, 1, "v-1")),
                           read((0, 0, "v-0"), (0, 1, "x-9"), (0, 2, "v-1")))
    assert found.moved == [(Acked(0, 1, b"v-1"), [(0, 2)])]
    assert found.conflicting == {(0, 1): [b"v-1", b"x-9"]}  # the ack and the log disagree
    assert not (found.lost or found.duplicated or found.nonmonotonic)


def test_an_acknowledgement_without_an_offset_proves_nothing() -> None:
    found = find_anomalies(acked((0, 0, "v-0"), (0, -1, "v-1")),
                           read((0, 0, "v-0"), (0, 1, "v-1")))
    assert found.moved == [(Acked(0, -1, b"v-1"), [(0, 1)])]
    assert not (found.lost or found.duplicated or found.conflicting or found.nonmonotonic)


def test_duplicate() -> None:
    found = find_anomalies(acked((0, 0, "v-0")), read((0, 0, "v-0"), (0, 1, "v-0")))
    assert found.duplicated == {b"v-0": [(0, 0), (0, 1)]}
    assert not (found.lost or found.moved or found.conflicting or found.nonmonotonic)


def test_a_duplicate_of_an_unacknowledged_record_counts_too() -> None:
    found = find_anomalies([], read((0, 0, "v-7"), (1, 0, "v-7")))
    assert found.duplicated == {b"v-7": [(0, 0), (1, 0)]}


def test_two_values_acknowledged_at_one_offset() -> None:
    """Split brain: two leaders each acknowledged a write at offset 0; one survived."""
    found = find_anomalies(acked((0, 0, "v-0"), (1, 0, "v-1")) + acked((0, 0, "w-0")),
                           read((0, 0, "w-0"), (1, 0, "v-1")))
    assert found.conflicting == {(0, 0): [b"v-0", b"w-0"]}
    assert found.lost == acked((0, 0, "v-0"))


def test_acknowledged_offsets_going_backwards() -> None:
    """v-5 was sent before v-4 (sequence order) yet got a later offset in the log and in
    the acknowledgements: an idempotent producer reordered."""
    found = find_anomalies(acked((0, 0, "v-5"), (0, 1, "v-4")),
                           read((0, 0, "v-5"), (0, 1, "v-4")))
    assert found.nonmonotonic == [(0, "acknowledged", 1, 0)]
    assert not (found.lost or found.moved or found.duplicated or found.conflicting)


def test_a_read_going_backwards() -> None:
    found = find_anomalies(acked((0, 0, "v-0"), (0, 1, "v-1")),
                           read((0, 0, "v-0"), (0, 1, "v-1"), (0, 1, "v-1")))
    assert (0, "read", 1, 1) in found.nonmonotonic
    assert found.duplicated == {}  # the same place read twice is not a second copy
    assert not (found.lost or found.moved or found.conflicting)


def test_end_to_end_against_a_broker(broker: BrokerProcess, topic_name: str) -> None:
    """A real run has no anomaly; deleting acknowledged records shows them lost."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    with LoadGenerator(broker.bootstrap, topic_name) as load:
        load.wait_for_acks(500)
    assert not load.errors
    stored = read_partitions(broker.bootstrap, topic_name, 2)
    assert sum(len(records) for records in stored.values()) == len(load.acked)
    assert find_anomalies(load.acked, stored).none

    admin.delete_records([TopicPartition(topic_name, 0, 10)])[
        TopicPartition(topic_name, 0, 10)].result(30)
    found = find_anomalies(load.acked, read_partitions(broker.bootstrap, topic_name, 2))
    assert found.lost == [a for a in load.acked if a.partition == 0 and a.offset < 10]
    assert not (found.moved or found.duplicated or found.conflicting or found.nonmonotonic)
