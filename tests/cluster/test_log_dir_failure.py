"""A failing log directory (KIP-112) on a real 3-broker cluster on real ZooKeeper.

Broker 1 keeps its partitions in two log directories. One of them is made unusable
while an idempotent acks=all producer writes: renamed away with a file put in its
place, which works without root (root ignores permissions, so a chmod would not) and
is what a disk unmounted under the broker looks like. Open segment files keep working
until the broker next creates a file there (a segment roll, a checkpoint): that IO
error takes the directory offline. Only its replicas go offline on broker 1: it keeps
serving the other directory's, tells the controller, and the controller moves the lost
replicas' leaderships elsewhere and takes them out of the ISR; every acknowledged
record is read back once at its offset.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from checker import LoadGenerator, find_anomalies, read_partitions
from clients import (
    PRODUCE_VERSION,
    TIMEOUT,
    WireConnection,
    make_batch,
    produce_request,
    versioned_request,
)
from harness import Cluster
from kazoo.client import KazooClient

from gregor.cluster.log_dir_events import LOG_DIR_EVENTS
from gregor.cluster.zookeeper_server import ZooKeeperServer
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(240)

_PARTITIONS = 6


def _dir_holding(dirs: tuple[Path, Path], topic: str, index: int) -> Path:
    (found,) = [d for d in dirs if (d / f"{topic}-{index}").is_dir()]
    return found


def test_a_failed_log_directory_takes_only_its_replicas_offline(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    dirs = ((tmp_path / "disk-a").resolve(), (tmp_path / "disk-b").resolve())
    cluster = Cluster(zookeeper, tmp_path)
    cluster.brokers[1].overrides["log.dirs"] = ",".join(map(str, dirs))
    with cluster:
        # Small segments: a roll, which creates files in the directory, comes often.
        cluster.create_topic("t", partitions=_PARTITIONS, **{"segment.bytes": "20000"})
        metadata = cluster.metadata().topics["t"].partitions
        led_by_1 = [i for i, p in metadata.items() if p.leader == 1]
        failing = _dir_holding(dirs, "t", led_by_1[0])
        lost = {i for i in range(_PARTITIONS) if _dir_holding(dirs, "t", i) == failing}
        kept = set(range(_PARTITIONS)) - lost
        assert lost and kept
        with LoadGenerator(cluster.bootstrap, "t", rate=1000) as load:
            load.wait_for_acks(1000)
            failing.rename(failing.with_name("disk-gone"))
            failing.write_text("not a directory any more\n")

            def moved(m) -> bool:
                parts = m.topics["t"].partitions
                return (all(parts[i].leader not in (1, -1) and 1 not in parts[i].isrs
                            for i in lost)
                        and all(1 in parts[i].isrs for i in kept))

            cluster.wait_for(moved, "the failed directory's leaderships to move off broker 1")
            acked = len(load.acked)
            load.wait_for_acks(acked + 3000)
        found = find_anomalies(load.acked, read_partitions(cluster.bootstrap, "t", _PARTITIONS))
        assert found.none, found
        # Broker 1 still serves: registered, leading the kept partitions it led.
        assert 1 in cluster.registered()
        parts = cluster.metadata().topics["t"].partitions
        assert {i for i in led_by_1 if i in kept} <= {i for i, p in parts.items()
                                                      if p.leader == 1}
        # Broker 1 answers for what it lost with KAFKA_STORAGE_ERROR, and DescribeLogDirs
        # shows the directory offline, the other one serving.
        with WireConnection(cluster.brokers[1].bootstrap) as connection:
            answer = connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
                "t", min(lost), make_batch([b"late"])))
            (topic,) = answer.responses
            assert topic.partition_responses[0].error_code == ErrorCode.kafka_storage_error
            key = ApiKey.DESCRIBE_LOG_DIRS
            described = connection.request(key, 4, versioned_request(
                key, 4, "DescribeLogDirsRequest", topics=None))
        results = {r.log_dir: r for r in described.results}
        assert results[str(failing)].error_code == ErrorCode.kafka_storage_error
        other = results[str(dirs[0] if failing == dirs[1] else dirs[1])]
        assert other.error_code == ErrorCode.none
        assert {p.partition_index for t in other.topics if t.name == "t"
                for p in t.partitions} == kept
        # Restarted with the directory still unusable, broker 1 does not make the lost
        # replicas again, empty, in the other one: they stay offline, out of the ISR.
        cluster.brokers[1].kill()
        cluster.brokers[1].start()
        cluster.wait_everywhere(lambda m: {b.node_id for b in m.brokers} == {1, 2, 3},
                                "broker 1 to be back")
        cluster.wait_for(lambda m: all(1 in m.topics["t"].partitions[i].isrs for i in kept),
                         "broker 1 back in the ISR of what it kept")
        assert all(1 not in p.isrs for i, p in cluster.metadata().topics["t"].partitions.items()
                   if i in lost)
        survivor = dirs[0] if failing == dirs[1] else dirs[1]
        assert not [i for i in lost if (survivor / f"t-{i}").exists()]
        # The controller read and removed Kafka's event node.
        zk = KazooClient(zookeeper.connect + cluster.chroot)
        zk.start(TIMEOUT)
        try:
            deadline = time.monotonic() + TIMEOUT
            while zk.get_children(LOG_DIR_EVENTS):
                assert time.monotonic() < deadline, "event nodes left behind"
                time.sleep(0.2)
        finally:
            zk.stop()
            zk.close()
