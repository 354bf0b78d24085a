"""SCRAM users in a cluster: stored in ZooKeeper in Kafka's layout and followed by every
broker through the change notifications, whoever wrote them (a broker, or Kafka's own
tools writing ZooKeeper directly)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from harness import WAIT_S, Cluster
from kazoo.client import KazooClient

from gregor.cluster.zookeeper_server import ZooKeeperServer
from gregor.security.scram import ScramCredential


@pytest.fixture
def scram_cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    """Three brokers, each with a SASL_PLAINTEXT listener for clients beside the
    PLAINTEXT one the brokers use among themselves."""
    cluster = Cluster(zookeeper, tmp_path, **{"sasl.enabled.mechanisms": "SCRAM-SHA-256,"
                                              "SCRAM-SHA-512"})
    for broker in cluster.brokers.values():
        broker.listeners = f"PLAINTEXT://{broker.host}:0,SASL_PLAINTEXT://{broker.host}:0"
    cluster.start()
    yield cluster
    cluster.stop()


def _authenticates(cluster: Cluster, broker_id: int, user: str, password: str,
                   mechanism: str = "SCRAM-SHA-256") -> bool:
    broker = cluster.brokers[broker_id]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_for("SASL_PLAINTEXT"),
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                         "sasl.username": user, "sasl.password": password, "log_level": 0})
    try:
        return bool(admin.list_topics(timeout=2).brokers)
    except KafkaException:
        return False


def _eventually(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _gregor(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "gregor.cli.main", *args], check=True,
                   capture_output=True, timeout=WAIT_S)


def test_users_are_kept_in_zookeeper_and_followed_by_every_broker(
        scram_cluster: Cluster) -> None:
    cluster = scram_cluster
    _gregor("users", "create", "alice", "--password", "alice-secret",
            "-b", cluster.brokers[1].bootstrap)
    zk = KazooClient(cluster.zookeeper.connect + cluster.chroot)
    zk.start(WAIT_S)
    try:
        # Kafka's entity config and change notification.
        stored = json.loads(zk.get("/config/users/alice")[0])
        assert stored["version"] == 1
        assert set(stored["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert stored["config"]["SCRAM-SHA-256"].endswith(",iterations=4096")
        notices = [json.loads(zk.get(f"/config/changes/{name}")[0])
                   for name in zk.get_children("/config/changes")]
        assert {"version": 2, "entity_path": "users/alice"} in notices

        for broker_id in (2, 3, 1):
            _eventually(lambda b=broker_id: _authenticates(cluster, b, "alice", "alice-secret"),
                        f"broker {broker_id} to know alice")
        assert not _authenticates(cluster, 2, "alice", "wrong")

        # As kafka-configs.sh --zookeeper writes a user: the entity, then the notice.
        credential = ScramCredential.from_password("SCRAM-SHA-512", "bob-secret", 8192)
        zk.create("/config/users/bob", json.dumps(
            {"version": 1, "config": {"SCRAM-SHA-512": credential.encode()}}).encode())
        zk.create("/config/changes/config_change_", json.dumps(
            {"version": 2, "entity_path": "users/bob"}).encode(), sequence=True)
        _eventually(lambda: _authenticates(cluster, 3, "bob", "bob-secret", "SCRAM-SHA-512"),
                    "broker 3 to know bob")
    finally:
        zk.stop()
        zk.close()

    _gregor("users", "delete", "alice", "-b", cluster.brokers[2].bootstrap)
    _eventually(lambda: not _authenticates(cluster, 1, "alice", "alice-secret"),
                "broker 1 to forget alice")
