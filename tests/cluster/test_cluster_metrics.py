"""Metrics of a three-broker cluster: one active controller across the brokers, and
failures seen where Kafka's alerts look: under-replicated partitions on the leaders,
leader elections and an offline partition on the controller for a dead broker, ISR
shrinks and expansions for a follower cut off from its leader and back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from harness import WAIT_S, Cluster
from scrape import Scrape, scrape

from gregor.cluster.zookeeper_server import ZooKeeperServer

ACTIVE = "kafka_controller_kafkacontroller_activecontrollercount"
UNDER_REPLICATED = "kafka_server_replicamanager_underreplicatedpartitions"
OFFLINE = "kafka_controller_kafkacontroller_offlinepartitionscount"
SHRINKS = "kafka_server_replicamanager_isrshrinks_total"
EXPANDS = "kafka_server_replicamanager_isrexpands_total"
ELECTIONS = "kafka_controller_controllerstats_leaderelectionrateandtimems_count"


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster(zookeeper, tmp_path,
                      **{"metrics.listener": "http://127.0.0.1:0/metrics"}).start()
    yield started
    started.stop()


def _scrapes(cluster: Cluster) -> dict[int, Scrape]:
    """A scrape of every running broker."""
    return {broker_id: scrape(broker.metrics_url) for broker_id, broker in cluster.brokers.items()
            if broker.proc is not None and broker.metrics_url is not None}


def _total(scrapes: dict[int, Scrape], name: str) -> float:
    return sum(s.get(name) for s in scrapes.values())


def _wait(cluster: Cluster, check: Callable[[dict[int, Scrape]], bool],
          what: str) -> dict[int, Scrape]:
    """Scrape every broker until ``check`` holds, as Prometheus would see it next."""
    deadline = time.monotonic() + WAIT_S
    while True:
        scrapes = _scrapes(cluster)
        if check(scrapes):
            return scrapes
        assert time.monotonic() < deadline, f"no scrape showed {what} within {WAIT_S}s"
        time.sleep(0.2)


def test_a_dead_broker_shows_in_the_cluster_metrics(cluster: Cluster) -> None:
    topic, solo = f"m-{uuid.uuid4().hex[:8]}", f"solo-{uuid.uuid4().hex[:8]}"
    scrapes = _scrapes(cluster)
    assert _total(scrapes, ACTIVE) == 1
    controller = cluster.metadata().controller_id
    assert scrapes[controller].get(ACTIVE) == 1

    cluster.create_topic(topic, partitions=3, replication=3)
    leaders = {cluster.leader(topic, p) for p in range(3)}
    # A broker that leads a partition of the topic, and is not the controller.
    victim = min(leaders - {controller})
    # A partition on the victim alone: offline once it dies.
    admin = cluster.admin()
    admin.create_topics([NewTopic(solo, 1, replica_assignment=[[victim]])])[solo].result(WAIT_S)
    cluster.wait_for(lambda m: solo in m.topics and m.topics[solo].partitions[0].leader == victim,
                     f"{solo} to be led by broker {victim}")
    healthy = _scrapes(cluster)
    assert _total(healthy, UNDER_REPLICATED) == 0
    assert _total(healthy, OFFLINE) == 0
    elections_before = healthy[controller].get(ELECTIONS)

    cluster.brokers[victim].kill()
    # Every partition of the topic has the dead broker as a replica: each becomes
    # under-replicated where it is led (the victim's moves to a survivor).
    down = _wait(cluster, lambda s: _total(s, UNDER_REPLICATED) == 3
                 and s[controller].get(OFFLINE) == 1,
                 "3 under-replicated partitions and 1 offline")
    assert _total(down, ACTIVE) == 1
    assert down[controller].get(ELECTIONS) > elections_before  # the victim's partition moved

    cluster.brokers[victim].start()
    back = _wait(cluster, lambda s: _total(s, UNDER_REPLICATED) == 0
                 and _total(s, OFFLINE) == 0, "the cluster healthy again")
    assert _total(back, ACTIVE) == 1


def test_a_follower_cut_off_from_its_leader_is_shrunk_and_expanded(cluster: Cluster) -> None:
    """The leader itself drops a follower that stops fetching (a dead broker's ISR is
    shrunk by the controller instead, which Kafka does not count as the leader's)."""
    topic = f"m-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication=3)
    leader = cluster.leader(topic)
    follower = min(set(cluster.brokers) - {leader})
    before = _scrapes(cluster)[leader]

    cluster.cut(leader, follower)
    try:
        # A follower is out of sync once the leader's log moves on without it.
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": 1})
        for i in range(10):
            producer.produce(topic, b"%d" % i)
        assert producer.flush(WAIT_S) == 0
        shrunk = _wait(cluster, lambda s: s[leader].get(UNDER_REPLICATED) == 1,
                       f"leader {leader} to report its partition under-replicated")
        assert shrunk[leader].get(SHRINKS) == before.get(SHRINKS) + 1
        assert shrunk[leader].value("kafka_cluster_partition_underreplicated",
                                    topic=topic, partition=0) == 1
    finally:
        cluster.heal(leader, follower)
    back = _wait(cluster, lambda s: s[leader].get(UNDER_REPLICATED) == 0,
                 f"the follower back in leader {leader}'s ISR")
    assert back[leader].get(EXPANDS) == before.get(EXPANDS) + 1
