"""A cluster whose brokers talk to each other over a SASL_SSL listener of their own
(``inter.broker.listener.name``, SCRAM-SHA-512, the brokers' user created in ZooKeeper
before they start, as Kafka's documentation has it): followers fetch and transaction
coordinators send their markers over it, authenticated."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from harness import WAIT_S, Cluster
from kazoo.client import KazooClient

from gregor.cluster.zookeeper_server import ZooKeeperServer
from gregor.security.scram import ScramCredential

BROKER_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
               'username="broker" password="{password}";')


def _secured_cluster(zookeeper: ZooKeeperServer, work: Path, certs: Path,
                     password: str) -> Cluster:
    cluster = Cluster(zookeeper, work, **{
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config":
            BROKER_JAAS.format(password=password),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "broker.pem"),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.pem"),
        # The brokers are reached by IP address here; the certificate names localhost.
        "ssl.endpoint.identification.algorithm": "",
    })
    for broker in cluster.brokers.values():
        broker.listeners = f"PLAINTEXT://{broker.host}:0,INTERNAL://{broker.host}:0"
    zk = KazooClient(zookeeper.connect)
    zk.start(WAIT_S)
    try:
        credential = ScramCredential.from_password("SCRAM-SHA-512", "broker-secret")
        zk.create(f"{cluster.chroot}/config/users/broker", json.dumps(
            {"version": 1, "config": {"SCRAM-SHA-512": credential.encode()}}).encode(),
            makepath=True)
    finally:
        zk.stop()
        zk.close()
    return cluster


@pytest.fixture
def secured_cluster(zookeeper: ZooKeeperServer, tmp_path: Path, certs: Path
                    ) -> Iterator[Cluster]:
    cluster = _secured_cluster(zookeeper, tmp_path, certs, "broker-secret").start()
    yield cluster
    cluster.stop()


def test_replication_and_transactions_over_the_secured_listener(
        secured_cluster: Cluster, topic_name: str) -> None:
    cluster = secured_cluster
    cluster.create_topic(topic_name, partitions=3, replication=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "transactional.id": f"tx-{topic_name}", "log_level": 0})
    producer.init_transactions(WAIT_S)
    producer.begin_transaction()
    for partition in range(3):
        producer.produce(topic_name, value=f"v{partition}".encode(), partition=partition)
    producer.commit_transaction(WAIT_S)
    # Followers that could not fetch would have left the ISR after replica.lag.time.max.ms
    # (2 s here), and acks=all with min.insync.replicas=2 would have failed.
    time.sleep(3)
    assert all(sorted(cluster.isr(topic_name, partition)) == [1, 2, 3]
               for partition in range(3))
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": topic_name,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "log_level": 0})
    consumer.subscribe([topic_name])
    values: set[bytes] = set()
    deadline = time.monotonic() + WAIT_S
    try:
        while len(values) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.add(message.value())
    finally:
        consumer.close()
    assert values == {b"v0", b"v1", b"v2"}


def test_brokers_with_the_wrong_password_do_not_replicate(
        zookeeper: ZooKeeperServer, tmp_path: Path, certs: Path, topic_name: str) -> None:
    """The inter-broker listener refuses a broker that cannot authenticate: its
    followers fall out of the ISR."""
    cluster = _secured_cluster(zookeeper, tmp_path, certs, "wrong").start()
    try:
        cluster.create_topic(topic_name, partitions=1, replication=3)
        deadline = time.monotonic() + WAIT_S
        while len(cluster.isr(topic_name)) > 1:
            assert time.monotonic() < deadline, "followers stayed in the ISR"
            time.sleep(0.5)
    finally:
        cluster.stop()
