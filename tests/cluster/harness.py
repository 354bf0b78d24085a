"""A cluster of real broker processes on one shared ZooKeeper, for fault tests.

Each cluster gets a ZooKeeper chroot of its own, so tests never see each other's
brokers. Timeouts are short (a 2 s ZooKeeper session, a 2 s replica lag) so that
a dead broker is noticed quickly; faults go to the pids this harness started.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

from gregor.broker.process import BrokerProcess
from gregor.cluster.zookeeper_server import ZooKeeperServer

SESSION_TIMEOUT_MS = 2000
WAIT_S = 30.0


class Cluster:
    def __init__(self, zookeeper: ZooKeeperServer, work: Path, size: int = 3,
                 **overrides: str) -> None:
        self.chroot = f"/cluster-{uuid.uuid4().hex[:8]}"
        settings = {
            "zookeeper.connect": zookeeper.connect + self.chroot,
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "replica.lag.time.max.ms": "2000",
            "replica.fetch.backoff.ms": "100",
            "default.replication.factor": str(min(3, size)),
            "min.insync.replicas": str(min(2, size)),
            "offsets.topic.replication.factor": str(min(3, size)),
            "offsets.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
            "log.flush.scheduler.interval.ms": "100",
            **overrides,
        }
        self.brokers = {
            broker_id: BrokerProcess(work / f"broker-{broker_id}",
                                     overrides={"broker.id": str(broker_id), **settings})
            for broker_id in range(1, size + 1)}

    def start(self) -> Cluster:
        for broker in self.brokers.values():
            broker.start()
        self.wait_for(lambda m: len(m.brokers) == len(self.brokers) and m.controller_id > 0,
                      "every broker to register")
        return self

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.kill()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.proc is not None)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

    def metadata(self) -> ClusterMetadata:
        return self.admin().list_topics(timeout=10)

    def wait_for(self, check: Callable[[ClusterMetadata], bool], what: str,
                 timeout: float = WAIT_S) -> ClusterMetadata:
        deadline = time.monotonic() + timeout
        while True:
            try:
                metadata = self.metadata()
                if check(metadata):
                    return metadata
            except Exception:  # a broker just went away: ask again
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.1)

    def create_topic(self, name: str, partitions: int = 1, replication: int = 3,
                     **configs: str) -> None:
        admin = self.admin()  # kept alive until the answer: its futures need it
        admin.create_topics([NewTopic(name, partitions, replication, config=configs)])[
            name].result(timeout=30)
        self.wait_for(lambda m: name in m.topics and len(m.topics[name].partitions) == partitions
                      and all(p.leader > 0 and len(p.isrs) == replication
                              for p in m.topics[name].partitions.values()),
                      f"{name} to be led and fully in sync")

    def leader(self, topic: str, partition: int = 0) -> int:
        return self.metadata().topics[topic].partitions[partition].leader

    def isr(self, topic: str, partition: int = 0) -> list[int]:
        return list(self.metadata().topics[topic].partitions[partition].isrs)
