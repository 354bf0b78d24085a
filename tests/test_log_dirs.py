"""Several log directories on one broker (``log.dirs`` with more than one path, JBOD),
through unchanged clients: placement of new partitions, DescribeLogDirs of each
directory, AlterReplicaLogDirs moving a replica while it is written to, restarts that
find each partition where it is, and Kafka's refusal to start with a partition in two
directories.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import kafka.errors
import pytest
from clients import (
    PRODUCE_VERSION,
    TIMEOUT,
    WireConnection,
    confluent_consume,
    confluent_consumer,
    make_batch,
    produce_request,
    versioned_request,
)
from confluent_kafka import Producer, TopicPartition
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient, NewTopic
from test_cli import gregor, ok

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

# Low enough that a move of a few megabytes is seen under way.
_MOVE_RATE = 400_000


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return (tmp_path / "disk-a").resolve(), (tmp_path / "disk-b").resolve()


@pytest.fixture
def jbod(tmp_path: Path, dirs: tuple[Path, Path]) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", overrides={
        "log.dirs": ",".join(map(str, dirs)),
        "replica.alter.log.dirs.io.max.bytes.per.second": str(_MOVE_RATE)})
    process.start()
    yield process
    process.kill()


def _admin(broker: BrokerProcess) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap,
                            request_timeout_ms=int(TIMEOUT * 1000))


def _create(broker: BrokerProcess, topic: str, partitions: int) -> None:
    admin = _admin(broker)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def _placement(admin: KafkaAdminClient, topic: str) -> dict[str, list[tuple[int, bool]]]:
    """Each directory's replicas of ``topic``: (partition, is a future replica)."""
    (described,) = admin.describe_log_dirs()
    found: dict[str, list[tuple[int, bool]]] = {}
    for log_dir in described["log_dirs"]:
        assert log_dir["error_code"] == 0
        found[log_dir["log_dir"]] = sorted(
            (p["partition_index"], p["is_future_key"])
            for t in log_dir["topics"] if t["name"] == topic for p in t["partitions"])
    return found


def _produce(broker: BrokerProcess, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, str(i).encode().ljust(1000, b"."), partition=0)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(TIMEOUT) == 0


def _read_back(broker: BrokerProcess, topic: str, count: int) -> None:
    """Every record at its offset, once."""
    consumer = confluent_consumer(broker.bootstrap)
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        messages = confluent_consume(consumer, count)
    finally:
        consumer.close()
    assert [(m.offset(), int(m.value().rstrip(b"."))) for m in messages] == [
        (i, i) for i in range(count)]


def test_new_partitions_go_to_the_directory_with_fewest(jbod: BrokerProcess,
                                                        dirs: tuple[Path, Path]) -> None:
    admin = _admin(jbod)
    try:
        admin.create_topics([NewTopic("spread", 3, 1)])
        placed = _placement(admin, "spread")
        assert sorted(map(len, placed.values())) == [1, 2]
        admin.create_topics([NewTopic("third", 1, 1)])
        fewer = min(placed, key=lambda d: len(placed[d]))
        assert _placement(admin, "third")[fewer] == [(0, False)]
        for d in dirs:
            assert {p.name for p in d.iterdir() if p.name.startswith("spread-")} == {
                f"spread-{i}" for i, _ in placed[str(d)]}
    finally:
        admin.close()


def test_alter_replica_log_dirs_errors_and_preferred_directory(
        jbod: BrokerProcess, dirs: tuple[Path, Path]) -> None:
    """As Kafka: an unknown directory is LOG_DIR_NOT_FOUND; a partition not hosted yet
    is REPLICA_NOT_AVAILABLE, and is created in the directory named when it comes."""
    admin = _admin(jbod)
    try:
        first = TopicPartitionReplica("later", 0, jbod.broker_id)
        assert admin.alter_replica_log_dirs({first: "/nowhere"}) == {
            first: kafka.errors.LogDirNotFoundError}
        # A path no directory can have (bad input): refused the same way.
        assert admin.alter_replica_log_dirs({first: "/no\0where"}) == {
            first: kafka.errors.LogDirNotFoundError}
        # The second directory, where the fewest-partitions rule would not put it.
        assert admin.alter_replica_log_dirs({first: str(dirs[1])}) == {
            first: kafka.errors.ReplicaNotAvailableError}
        admin.create_topics([NewTopic("later", 1, 1)])
        assert _placement(admin, "later") == {str(dirs[0]): [], str(dirs[1]): [(0, False)]}
    finally:
        admin.close()


def test_replica_moves_while_written_and_stays_after_restart(
        jbod: BrokerProcess, dirs: tuple[Path, Path]) -> None:
    admin = _admin(jbod)
    try:
        admin.create_topics([NewTopic("moving", 1, 1)])
        _produce(jbod, "moving", 0, 3000)
        (source,) = [d for d, replicas in _placement(admin, "moving").items() if replicas]
        destination = str(dirs[1]) if source == str(dirs[0]) else str(dirs[0])
        replica = TopicPartitionReplica("moving", 0, jbod.broker_id)
        assert admin.alter_replica_log_dirs({replica: destination}) == {
            replica: kafka.errors.NoError}
        # Under way: the current replica where it was, the future one in the destination.
        assert _placement(admin, "moving") == {source: [(0, False)],
                                               destination: [(0, True)]}
        _produce(jbod, "moving", 3000, 2000)  # written to while it moves
        deadline = time.monotonic() + 60
        while _placement(admin, "moving") != {source: [], destination: [(0, False)]}:
            assert time.monotonic() < deadline, _placement(admin, "moving")
            time.sleep(0.5)
        assert not [p for p in Path(source).iterdir() if p.name.startswith("moving-")]
        _read_back(jbod, "moving", 5000)
    finally:
        admin.close()
    jbod.stop()
    jbod.start()
    admin = _admin(jbod)
    try:
        assert _placement(admin, "moving") == {source: [], destination: [(0, False)]}
        _produce(jbod, "moving", 5000, 10)
        _read_back(jbod, "moving", 5010)
    finally:
        admin.close()


def test_a_partition_in_two_directories_stops_the_start(jbod: BrokerProcess,
                                                        dirs: tuple[Path, Path]) -> None:
    _create(jbod, "twice", 1)
    _produce(jbod, "twice", 0, 10)
    jbod.stop()
    (found,) = [d / "twice-0" for d in dirs if (d / "twice-0").exists()]
    other = dirs[1] if found.parent == dirs[0] else dirs[0]
    shutil.copytree(found, other / "twice-0")
    with pytest.raises(RuntimeError, match="Duplicate log directories for twice-0"):
        jbod.start()


def test_a_directory_unusable_at_start_leaves_only_its_partitions_offline(
        jbod: BrokerProcess, dirs: tuple[Path, Path]) -> None:
    """Its partitions are answered KAFKA_STORAGE_ERROR, not made again empty in the
    other directory; the other directory's serve; DescribeLogDirs shows it offline."""
    _create(jbod, "halves", 2)
    jbod.stop()
    lost = dirs[1] if (dirs[1] / "halves-1").exists() else dirs[0]
    kept_index = 0 if (lost / "halves-1").exists() else 1
    shutil.rmtree(lost)
    lost.write_text("an unmounted disk\n")
    jbod.start()
    with WireConnection(jbod.bootstrap) as connection:
        errors = {}
        for index in (0, 1):
            answer = connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
                "halves", index, make_batch([b"v"])))
            errors[index] = answer.responses[0].partition_responses[0].error_code
        key = ApiKey.DESCRIBE_LOG_DIRS
        described = connection.request(key, 4, versioned_request(
            key, 4, "DescribeLogDirsRequest", topics=None))
    assert errors == {kept_index: ErrorCode.none, 1 - kept_index: ErrorCode.kafka_storage_error}
    assert {r.log_dir: r.error_code for r in described.results} == {
        str(lost): ErrorCode.kafka_storage_error,
        str(dirs[0] if lost == dirs[1] else dirs[1]): ErrorCode.none}


def test_cli_describes_directories_and_moves_a_replica_by_plan(
        jbod: BrokerProcess, dirs: tuple[Path, Path], tmp_path: Path) -> None:
    """``gregor log-dirs describe`` prints kafka-log-dirs.sh's JSON; ``gregor cluster
    reassign`` takes a plan's log_dirs as kafka-reassign-partitions.sh does."""
    _create(jbod, "planned", 1)
    _produce(jbod, "planned", 0, 100)
    lines = ok(jbod, "log-dirs", "describe", "--topic-list", "planned").splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         f"Received log directory information from brokers {jbod.broker_id}"]
    (broker,) = json.loads(lines[2])["brokers"]
    found = {d["logDir"]: d["partitions"] for d in broker["logDirs"]}
    assert set(found) == set(map(str, dirs))
    (source,) = [d for d, partitions in found.items() if partitions]
    assert [(p["partition"], p["isFuture"]) for p in found[source]] == [("planned-0", False)]
    assert found[source][0]["size"] > 100 * 1000
    destination = str(dirs[1]) if source == str(dirs[0]) else str(dirs[0])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "planned", "partition": 0, "replicas": [jbod.broker_id],
         "log_dirs": [destination]}]}))
    out = ok(jbod, "cluster", "reassign", "--execute", "--reassignment-json-file", str(plan))
    assert f"Successfully started log directory move for: planned-0-{jbod.broker_id}" in out
    deadline = time.monotonic() + 60
    while (verified := gregor(jbod, "cluster", "reassign", "--verify",
                              "--reassignment-json-file", str(plan))).returncode != 0:
        assert time.monotonic() < deadline, verified.stdout.decode()
        time.sleep(0.5)
    assert (f"Reassignment of replica planned-0-{jbod.broker_id} completed."
            in verified.stdout.decode())
    _read_back(jbod, "planned", 100)
