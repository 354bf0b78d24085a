"""``gregor cluster describe`` and ``gregor topics describe`` against a real cluster, run as
users run them, before and after a broker dies: brokers with their addresses and racks,
the controller, each partition's leader, replicas, ISR and offline replicas, and the
under-replicated and offline partitions. Every figure is checked against the cluster's
own metadata, as confluent-kafka reads it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from harness import Cluster

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
