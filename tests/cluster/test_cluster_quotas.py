"""Client quotas in a cluster: stored in ZooKeeper in Kafka's layout (``/config/users``,
``/config/clients``, ``/config/users/<user>/clients/<id>``, ``<default>``), announced by
change notifications, followed by every broker whoever wrote them (``gregor quotas``
through any broker, or Kafka's own tools writing ZooKeeper directly), and kept apart
from the SCRAM credentials that share a user's node."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from harness import WAIT_S, Cluster
from kazoo.client import KazooClient


def _gregor(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "gregor.cli.main", *args],
                            capture_output=True, text=True, timeout=WAIT_S)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _described(cluster: Cluster, broker_id: int) -> set[str]:
    return set(_gregor("quotas", "describe", "-b",
                       cluster.brokers[broker_id].bootstrap).splitlines())


def _eventually_described(cluster: Cluster, broker_id: int, line: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while line not in _described(cluster, broker_id):
        assert time.monotonic() < deadline, f"broker {broker_id} never showed {line!r}"
        time.sleep(0.2)


def test_quotas_are_kept_in_zookeeper_and_followed_by_every_broker(cluster: Cluster) -> None:
    _gregor("users", "create", "alice", "--password", "alice-secret",
            "-b", cluster.brokers[1].bootstrap)
    _gregor("quotas", "alter", "--user", "alice", "--add", "producer_byte_rate=1048576",
            "--add", "request_percentage=50", "-b", cluster.brokers[1].bootstrap)
    _gregor("quotas", "alter", "--user", "alice", "--client-id", "app/1",
            "--add", "consumer_byte_rate=2048", "-b", cluster.brokers[2].bootstrap)
    zk = KazooClient(cluster.zookeeper.connect + cluster.chroot)
    zk.start(WAIT_S)
    try:
        # Kafka's entity configs: the quotas beside alice's SCRAM credentials, whole
        # numbers as integers, the client id sanitized.
        user = json.loads(zk.get("/config/users/alice")[0])
        assert user["version"] == 1
        assert {k: v for k, v in user["config"].items() if not k.startswith("SCRAM")} == {
            "producer_byte_rate": "1048576", "request_percentage": "50.0"}
        assert {"SCRAM-SHA-256", "SCRAM-SHA-512"} <= set(user["config"])
        assert json.loads(zk.get("/config/users/alice/clients/app%2F1")[0]) == {
            "version": 1, "config": {"consumer_byte_rate": "2048"}}
        notices = [json.loads(zk.get(f"/config/changes/{name}")[0])
                   for name in zk.get_children("/config/changes")]
        assert {"version": 2, "entity_path": "users/alice/clients/app%2F1"} in notices

        for broker_id in (3, 1, 2):
            _eventually_described(cluster, broker_id, "Quotas of user 'alice' and client-id "
                                  "'app/1': consumer_byte_rate=2048")
            _eventually_described(cluster, broker_id, "Quotas of user 'alice': "
                                  "producer_byte_rate=1048576, request_percentage=50")

        # As kafka-configs.sh --zookeeper writes a default: the entity, then the notice.
        zk.create("/config/clients/<default>", json.dumps(
            {"version": 1, "config": {"producer_byte_rate": "4096"}}).encode(), makepath=True)
        zk.create("/config/changes/config_change_", json.dumps(
            {"version": 2, "entity_path": "clients/<default>"}).encode(), sequence=True)
        for broker_id in (1, 2, 3):
            _eventually_described(cluster, broker_id,
                                  "Quotas of client-id <default>: producer_byte_rate=4096")
    finally:
        zk.stop()
        zk.close()

    # Removing alice's quotas leaves her credentials alone.
    _gregor("quotas", "alter", "--user", "alice", "--delete", "producer_byte_rate",
            "--delete", "request_percentage", "-b", cluster.brokers[3].bootstrap)
    assert not any(line.startswith("Quotas of user 'alice':") for line in _described(cluster, 3))
    assert "alice" in _gregor("users", "describe", "-b", cluster.brokers[1].bootstrap)
