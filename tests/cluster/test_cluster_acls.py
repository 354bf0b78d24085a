"""ACLs in a cluster: kept in ZooKeeper in Kafka's layout (so kafka-acls.sh and every
broker share them) and followed by every broker through the change notifications."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient
from harness import WAIT_S, Cluster
from kazoo.client import KazooClient

from gregor.cluster.zookeeper_server import ZooKeeperServer

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret";')


@pytest.fixture
def guarded_cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    """Brokers talk PLAINTEXT among themselves (User:ANONYMOUS, a super user, as are
    clients of that listener); alice comes in on SASL_PLAINTEXT."""
    cluster = Cluster(zookeeper, tmp_path, **{
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS"})
    for broker in cluster.brokers.values():
        broker.listeners = f"PLAINTEXT://{broker.host}:0,SASL_PLAINTEXT://{broker.host}:0"
    cluster.start()
    yield cluster
    cluster.stop()


def _alice_sees(cluster: Cluster, broker_id: int, topic: str) -> bool:
    broker = cluster.brokers[broker_id]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_for("SASL_PLAINTEXT"),
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "alice", "sasl.password": "alice-secret",
                         "log_level": 0})
    found = admin.list_topics(topic, timeout=10).topics[topic]
    return found.error is None or found.error.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED


def _eventually(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_acls_live_in_zookeeper_and_every_broker_enforces_them(
        guarded_cluster: Cluster, topic_name: str) -> None:
    cluster = guarded_cluster
    cluster.create_topic(topic_name, replication=3)
    cluster.create_topic(f"pre-{topic_name}", replication=3)
    assert not _alice_sees(cluster, 2, topic_name)
    subprocess.run([sys.executable, "-m", "gregor.cli.main", "acls", "add", "--topic",
                    topic_name, "--allow-principal", "User:alice", "--operation", "Read",
                    "-b", cluster.brokers[1].bootstrap], check=True, capture_output=True,
                   timeout=WAIT_S)
    zk = KazooClient(cluster.zookeeper.connect + cluster.chroot)
    zk.start(WAIT_S)
    try:
        assert json.loads(zk.get(f"/kafka-acl/Topic/{topic_name}")[0]) == {
            "version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
                                    "operation": "Read", "host": "*"}]}
        notices = [zk.get(f"/kafka-acl-changes/{name}")[0]
                   for name in zk.get_children("/kafka-acl-changes")]
        assert f"Topic:{topic_name}".encode() in notices
        for broker_id in (2, 3):
            _eventually(lambda b=broker_id: _alice_sees(cluster, b, topic_name),
                        f"broker {broker_id} to let alice describe {topic_name}")

        # As kafka-acls.sh --authorizer-properties zookeeper.connect=... writes one.
        zk.create("/kafka-acl-extended/prefixed/Topic/pre-", json.dumps(
            {"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
                                     "operation": "Describe", "host": "*"}]}).encode(),
                  makepath=True)
        zk.create("/kafka-acl-extended-changes/acl_changes_", json.dumps(
            {"version": 1, "resourceType": "Topic", "name": "pre-",
             "patternType": "Prefixed"}).encode(), sequence=True, makepath=True)
        _eventually(lambda: _alice_sees(cluster, 3, f"pre-{topic_name}"),
                    "broker 3 to apply the prefixed ACL")
    finally:
        zk.stop()
        zk.close()
