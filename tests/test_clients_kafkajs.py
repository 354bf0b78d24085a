"""KafkaJS 2.2.4, the Node.js client, against a real broker.

KafkaJS writes its own protocol code, older than the other clients' (ApiVersions v2,
Produce v7, Fetch v11, JoinGroup v5, its own consumer-group state machine and
transaction manager), so it meets the broker's version negotiation and error answers
from another side. Each scenario in ``kafkajs/scenarios.js`` runs in ``node`` and
prints what it saw; the checks here compare it with what confluent-kafka wrote or
reads. scripts/install-kafkajs.sh installs the client (scripts/test.sh runs it).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from clients import TIMEOUT, confluent_consume, confluent_consumer
from confluent_kafka import Producer, TopicPartition
from group_clients import create_topic, produce

from bench.node import kafkajs_installed, node_command
from gregor.broker.process import BrokerProcess

SCENARIOS = Path(__file__).parent / "kafkajs" / "scenarios.js"

pytestmark = pytest.mark.skipif(not kafkajs_installed(),
                                reason="KafkaJS is not installed (scripts/install-kafkajs.sh)")


def _kafkajs(broker: BrokerProcess, scenario: str, **args: object) -> Any:
    command, env = node_command(SCENARIOS, scenario, broker.bootstrap, json.dumps(args))
    result = subprocess.run(command, capture_output=True, timeout=3 * TIMEOUT, check=False,
                            env=env)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return json.loads(result.stdout)


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy"])
def test_kafkajs_writes_what_librdkafka_reads(broker: BrokerProcess, topic_name: str,
                                                compression: str) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    out = _kafkajs(broker, "produce", topic=topic_name, compression=compression, count=250)
    acknowledged = [r for r in out["results"] if r["baseOffset"] is not None]
    assert {r["errorCode"] for r in out["results"]} == {0}
    # Three idempotent sends of 100, 100 and 50, then acks=1; acks=0 gets no offset.
    assert [r["baseOffset"] for r in acknowledged][:4] == [0, 100, 200, 250]

    consumer = confluent_consumer(broker.bootstrap)
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    messages = confluent_consume(consumer, 252)
    consumer.close()
    assert [m.offset() for m in messages] == list(range(252))
    assert [(m.key(), m.value()) for m in messages[:250]] == [
        (b"key%d" % i, f"value {i} é".encode()) for i in range(250)]
    assert [m.headers() for m in messages[:3]] == [
        [("origin", b"kafkajs"), ("n", b"%d" % i)] for i in range(3)]
    assert [(m.key(), m.value()) for m in messages[250:]] == [(None, b"acks 1"),
                                                              (None, b"acks 0")]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy"])
def test_kafkajs_reads_what_librdkafka_wrote(broker: BrokerProcess, topic_name: str,
                                               compression: str) -> None:
    create_topic(broker.bootstrap, topic_name, 3)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                         "compression.type": compression, "enable.idempotence": True})
    for i in range(300):
        producer.produce(topic_name, key=b"k%d" % i, value=b"v%d" % i, partition=i % 3,
                         headers=[("i", b"%d" % i)])
    assert producer.flush(TIMEOUT) == 0

    group = f"{topic_name}-group"
    out = _kafkajs(broker, "consume", topic=topic_name, group=group, count=300)
    seen = {(m["partition"], m["offset"]): m for m in out["messages"]}
    assert len(out["messages"]) == len(seen) == 300
    for i in range(300):
        message = seen[(i % 3, i // 3)]
        assert (message["key"], message["value"], message["headers"]) == (
            f"k{i}", f"v{i}", {"i": str(i)})

    # What it committed is what librdkafka's group member starts from.
    reader = confluent_consumer(broker.bootstrap, **{"group.id": group})
    committed = reader.committed([TopicPartition(topic_name, p) for p in range(3)], TIMEOUT)
    reader.close()
    assert [tp.offset for tp in committed] == [100, 100, 100]


def test_kafkajs_group_shares_partitions_and_rebalances(broker: BrokerProcess,
                                                        topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 6)
    produce(broker.bootstrap, topic_name, 60, 6)
    out = _kafkajs(broker, "group", topic=topic_name, group=f"{topic_name}-group", count=60)

    shared = out["shared"]
    assert shared["a"] and shared["b"], shared
    assert sorted(shared["a"] + shared["b"]) == list(range(6))
    assert sorted(out["first"], key=int) == [str(n) for n in range(60)]
    # b left: a holds every partition and alone reads what came after.
    assert out["alone"] == list(range(6))
    assert sorted(out["after"]) == sorted(f"later {i}" for i in range(60))
    assert out["afterMembers"] == ["a"]


def test_kafkajs_admin(broker: BrokerProcess, topic_name: str) -> None:
    out = _kafkajs(broker, "admin", topic=topic_name, group=f"{topic_name}-group")
    host, port = broker.bootstrap.rsplit(":", 1)
    assert out["cluster"]["brokers"] == [[out["cluster"]["controller"], host, int(port)]]
    assert out["created"] is True and out["createdAgain"] is False
    assert out["configs"] == {"retention.ms": "7200000", "cleanup.policy": "delete"}
    assert out["partitions"] == [0, 1, 2, 3]
    assert out["offsets"] == [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 3]]
    # The first record at or after the time: offset 1 in partition 3; the end elsewhere.
    assert out["byTimestamp"] == [[0, 0], [1, 0], [2, 0], [3, 1]]
    assert out["committed"] == [[0, -1], [1, -1], [2, -1], [3, 2]]
    assert out["groups"] == [f"{topic_name}-group"]
    assert out["described"] == [[f"{topic_name}-group", "Empty"]]
    assert out["deletedGroups"] == [[f"{topic_name}-group", 0]]
    assert out["afterDelete"] is False


def test_kafkajs_transactions(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    source = f"{topic_name}-source"
    create_topic(broker.bootstrap, source, 1)
    group = f"{topic_name}-group"
    out = _kafkajs(broker, "transactions", topic=topic_name, group=group, source=source)

    committed = sorted(f"committed-{t} {i}" for t in "ab" for i in range(4))
    # Neither the aborted transaction nor the one still open when it read.
    assert out["committedRead"] == committed
    assert out["offsets"] == [[0, 7]]

    # read_uncommitted sees the aborted records too, and the open one that was aborted
    # after; control records are never delivered.
    consumer = confluent_consumer(broker.bootstrap, **{"isolation.level": "read_uncommitted"})
    consumer.assign([TopicPartition(topic_name, p, 0) for p in range(2)])
    values = sorted(m.value().decode() for m in confluent_consume(consumer, 13))
    consumer.close()
    assert values == sorted([*committed, *(f"aborted {i}" for i in range(4)), "open"])
