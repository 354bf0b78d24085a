"""``gregor cluster describe`` and ``gregor topics describe`` against a real cluster, run as
users run them, before and after a broker dies: brokers with their addresses and racks,
the controller, each partition's leader, replicas, ISR and offline replicas, and the
under-replicated and offline partitions. Every figure is checked against the cluster's
own metadata, as confluent-kafka reads it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from harness import Cluster
from kazoo.client import KazooClient

from gregor.broker.process import BrokerProcess
from gregor.cluster.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.timeout(180)

RACKS = {1: "rack-a", 2: "rack-b", 3: "rack-c"}


def gregor(cluster: Cluster, *args: str) -> list[dict[str, str]]:
    """Run a ``gregor`` command; its output lines as tab-separated ``Name: value`` fields."""
    result = subprocess.run([sys.executable, "-m", "gregor.cli.main", *args,
                             "--bootstrap-server", cluster.bootstrap],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [{name: value for name, _, value in
             (field.partition(": ") for field in line.strip("\t").split("\t"))}
            for line in result.stdout.splitlines()]


def partition_rows(lines: list[dict[str, str]]) -> dict[tuple[str, int], dict[str, str]]:
    return {(line["Topic"], int(line["Partition"])): line for line in lines
            if "Partition" in line}


def test_describe_shows_brokers_racks_controller_and_unhealthy_partitions(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    cluster = Cluster(zookeeper, tmp_path)
    for broker_id, broker in cluster.brokers.items():
        broker.overrides["broker.rack"] = RACKS[broker_id]
    cluster.start()
    try:
        cluster.create_topic("orders", partitions=3)
        admin = cluster.admin()
        admin.create_topics([NewTopic("alone", 1, replica_assignment=[[3]])])[
            "alone"].result(timeout=30)
        cluster.wait_for(lambda m: "alone" in m.topics
                         and m.topics["alone"].partitions[0].leader == 3, "alone led by 3")

        lines = gregor(cluster, "cluster", "describe")
        metadata = cluster.metadata()
        assert lines[0]["Controller"] == str(metadata.controller_id)
        brokers = {int(line["Broker"]): line for line in lines if "Broker" in line}
        assert {b: (line["Address"], line["Rack"]) for b, line in brokers.items()} == {
            b: (broker.bootstrap, RACKS[b]) for b, broker in cluster.brokers.items()}
        assert [b for b, line in brokers.items() if "controller" in line] == [
            metadata.controller_id]
        assert ({"UnderReplicatedPartitions": "0"} in lines
                and {"OfflinePartitions": "0"} in lines)
        described = partition_rows(gregor(cluster, "topics", "describe", "orders"))
        for index, partition in metadata.topics["orders"].partitions.items():
            row = described[("orders", index)]
            assert row["Leader"] == str(partition.leader)
            assert row["Replicas"] == ",".join(map(str, partition.replicas))
            assert sorted(row["Isr"].split(",")) == ["1", "2", "3"]
            assert row["Offline"] == ""

        cluster.brokers[3].kill()
        cluster.wait_for(lambda m: 3 not in m.brokers and all(
            3 not in p.isrs and p.leader != 3 for p in m.topics["orders"].partitions.values())
            and m.topics["alone"].partitions[0].leader == -1,
            "broker 3 gone from the metadata, the ISRs and the leaders")
        lines = gregor(cluster, "cluster", "describe")
        assert sorted(int(line["Broker"]) for line in lines if "Broker" in line) == [1, 2]
        assert {"UnderReplicatedPartitions": "3"} in lines
        assert {"OfflinePartitions": "1"} in lines
        unhealthy = partition_rows(lines)
        assert set(unhealthy) == {("orders", 0), ("orders", 1), ("orders", 2), ("alone", 0)}
        assert unhealthy[("alone", 0)]["Leader"] == "-1"
        assert all(row["Offline"] == "3" for row in unhealthy.values())
        described = partition_rows(gregor(cluster, "topics", "describe", "orders"))
        metadata = cluster.metadata()
        for index, partition in metadata.topics["orders"].partitions.items():
            row = described[("orders", index)]
            assert row["Leader"] == str(partition.leader) and row["Leader"] != "3"
            assert sorted(row["Isr"].split(",")) == ["1", "2"]
            assert row["Offline"] == "3"
    finally:
        cluster.stop()


def test_brokers_start_from_server_properties_with_kafkas_names(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """``gregor broker start --config server.properties``, as the README says: two
    brokers (one named by ``broker.id``, one by ``node.id``) join a ZooKeeper chroot and
    take the cluster settings from the file."""
    chroot = f"/props-{tmp_path.name}"
    common = {"zookeeper.connect": zookeeper.connect + chroot,
              "zookeeper.session.timeout.ms": "2000", "default.replication.factor": "2",
              "min.insync.replicas": "2", "offsets.topic.replication.factor": "2",
              "replica.lag.time.max.ms": "5000", "replica.fetch.max.bytes": "65536",
              "replica.fetch.wait.max.ms": "200", "num.replica.fetchers": "2",
              "unclean.leader.election.enable": "false", "controlled.shutdown.enable": "true",
              "auto.leader.rebalance.enable": "true"}
    brokers = []
    for broker_id, name in ((1, "broker.id"), (2, "node.id")):
        properties = tmp_path / f"server-{broker_id}.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in {
            name: str(broker_id), "broker.rack": RACKS[broker_id], **common}.items()))
        brokers.append(BrokerProcess(tmp_path / f"broker-{broker_id}", config_file=properties))
    try:
        for broker in brokers:
            broker.start()
        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        admin.create_topics([NewTopic("t", 2)])["t"].result(timeout=30)
        deadline = time.monotonic() + 30
        while True:
            metadata = admin.list_topics(timeout=10)
            if ("t" in metadata.topics and sorted(metadata.brokers) == [1, 2]
                    and all(len(p.isrs) == 2 for p in metadata.topics["t"].partitions.values())):
                break
            assert time.monotonic() < deadline, metadata.topics.get("t")
            time.sleep(0.1)
        assert all(len(p.replicas) == 2 for p in metadata.topics["t"].partitions.values())
        described = admin.describe_cluster().result(timeout=30)
        assert {n.id: n.rack for n in described.nodes} == {1: RACKS[1], 2: RACKS[2]}
        resource = ConfigResource(ResourceType.BROKER, "2")
        configs = admin.describe_configs([resource])[resource].result(timeout=30)
        assert {k: configs[k].value for k in common if k in configs} == {
            k: v for k, v in common.items() if k in configs}
        assert {"min.insync.replicas", "num.replica.fetchers",
                "unclean.leader.election.enable"} <= set(configs)
        zk = KazooClient(zookeeper.connect + chroot)
        zk.start(30)
        try:
            assert sorted(zk.get_children("/brokers/ids")) == ["1", "2"]
        finally:
            zk.stop()
            zk.close()
    finally:
        for broker in brokers:
            broker.kill()
