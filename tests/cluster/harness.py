"""A cluster of real broker processes on one shared ZooKeeper, for fault tests.

Each cluster gets a ZooKeeper chroot of its own, so tests never see each other's
brokers. Timeouts are short (a 2 s ZooKeeper session, a 2 s replica lag) so that
a dead broker is noticed quickly. Faults go to the processes this harness started:
``cluster.brokers[id]`` is a ``BrokerProcess`` (``kill`` is SIGKILL, ``stop`` SIGTERM
and wait, ``pause``/``resume`` SIGSTOP/SIGCONT, ``start`` again on the same data,
address and port).

Each broker listens on a loopback address of its own, 127.a.b.<broker id> (a block
drawn per cluster), so that ``cut`` can partition the network between two brokers,
or between a broker and ZooKeeper (which has its own address too), while clients,
on 127.0.0.1, still reach every broker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from clients import METADATA_VERSION, WireConnection, metadata_request
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic
from kazoo.client import KazooClient
from network import Network, loopback_block, sources

from gregor.broker.process import BrokerProcess
from gregor.cluster.znodes import BROKER_IDS
from gregor.cluster.zookeeper_server import ZooKeeperServer
from gregor.protocol.api_keys import ApiKey

SESSION_TIMEOUT_MS = 2000
WAIT_S = 30.0
# The other end of a link, besides a broker id.
ZOOKEEPER = "zookeeper"
Node = int | str


class UnboundConnections(AssertionError):
    """A broker's connections come from an address a cut cannot tell apart."""


class Cluster:
    def __init__(self, zookeeper: ZooKeeperServer, work: Path, size: int = 3,
                 **overrides: str) -> None:
        """``overrides`` are broker properties for every broker, by Kafka's names
        (pass a dict: ``**{"unclean.leader.election.enable": "true"}``)."""
        self.zookeeper = zookeeper
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
        block = loopback_block()
        self.brokers = {
            broker_id: BrokerProcess(work / f"broker-{broker_id}", host=f"{block}.{broker_id}",
                                     overrides={"broker.id": str(broker_id), **settings})
            for broker_id in range(1, size + 1)}
        self._network: Network | None = None
        self._kazoo: KazooClient | None = None

    def start(self) -> Cluster:
        """Start every broker and wait until each knows all of them and the controller
        (a broker that has not yet seen the others refuses a replication factor of 3).

        The brokers start together, each waited for (its ready file) in a thread of its
        own, as run-cluster.sh starts them: one after another, a cluster cost three
        broker start-ups (interpreter, imports, ZooKeeper registration) instead of one,
        in every cluster test. If one fails, every broker is killed before it raises."""
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            starts = [pool.submit(broker.start) for broker in self.brokers.values()]
        try:
            for start in starts:
                start.result()
        except BaseException:
            self.stop()
            raise
        self.wait_everywhere(lambda m: {b.node_id for b in m.brokers} == set(self.brokers)
                             and m.controller_id > 0, "every broker to see all the others")
        return self

    def stop(self) -> None:
        """Kill every broker (paused ones too) and heal every cut."""
        for broker in self.brokers.values():
            broker.kill()
        if self._network is not None:
            self._network.heal_all()
        if self._kazoo is not None:
            self._kazoo.stop()
            self._kazoo.close()
            self._kazoo = None

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

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

    def wait_everywhere(self, check: Callable[[Any], bool], what: str,
                        topics: list[str] | None = None, timeout: float = WAIT_S,
                        skip: Collection[int | None] = ()) -> None:
        """Wait until ``check`` holds for the metadata of every running broker, each asked
        on its own (kio's MetadataResponse): brokers learn of changes one by one, so an
        answer from one says nothing of the next. Paused brokers are not asked, nor
        those in ``skip`` (one cut off, whose word is stale by design)."""
        deadline = time.monotonic() + timeout
        pending = {i: b for i, b in self.brokers.items() if i not in skip}
        while True:
            for broker_id, broker in list(pending.items()):
                if broker.pid is None or _paused(broker.pid):
                    del pending[broker_id]
                    continue
                try:
                    with WireConnection(broker.bootstrap, timeout=5) as connection:
                        view = connection.request(ApiKey.METADATA, METADATA_VERSION,
                                                  metadata_request(topics or [], False))
                except OSError:  # restarting: ask again
                    continue
                if check(view):
                    del pending[broker_id]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what} (not yet: brokers "
                                     f"{sorted(pending)})")
            time.sleep(0.1)

    def create_topic(self, name: str, partitions: int = 1, replication: int = 3,
                     timeout: float = WAIT_S, **configs: str) -> None:
        admin = self.admin()  # kept alive until the answer: its futures need it
        admin.create_topics([NewTopic(name, partitions, replication, config=configs)])[
            name].result(timeout=timeout)
        self.wait_everywhere(
            lambda m: any(t.name == name and t.error_code == 0 and len(t.partitions) == partitions
                          and all(p.leader_id > 0 and len(p.isr_nodes) == replication
                                  for p in t.partitions) for t in m.topics),
            f"{name} to be led and fully in sync in every broker's metadata", topics=[name],
            timeout=timeout)

    def registered(self) -> set[int]:
        """The brokers registered in ZooKeeper (``/brokers/ids``): the cluster's own
        truth, whatever a broker cut off from it still believes."""
        if self._kazoo is None:
            self._kazoo = KazooClient(self.zookeeper.connect + self.chroot)
            self._kazoo.start(WAIT_S)
        return {int(child) for child in self._kazoo.get_children(BROKER_IDS)}

    def leader(self, topic: str, partition: int = 0) -> int:
        return self.metadata().topics[topic].partitions[partition].leader

    def isr(self, topic: str, partition: int = 0) -> list[int]:
        return list(self.metadata().topics[topic].partitions[partition].isrs)

    # Network partitions (root and nftables: scripts/install-zookeeper.sh).

    def address(self, node: Node) -> str:
        """A broker's (by id) or ZooKeeper's (``ZOOKEEPER``) loopback address."""
        return self.zookeeper.host if node == ZOOKEEPER else self.brokers[int(node)].host

    def cut(self, a: Node, b: Node) -> None:
        """Partition the network between two nodes (broker ids or ``ZOOKEEPER``): no
        packet passes between them either way until ``heal``. Fails if a broker's
        connections to the other come from an address the cut does not match (one it
        did not bind them to), since the partition would then not hold."""
        if self._network is None:
            self._network = Network()
        self._network.cut(self.address(a), self.address(b))
        for near, far in ((a, b), (b, a)):
            pid = None if near == ZOOKEEPER else self.brokers[int(near)].pid
            if pid is None:
                continue
            stray = sources(pid, self.address(far)) - {self.address(near)}
            if stray:
                self._network.heal(self.address(a), self.address(b))
                raise UnboundConnections(
                    f"broker {near} reaches {far} ({self.address(far)}) from {sorted(stray)}, "
                    f"not from its own address {self.address(near)}: the broker must bind its "
                    "outgoing connections (to peers and ZooKeeper) to its listener's address "
                    "for a cut to hold")

    def isolate(self, broker_id: int, from_zookeeper: bool = True) -> None:
        """Cut a broker off from every other broker (and ZooKeeper); clients still
        reach it."""
        for other in self.brokers:
            if other != broker_id:
                self.cut(broker_id, other)
        if from_zookeeper:
            self.cut(broker_id, ZOOKEEPER)

    def heal(self, a: Node, b: Node) -> None:
        if self._network is not None:
            self._network.heal(self.address(a), self.address(b))

    def heal_all(self) -> None:
        if self._network is not None:
            self._network.heal_all()


def _paused(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP): state T in /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False
