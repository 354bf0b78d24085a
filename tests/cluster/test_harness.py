"""The cluster harness itself: brokers on addresses of their own, faults by pid, and
network cuts that really hold between brokers and between a broker and ZooKeeper."""

from __future__ import annotations

from pathlib import Path

import pytest
from checker import LoadGenerator, find_anomalies, read_partitions
from harness import ZOOKEEPER, Cluster

pytestmark = pytest.mark.timeout(240)


def test_brokers_serve_on_their_own_addresses_and_restart_in_place(cluster: Cluster) -> None:
    metadata = cluster.metadata()
    assert {b.id: (b.host, b.port) for b in metadata.brokers.values()} == {
        broker_id: (broker.host, broker.port) for broker_id, broker in cluster.brokers.items()}
    assert len({broker.host for broker in cluster.brokers.values()}) == 3
    assert cluster.registered() == {1, 2, 3}

    victim = cluster.brokers[2]
    address, pid = victim.bootstrap, victim.pid
    victim.kill()  # SIGKILL: its session ends only when ZooKeeper times it out
    assert pid is not None and not Path(f"/proc/{pid}").exists()
    cluster.wait_for(lambda m: 2 not in m.brokers, "the dead broker to leave the metadata")
    assert cluster.registered() == {1, 3}
    victim.start()
    assert victim.bootstrap == address and victim.pid != pid
    cluster.wait_for(lambda m: 2 in m.brokers, "the restarted broker to register again")
    assert cluster.registered() == {1, 2, 3}


def test_a_follower_cut_off_from_its_peers_leaves_the_isr_until_healed(
        cluster: Cluster) -> None:
    cluster.create_topic("t")
    leader = cluster.leader("t")
    follower = next(b for b in cluster.brokers if b != leader)
    with LoadGenerator(cluster.bootstrap, "t") as load:
        load.wait_for_acks(200)
        cluster.isolate(follower, from_zookeeper=False)
        cluster.wait_for(lambda m: follower not in m.topics["t"].partitions[0].isrs,
                         "the cut-off follower to leave the ISR")
        assert cluster.registered() == {1, 2, 3}  # ZooKeeper still hears it
        acked = len(load.acked)
        load.wait_for_acks(acked + 200)  # the other two still make min.insync.replicas
        cluster.heal_all()
        cluster.wait_for(lambda m: follower in m.topics["t"].partitions[0].isrs,
                         "the follower to rejoin once healed and caught up")
    assert find_anomalies(load.acked, read_partitions(cluster.bootstrap, "t", 1)).none


def test_a_broker_cut_off_from_zookeeper_loses_its_session_until_healed(
        cluster: Cluster) -> None:
    victim = next(b for b in cluster.brokers if b != cluster.metadata().controller_id)
    cluster.cut(victim, ZOOKEEPER)
    cluster.wait_for(lambda m: victim not in m.brokers,
                     "the others to see its session expire")
    assert cluster.registered() == set(cluster.brokers) - {victim}
    cluster.heal(victim, ZOOKEEPER)
    cluster.wait_for(lambda m: victim in m.brokers and cluster.registered() == {1, 2, 3},
                     "it to register again in a new session")
