"""``gregor groups``: what it prints is compared with the truth, as a real client and
the broker know it; what it changes is checked with a real client afterwards."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from group_clients import (
    TIMEOUT,
    PollingConsumer,
    create_topic,
    group_consumer,
    produce,
    wait_for_assignments,
    wait_until,
)
from test_cli import fails, ok

from gregor.broker.process import BrokerProcess


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def _rows(output: str, first_header: str) -> list[dict[str, str]]:
    """The table that starts with the header line whose first column is ``first_header``."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [first_header])
    headers = lines[start].split()
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append(dict(zip(headers, line.split(), strict=True)))
    return rows


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = group_consumer(bootstrap, group)
    try:
        return [tp.offset for tp in consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT)]
    finally:
        consumer.close()


def test_list_and_describe_show_members_offsets_lag_and_lead(
        broker: BrokerProcess, topic_name: str, group: str) -> None:
    create_topic(broker.bootstrap, topic_name, 3)
    produce(broker.bootstrap, topic_name, 30, 3)
    members = [PollingConsumer(broker.bootstrap, group, [topic_name], commit_each=True,
                               **{"client.id": f"app{i}"}) for i in range(2)]
    try:
        wait_for_assignments(members, 3, [1, 2])
        wait_until(lambda: sum(len(m.committed_values) for m in members) == 30,
                   what="30 commits")
        # Move partition 0's log start to 4: its lead shrinks to 10 - 4.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.delete_records([TopicPartition(topic_name, 0, 4)]).values():
            future.result(TIMEOUT)
        assert group in ok(broker, "groups", "list").split()
        listed = {row["GROUP"]: row["STATE"]
                  for row in _rows(ok(broker, "groups", "list", "--state"), "GROUP")}
        assert listed[group] == "Stable"

        output = ok(broker, "groups", "describe", group)
        assert f"Consumer group '{group}' is Stable with 2 member(s), assignor range" in output
        owners = {p: m for m in members for p in m.partitions()}
        rows = _rows(output, "GROUP")
        assert [(r["TOPIC"], r["PARTITION"]) for r in rows] == [(topic_name, str(p))
                                                                for p in range(3)]
        for row in rows:
            owner = owners[int(row["PARTITION"])]
            assert (row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"]) == ("10", "10", "0")
            assert row["LEAD"] == ("6" if row["PARTITION"] == "0" else "10")
            assert (row["CLIENT-ID"], row["HOST"]) == (owner.client_id, "/127.0.0.1")
        member_rows = {r["CLIENT-ID"]: r for r in _rows(output, "CONSUMER-ID")}
        for member in members:
            row = member_rows[member.client_id]
            assert row["GROUP-INSTANCE-ID"] == "-"
            assert row["#PARTITIONS"] == str(len(member.partitions()))
            expected = ",".join(str(p) for p in sorted(member.partitions()))
            assert row["ASSIGNMENT"] == f"{topic_name}({expected})"
        # Offsets cannot be reset under active members, nor the group deleted.
        assert "inactive" in fails(broker, "groups", "reset-offsets", group, "--topic",
                                   topic_name, "--to-earliest", "--execute")
        assert "active members" in fails(broker, "groups", "delete", group)
    finally:
        for member in members:
            member.close()
    produce(broker.bootstrap, topic_name, 6, 3, start=30)
    output = ok(broker, "groups", "describe", group)
    assert f"Consumer group '{group}' has no active members." in output
    rows = _rows(output, "GROUP")
    assert [(r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"], r["CONSUMER-ID"])
            for r in rows] == [("10", "12", "2", "-")] * 3


def test_reset_offsets_is_a_dry_run_unless_executed(broker: BrokerProcess, topic_name: str,
                                                    group: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    produce(broker.bootstrap, topic_name, 20, 2)
    commit = group_consumer(broker.bootstrap, group)
    commit.commit(offsets=[TopicPartition(topic_name, 0, 5), TopicPartition(topic_name, 1, 7)],
                  asynchronous=False)
    commit.close()

    def reset(*target: str, execute: bool = False) -> list[str]:
        args = ["groups", "reset-offsets", group, "--topic", topic_name, *target]
        output = ok(broker, *args, *(["--execute"] if execute else []))
        return [row["NEW-OFFSET"] for row in _rows(output, "GROUP")]

    assert reset("--to-earliest") == ["0", "0"]
    assert _committed(broker.bootstrap, group, topic_name, 2) == [5, 7]  # dry run
    assert reset("--to-earliest", execute=True) == ["0", "0"]
    assert _committed(broker.bootstrap, group, topic_name, 2) == [0, 0]
    assert reset("--to-latest", execute=True) == ["10", "10"]
    assert reset("--shift-by", "-3", execute=True) == ["7", "7"]
    assert reset("--shift-by", "100") == ["10", "10"]  # kept inside the log
    assert reset("--to-offset", "4", execute=True) == ["4", "4"]
    assert _committed(broker.bootstrap, group, topic_name, 2) == [4, 4]
    output = ok(broker, "groups", "reset-offsets", group, "--topic", f"{topic_name}:1",
                "--to-offset", "1", "--execute")
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in _rows(output, "GROUP")] == [("1", "1")]
    assert _committed(broker.bootstrap, group, topic_name, 2) == [4, 1]
    assert "no partition 5" in fails(broker, "groups", "reset-offsets", group, "--topic",
                                     f"{topic_name}:5", "--to-earliest")
    assert "unknown topic" in fails(broker, "groups", "reset-offsets", group, "--topic",
                                    "no-such-topic", "--to-earliest")


def test_reset_offsets_to_a_datetime(broker: BrokerProcess, topic_name: str,
                                     group: str) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    base = 1_600_000_000_000  # 2020-09-13T12:26:40Z
    for i in range(10):
        producer.produce(topic_name, value=b"%d" % i, timestamp=base + i * 1000)
    assert producer.flush(TIMEOUT) == 0

    def reset(moment: str) -> str:
        output = ok(broker, "groups", "reset-offsets", group, "--topic", topic_name,
                    "--to-datetime", moment, "--execute")
        return _rows(output, "GROUP")[0]["NEW-OFFSET"]

    assert reset("2020-09-13T12:26:45+00:00") == "5"
    assert reset("2020-09-13T12:26:45.500+00:00") == "6"
    assert reset("2000-01-01T00:00:00+00:00") == "0"
    assert reset("2030-01-01T00:00:00+00:00") == "10"  # after every record: the log end
    assert _committed(broker.bootstrap, group, topic_name, 1) == [10]
    assert "ISO 8601" in fails(broker, "groups", "reset-offsets", group, "--topic", topic_name,
                               "--to-datetime", "yesterday")


def test_delete_groups(broker: BrokerProcess, topic_name: str, group: str) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    commit = group_consumer(broker.bootstrap, group)
    commit.commit(offsets=[TopicPartition(topic_name, 0, 0)], asynchronous=False)
    commit.close()
    assert group in ok(broker, "groups", "list").split()
    assert ok(broker, "groups", "delete", group) == f"Deleted consumer group {group}.\n"
    assert group not in ok(broker, "groups", "list").split()
    assert _committed(broker.bootstrap, group, topic_name, 1) == [-1001]  # no offset left
    assert "does not exist" in fails(broker, "groups", "delete", group)
    assert "does not exist" in fails(broker, "groups", "describe", group)
