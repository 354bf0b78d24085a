"""scripts/run-cluster.sh as the README has users run it: it starts ZooKeeper and three
brokers, a topic replicated three times takes records and gives them back
(confluent-kafka), and SIGTERM (as Ctrl-C) stops every process it started, cleanly; with
``--secure``, the same over SASL_SSL with the client settings it writes, and its schema
registry a SCRAM client of the brokers that ACLs hold to its own topic.

It runs on a loopback address and in a data directory of its own (tests/run_cluster.py).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from run_cluster import WAIT_S, RunningCluster, running_cluster, started_by

from gregor.storage.log_manager import CLEAN_SHUTDOWN_FILE

pytestmark = pytest.mark.timeout(240)

RECORDS = 300


@pytest.fixture
def running(tmp_path: Path) -> Iterator[RunningCluster]:
    yield from running_cluster(RunningCluster(tmp_path))


@pytest.fixture
def running_secure(tmp_path: Path) -> Iterator[RunningCluster]:
    yield from running_cluster(RunningCluster(tmp_path, "--secure"))


def _registers_a_schema(running: RunningCluster, admin: AdminClient) -> None:
    """A schema registered through the script's registry reads back; its _schemas topic
    is replicated on the three brokers."""
    registry = SchemaRegistryClient({"url": f"http://{running.host}:8081"})
    schema_id = registry.register_schema("replicated-value", Schema(
        '{"type": "record", "name": "R", "fields": []}', "AVRO"))
    assert registry.get_latest_version("replicated-value").schema_id == schema_id
    schemas = admin.list_topics("_schemas", timeout=WAIT_S).topics["_schemas"]
    assert len(schemas.partitions[0].replicas) == 3


def test_the_cluster_replicates_and_stops_cleanly(running: RunningCluster) -> None:
    running.wait_ready()
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    assert len(admin.list_topics(timeout=WAIT_S).brokers) == 3
    admin.create_topics([NewTopic("replicated", 3, 3)])["replicated"].result(WAIT_S)

    producer = Producer({"bootstrap.servers": running.bootstrap, "acks": "all",
                         "enable.idempotence": True})
    for n in range(RECORDS):
        producer.produce("replicated", value=b"%d" % n, partition=n % 3)
    assert producer.flush(WAIT_S) == 0
    described = admin.list_topics("replicated", timeout=WAIT_S).topics["replicated"]
    for partition in described.partitions.values():
        assert sorted(partition.replicas) == sorted(partition.isrs) == [1, 2, 3]

    consumer = Consumer({"bootstrap.servers": running.bootstrap, "group.id": "read-back",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition("replicated", p, 0) for p in range(3)])
    values: list[bytes] = []
    while len(values) < RECORDS:
        message = consumer.poll(WAIT_S)
        assert message is not None, f"only {len(values)} of {RECORDS} records came back"
        assert message.error() is None, message.error()
        values.append(message.value())
    consumer.close()
    assert sorted(values) == sorted(b"%d" % n for n in range(RECORDS))
    # The script's schema registry serves Confluent's API, its state in the cluster.
    _registers_a_schema(running, admin)
    del producer, admin  # gone before the brokers, which they would keep calling


    assert running.stop() == 128 + signal.SIGTERM, "".join(running.output)
    assert started_by(running.data) == []
    for broker in (1, 2, 3):
        assert (running.data / f"broker-{broker}" / CLEAN_SHUTDOWN_FILE).exists()
        assert f"broker {broker} stopped cleanly" in (
            running.data / f"broker-{broker}.log").read_text()


# The script runs seven more client commands when secured (the registry's user, its
# ACLs, and each broker checked to know the user): on a loaded machine (load 15, two
# clusters at once) it was ready after 4 minutes.
@pytest.mark.timeout(480)
def test_a_secure_cluster_serves_sasl_ssl_with_the_settings_it_prints(
        running_secure: RunningCluster) -> None:
    running = running_secure
    running.wait_ready()
    settings = dict(line.split("=", 1) for line in
                    (running.data / "client.properties").read_text().splitlines())
    assert settings["security.protocol"] == "SASL_SSL"
    assert f"--command-config {running.data / 'client.properties'}" in running.output[-1]
    config = {"bootstrap.servers": running.bootstrap, **settings}
    admin = AdminClient(config)
    admin.create_topics([NewTopic("secured", 3, 3)])["secured"].result(WAIT_S)
    producer = Producer({**config, "acks": "all"})
    for n in range(RECORDS):
        producer.produce("secured", value=b"%d" % n, partition=n % 3)
    assert producer.flush(WAIT_S) == 0
    described = admin.list_topics("secured", timeout=WAIT_S).topics["secured"]
    for partition in described.partitions.values():
        assert sorted(partition.isrs) == [1, 2, 3]  # followers fetch over SASL_SSL too
    # gregor commands take the written settings as Kafka's tools take theirs.
    listed = subprocess.run(
        [sys.executable, "-m", "gregor.cli.main", "topics", "list", "-b", running.bootstrap,
         "--command-config", str(running.data / "client.properties")],
        capture_output=True, text=True, timeout=WAIT_S)
    assert listed.returncode == 0 and "secured" in listed.stdout.split(), listed.stderr
    # The script's schema registry reaches the brokers over SASL_SSL as its own SCRAM
    # user, allowed by ACLs only _schemas and its groups.
    _registers_a_schema(running, admin)
    registry_settings = dict(line.split("=", 1) for line in (
        running.data / "schema-registry.properties").read_text().splitlines())
    assert registry_settings["sasl.mechanism"].startswith("SCRAM-")
    assert registry_settings["sasl.username"] == "schema-registry"
    errors: list[KafkaError] = []
    denied = Producer({**config, **registry_settings, "log_level": 0})
    denied.produce("secured", b"not the registry's", on_delivery=lambda e, _: errors.append(e))
    denied.flush(WAIT_S)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors
    del denied
    # Without the settings, or with a wrong password, nothing is served.
    for refused in ({"bootstrap.servers": running.bootstrap},
                    {**config, "sasl.password": "wrong"}):
        with pytest.raises(KafkaException):
            AdminClient({**refused, "log_level": 0}).list_topics(timeout=3)
    del producer, admin
    assert running.stop() == 128 + signal.SIGTERM, "".join(running.output)
    assert started_by(running.data) == []
