"""Real brokers, a real ZooKeeper, real clients: replication and failover end to end.

Every fault test runs an idempotent acks=all producer through the fault and then
proves, with the checker, that every acknowledged record is in the log exactly
once, at the offset it was acknowledged at.
"""

from __future__ import annotations

import re
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from checker import LoadGenerator, find_anomalies, read_partitions
from clients import (
    INIT_PRODUCER_ID_VERSION,
    METADATA_VERSION,
    PRODUCE_VERSION,
    WireConnection,
    init_producer_id_request,
    make_batch,
    metadata_request,
    produce_request,
)
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from harness import SESSION_TIMEOUT_MS, Cluster
from test_groups_protocol import JOIN_VERSION, join_request

from gregor.cluster.zookeeper_server import ZooKeeperServer
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(240)


def verify(cluster: Cluster, load: LoadGenerator, topic: str, partitions: int) -> None:
    found = find_anomalies(load.acked, read_partitions(cluster.bootstrap, topic, partitions))
    assert found.none, found


def test_replicas_isr_and_metadata_tell_the_truth(cluster: Cluster) -> None:
    cluster.create_topic("orders", partitions=6, replication=3)
    metadata = cluster.metadata()
    assert sorted(metadata.brokers) == [1, 2, 3]
    assert metadata.controller_id in (1, 2, 3)
    partitions = metadata.topics["orders"].partitions.values()
    assert sorted(p.leader for p in partitions) == [1, 1, 2, 2, 3, 3]  # leaders balanced
    assert all(sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3]
               for p in partitions)
    with pytest.raises(Exception, match="INVALID_REPLICATION_FACTOR|replication factor"):
        cluster.create_topic("too-many", replication=4)
    # Every broker's own Metadata (Kafka's wire fields): a dead broker is an offline
    # replica, out of every ISR, and each partition it led has a new leader one epoch on.
    victim = metadata.controller_id
    led = {i for i, p in metadata.topics["orders"].partitions.items() if p.leader == victim}
    cluster.brokers[victim].kill()

    def moved_on(view) -> bool:
        (topic,) = [t for t in view.topics if t.name == "orders"]
        return sorted(b.node_id for b in view.brokers) == sorted(set(cluster.brokers) - {
            victim}) and view.controller_id not in (victim, -1) and all(
            list(p.offline_replicas) == [victim] and victim not in p.isr_nodes
            and p.leader_id != victim
            and p.leader_epoch == (1 if p.partition_index in led else 0)
            for p in topic.partitions)

    cluster.wait_everywhere(moved_on, "every broker to see the dead one offline",
                            topics=["orders"])


def test_kill_the_leader_under_load_loses_no_acknowledged_record(cluster: Cluster) -> None:
    cluster.create_topic("t", partitions=2)
    with LoadGenerator(cluster.bootstrap, "t") as load:
        load.wait_for_acks(500)
        victim = cluster.leader("t", 0)
        cluster.brokers[victim].kill()
        cluster.wait_for(lambda m: m.topics["t"].partitions[0].leader not in (victim, -1),
                         "a new leader")
        acked = len(load.acked)
        load.wait_for_acks(acked + 500)
        cluster.brokers[victim].start()
        cluster.wait_for(lambda m: all(len(p.isrs) == 3 for p in m.topics["t"].partitions
                                       .values()), "the restarted broker to rejoin the ISR")
        load.wait_for_acks(len(load.acked) + 200)
    verify(cluster, load, "t", 2)
    # Unavailable for at most the ZooKeeper session plus a second (the target).
    assert load.longest_gap() < SESSION_TIMEOUT_MS / 1000 + 1.0 + 2.0


def test_records_only_the_leader_has_are_never_acknowledged(cluster: Cluster) -> None:
    """The followers stall (but stay in the ISR) while the leader takes writes, then the
    leader dies: a follower leads without those records. Had acks=all answered before
    they were replicated, they would now be lost; the producer must instead see them
    acknowledged by the new leader, exactly once.

    Paused followers fetch nothing more, so the leader is ahead of them once it appends
    a write they had not fetched before the pause: at once if one was in flight,
    otherwise with the producer's next request (it sends 2,000 records a second). The
    logs are watched for that for ``AHEAD_WITHIN_S``, not read once at the instant of
    the pause (which, when nothing was in flight, found them equal 20 times over on a
    loaded machine); when it does not come, the followers are resumed (before their 2 s
    ZooKeeper sessions or the 2 s replica lag take them out of the ISR) and paused
    again."""
    cluster.create_topic("t")
    with LoadGenerator(cluster.bootstrap, "t") as load:
        load.wait_for_acks(300)
        leader = cluster.leader("t")
        followers = [b for b in cluster.brokers if b != leader]
        for _ in range(20):
            wait_until(lambda: sorted(cluster.isr("t")) == sorted(cluster.brokers),
                       "every replica in the ISR")
            for broker_id in followers:
                cluster.brokers[broker_id].pause()
            if leader_gets_ahead(cluster, "t", leader, followers, within=AHEAD_WITHIN_S):
                break
            for broker_id in followers:
                cluster.brokers[broker_id].resume()
            load.wait_for_acks(len(load.acked) + 10)
        else:
            raise AssertionError("the followers never stalled behind the leader")
        # A window for the acknowledgements that must not come: a leader answering
        # acks=all before replication would acknowledge what it alone has (and take more)
        # now; killed at once, its answers might not reach the producer in time to show.
        # Well inside the paused followers' 2 s sessions.
        time.sleep(0.5)
        cluster.brokers[leader].kill()
        for broker_id in followers:
            cluster.brokers[broker_id].resume()
        cluster.wait_for(lambda m: m.topics["t"].partitions[0].leader in followers,
                         "a follower to lead")
        load.wait_for_acks(len(load.acked) + 300)
    verify(cluster, load, "t", 1)


def test_kill_the_controller_and_a_new_one_takes_over(cluster: Cluster) -> None:
    """The controller dies (kill -9) and comes back: another broker takes over with a
    newer controller epoch, leaderships move off the dead broker, and the returning one
    rejoins every ISR as a plain broker."""
    cluster.create_topic("t", partitions=3)
    controller = cluster.metadata().controller_id
    with LoadGenerator(cluster.bootstrap, "t") as load:
        load.wait_for_acks(300)
        cluster.brokers[controller].kill()
        cluster.wait_for(lambda m: m.controller_id not in (controller, -1), "a new controller")
        cluster.wait_for(lambda m: all(p.leader not in (controller, -1)
                                       for p in m.topics["t"].partitions.values()),
                         "every partition led by a live broker")
        load.wait_for_acks(len(load.acked) + 300)
        cluster.brokers[controller].start()
        cluster.wait_for(lambda m: all(len(p.isrs) == 3
                                       for p in m.topics["t"].partitions.values()),
                         "the old controller back in every ISR")
        successor = cluster.metadata().controller_id
        assert successor not in (controller, -1)
        load.wait_for_acks(len(load.acked) + 300)
    verify(cluster, load, "t", 3)


def test_clean_shutdown_of_the_leader_is_invisible_to_producers(cluster: Cluster) -> None:
    cluster.create_topic("t")
    with LoadGenerator(cluster.bootstrap, "t") as load:
        load.wait_for_acks(300)
        leader = cluster.leader("t")
        assert cluster.brokers[leader].stop() == 0  # SIGTERM: controlled shutdown first
        load.wait_for_acks(len(load.acked) + 300)
    assert not load.errors
    assert load.longest_gap() < 1.0 + 0.5
    verify(cluster, load, "t", 1)


def test_min_insync_replicas_refuses_acks_all(cluster: Cluster) -> None:
    cluster.create_topic("t")
    leader = cluster.leader("t")
    for broker_id in [b for b in cluster.brokers if b != leader]:
        cluster.brokers[broker_id].kill()
    cluster.wait_for(lambda m: m.topics["t"].partitions[0].isrs == [leader],
                     "the ISR to shrink to the leader")
    # librdkafka retries NOT_ENOUGH_REPLICAS until its message timeout: ask the leader
    # directly to see the answer itself, refused before anything is written.
    with WireConnection(cluster.brokers[leader].bootstrap) as connection:
        for acks, expected in ((-1, ErrorCode.not_enough_replicas), (1, ErrorCode.none)):
            answer = connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
                "t", 0, make_batch([b"x"]), acks=acks))
            assert answer.responses[0].partition_responses[0].error_code == expected
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "message.timeout.ms": 2000, "log_level": 0})
    producer.produce("t", b"x", on_delivery=lambda error, _: errors.append(error))
    producer.flush(10)
    assert [e.code() for e in errors] == [KafkaError._MSG_TIMED_OUT]
    assert cluster.metadata().topics["t"].partitions[0].leader == leader


def test_a_follower_paused_past_the_lag_time_leaves_and_rejoins_the_isr(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """With a ZooKeeper session longer than replica.lag.time.max.ms, the paused follower
    is still registered when it leaves the ISR: the leader dropped it for lagging (the
    controller drops only dead brokers)."""
    cluster = Cluster(zookeeper, tmp_path, **{"zookeeper.session.timeout.ms": "20000"})
    cluster.start()
    try:
        cluster.create_topic("t")
        leader = cluster.leader("t")
        follower = next(b for b in cluster.brokers if b != leader)
        with LoadGenerator(cluster.bootstrap, "t") as load:
            load.wait_for_acks(200)
            cluster.brokers[follower].pause()
            cluster.wait_for(lambda m: follower not in m.topics["t"].partitions[0].isrs,
                             "the paused follower to leave the ISR")
            assert cluster.registered() == {1, 2, 3}
            assert f"t-0: followers [{follower}] fell behind" in (
                cluster.brokers[leader].log_path.read_text())
            acked = len(load.acked)
            load.wait_for_acks(acked + 200)  # two in sync still make min.insync.replicas
            cluster.brokers[follower].resume()
            cluster.wait_for(lambda m: follower in m.topics["t"].partitions[0].isrs,
                             "the follower to rejoin once caught up")
            load.wait_for_acks(len(load.acked) + 200)
        verify(cluster, load, "t", 1)
    finally:
        cluster.stop()


def test_committed_offsets_survive_the_coordinator(cluster: Cluster) -> None:
    cluster.create_topic("t")
    with LoadGenerator(cluster.bootstrap, "t") as load:
        load.wait_for_acks(100)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g",
                         "enable.auto.commit": False, "log_level": 0})
    consumer.assign([TopicPartition("t", 0, 0)])
    consumer.commit(offsets=[TopicPartition("t", 0, 42)], asynchronous=False)
    consumer.close()
    coordinator = _coordinator(cluster, "g")
    cluster.brokers[coordinator].kill()
    cluster.wait_for(lambda m: coordinator not in m.brokers, "the coordinator to be gone")
    again = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g",
                      "enable.auto.commit": False, "log_level": 0})
    committed = again.committed([TopicPartition("t", 0)], timeout=30)
    again.close()
    assert committed[0].offset == 42
    assert _coordinator(cluster, "g") != coordinator


def _coordinator(cluster: Cluster, group: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    described = admin.describe_consumer_groups([group])[group].result(timeout=30)
    return described.coordinator.id


AHEAD_WITHIN_S = 0.5
"""How long paused followers are left for the leader to append what they lack: with the
0.5 s before the kill, well inside their 2 s ZooKeeper sessions and replica lag."""


def leader_gets_ahead(cluster: Cluster, topic: str, leader: int, followers: list[int],
                      within: float) -> bool:
    """Whether the leader's log grows past every follower's within ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        logs = replica_logs(cluster, topic)
        if len(logs[leader]) > max(len(logs[b]) for b in followers):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def replica_logs(cluster: Cluster, topic: str, partition: int = 0) -> dict[int, bytes]:
    """Each live replica's log bytes, as stored (leader epochs and offsets included)."""
    logs = {}
    for broker_id, broker in cluster.brokers.items():
        directory = broker.data_dir / f"{topic}-{partition}"
        if broker.proc is not None and directory.exists():
            logs[broker_id] = b"".join(p.read_bytes()
                                       for p in sorted(directory.glob("*.log")))
    return logs


def wait_for_identical_replicas(cluster: Cluster, topic: str) -> dict[int, bytes]:
    deadline = time.monotonic() + 30
    while len(set((logs := replica_logs(cluster, topic)).values())) != 1:
        assert time.monotonic() < deadline, {b: len(v) for b, v in logs.items()}
        time.sleep(0.1)
    return logs


def test_a_leader_paused_past_its_session_is_fenced_and_truncates(cluster: Cluster) -> None:
    """A zombie: the leader stops (SIGSTOP) longer than its ZooKeeper session, another
    leads, then it wakes up still believing it leads. What it accepts alone (acks=1
    from a client with stale metadata) must be truncated away; acks=all must never
    succeed on it; everyone ends with the new leader's log."""
    cluster.create_topic("t")
    with LoadGenerator(cluster.bootstrap, "t") as load:
        load.wait_for_acks(300)
        zombie = cluster.leader("t")
        cluster.brokers[zombie].pause()
        # Every other broker's own word, the new leader's included: one that has not
        # yet heard it leads still follows the zombie, and would fetch the zombie's
        # writes below into what becomes the new leader's log (seen at load 11, one
        # broker's metadata naming the new leader first).
        cluster.wait_everywhere(
            lambda view: all(p.leader_id not in (zombie, -1)
                             for t in view.topics if t.name == "t" for p in t.partitions),
            "another broker to lead, in every running broker's metadata", topics=["t"])
        cluster.brokers[zombie].resume()
        with WireConnection(cluster.brokers[zombie].bootstrap) as connection:
            answers = {acks: connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
                "t", 0, make_batch([b"zombie-%d" % acks]), acks=acks)).responses[0]
                .partition_responses[0].error_code for acks in (1, -1)}
        assert answers[-1] != ErrorCode.none
        load.wait_for_acks(len(load.acked) + 300)
        wait_until_following(cluster, "t", zombie)
    verify(cluster, load, "t", 1)
    logs = wait_for_identical_replicas(cluster, "t")
    assert b"zombie-" not in logs[zombie]


@pytest.mark.parametrize("unclean", [False, True])
def test_whole_isr_down_with_and_without_unclean_election(cluster: Cluster,
                                                           unclean: bool) -> None:
    """The leader is the last in-sync replica and dies; a follower that fell behind (cut
    off from the leader, still registered in ZooKeeper) is alive. Off (the default): the
    controller leaves the partition offline, and it comes back when the leader returns,
    with every record. On: the follower leads at once, and the leader's extra records
    are truncated away when it returns. Either way no record acknowledged with acks=all
    is lost (min.insync.replicas=2 kept the leader alone from acknowledging any), none
    is duplicated by the idempotent producer's retries, and writes resume only once
    both are in sync again."""
    cluster.create_topic("t", **{"unclean.leader.election.enable": str(unclean).lower()})
    leader = cluster.leader("t")
    follower, other = [b for b in cluster.brokers if b != leader]
    with LoadGenerator(cluster.bootstrap, "t") as load:
        load.wait_for_acks(300)
        cluster.brokers[other].kill()
        cluster.cut(follower, leader)
        cluster.wait_for(lambda m: m.topics["t"].partitions[0].isrs == [leader],
                         "the ISR to shrink to the leader")
        with WireConnection(cluster.brokers[leader].bootstrap) as connection:
            answer = connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
                "t", 0, make_batch([b"only-on-the-leader"]), acks=1))
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
        cluster.brokers[leader].kill()
        if unclean:
            cluster.wait_for(lambda m: m.topics["t"].partitions[0].leader == follower,
                             "the out-of-sync follower to lead")
        else:
            # The controller takes the partition offline when the leader's session ends,
            # deciding with the follower registered and electable: that decision is the
            # refusal to elect it. Nothing changes afterwards until the leader returns.
            cluster.wait_for(lambda m: m.topics["t"].partitions[0].leader == -1,
                             "the partition to go offline")
            assert cluster.registered() == {follower}
        cluster.heal_all()
        if not unclean:
            assert cluster.metadata().topics["t"].partitions[0].leader == -1
        cluster.brokers[leader].start()
        expected = follower if unclean else leader
        cluster.wait_for(lambda m: m.topics["t"].partitions[0].leader == expected
                         and sorted(m.topics["t"].partitions[0].isrs) == sorted(
                             (leader, follower)), "both back in the ISR")
        # Acknowledged only once the high watermark passed everything the new leader
        # kept: what the reader below reads up to.
        load.wait_for_acks(len(load.acked) + 300)
    stored = read_partitions(cluster.bootstrap, "t", 1)
    found = find_anomalies(load.acked, stored)
    assert found.none, found
    values = [value for _, value in stored[0]]
    assert values.count(b"only-on-the-leader") == (0 if unclean else 1)
    if unclean:
        assert re.search(r"t-0: truncated \d+ offset", cluster.brokers[leader].log_path
                         .read_text())


def test_preferred_leaders_come_back_after_a_restart(zookeeper: ZooKeeperServer,
                                                     tmp_path: Path) -> None:
    cluster = Cluster(zookeeper, tmp_path, **{
        "leader.imbalance.check.interval.seconds": "1",
        "leader.imbalance.per.broker.percentage": "0"}).start()
    try:
        cluster.create_topic("t", partitions=3)
        preferred = {i: p.replicas[0] for i, p in
                     cluster.metadata().topics["t"].partitions.items()}
        victim = preferred[0]
        assert cluster.brokers[victim].stop() == 0
        cluster.wait_for(lambda m: all(p.leader != victim
                                       for p in m.topics["t"].partitions.values()),
                         "leaderships to move off the stopped broker")
        cluster.brokers[victim].start()
        cluster.wait_for(lambda m: {i: p.leader for i, p in m.topics["t"].partitions.items()}
                         == preferred, "every partition led by its preferred replica again")
    finally:
        cluster.stop()


def test_elections_an_admin_asks_for(cluster: Cluster) -> None:
    """ElectLeaders, as kafka-leader-election.sh sends it: a preferred election gives a
    partition back to its first replica once that is in sync again; an unclean one
    brings an offline partition back on a live replica that was not in sync."""
    admin = cluster.admin()
    for future in admin.create_topics([NewTopic("t", 1, replica_assignment=[[1, 2]]),
                                       NewTopic("u", 1, replica_assignment=[[2, 3]])]).values():
        future.result(30)
    cluster.wait_for(lambda m: all(len(m.topics[n].partitions[0].isrs) == 2 for n in "tu"),
                     "both topics led and in sync")
    t, u = TopicPartition("t", 0), TopicPartition("u", 0)

    assert cluster.brokers[1].stop() == 0
    cluster.wait_for(lambda m: m.topics["t"].partitions[0].leader == 2, "2 to lead t")
    cluster.brokers[1].start()
    cluster.wait_for(lambda m: sorted(m.topics["t"].partitions[0].isrs) == [1, 2],
                     "1 back in t's ISR")
    assert cluster.leader("t") == 2  # no automatic rebalance within the test
    # A new client, as kafka-leader-election.sh is: it sends the request to the
    # controller it knows, and one that was the controller answers NOT_CONTROLLER (as
    # Kafka's ZooKeeper mode does; librdkafka does not retry it).
    admin = cluster.admin()
    controller = cluster.metadata().controller_id
    elected = admin.elect_leaders(ElectionType.PREFERRED, [t]).result(30)
    assert list(elected.values()) == [None], str(elected)
    # Answered once the election is in the controller's own metadata; the other brokers
    # learn of it after (as in Kafka), so a client asking one of them may not see it yet.
    assert leader_seen_by(cluster, controller, "t") == 1
    cluster.wait_everywhere(lambda m: m.topics[0].partitions[0].leader_id == 1,
                            "every broker to see 1 lead t", topics=["t"])
    (again,) = admin.elect_leaders(ElectionType.PREFERRED, [t]).result(30).values()
    assert again is not None and again.code() == KafkaError.ELECTION_NOT_NEEDED
    (unknown,) = admin.elect_leaders(ElectionType.PREFERRED,
                                     [TopicPartition("t", 7)]).result(30).values()
    assert unknown is not None and unknown.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    assert cluster.brokers[3].stop() == 0  # u's ISR shrinks to 2 alone
    cluster.brokers[2].kill()
    cluster.wait_for(lambda m: m.topics["u"].partitions[0].leader == -1, "u to go offline")
    cluster.brokers[3].start()
    cluster.wait_for(lambda m: 3 in {b.id for b in m.brokers.values()}, "3 to be back")
    assert cluster.leader("u") == -1  # 3 was not in sync: no election without asking
    admin = cluster.admin()
    for election, error in ((ElectionType.PREFERRED, KafkaError.PREFERRED_LEADER_NOT_AVAILABLE),
                            (ElectionType.UNCLEAN, None)):
        (result,) = admin.elect_leaders(election, [u]).result(30).values()
        assert (result and result.code()) == error
    # As above: the answer means the controller has it; other brokers learn it after.
    cluster.wait_for(lambda m: (m.topics["u"].partitions[0].leader,
                                m.topics["u"].partitions[0].isrs) == (3, [3]),
                     "3 to lead u alone")


def leader_seen_by(cluster: Cluster, broker_id: int, topic: str) -> int:
    """The leader of ``topic``'s partition 0 in one broker's own metadata."""
    with WireConnection(cluster.brokers[broker_id].bootstrap, timeout=5) as connection:
        view = connection.request(ApiKey.METADATA, METADATA_VERSION,
                                  metadata_request([topic], False))
    return int(view.topics[0].partitions[0].leader_id)


def test_a_leader_cut_off_from_everyone_but_clients_stops_acknowledging(
        cluster: Cluster) -> None:
    """The leader loses its peers and ZooKeeper but clients still reach it. It must not
    acknowledge acks=all alone; another broker leads after its session expires; when
    the network heals it follows, truncating whatever it wrote alone."""
    cluster.create_topic("t")
    # The cut-off leader still answers clients, its metadata naming itself leader, and
    # librdkafka keeps asking it alone until its records there time out: shorter
    # timeouts (those records fail, unacknowledged) keep the stall to seconds.
    with LoadGenerator(cluster.bootstrap, "t", **{"message.timeout.ms": 10000,
                                                   "request.timeout.ms": 5000}) as load:
        load.wait_for_acks(300)
        leader = cluster.leader("t")
        cluster.isolate(leader)
        cut_at = len(load.acked)
        cluster.wait_for(lambda m: m.topics["t"].partitions[0].leader not in (leader, -1),
                         "another broker to lead", timeout=60)
        load.wait_for_acks(cut_at + 300, timeout=120)
        cluster.heal_all()
        wait_until_following(cluster, "t", leader)
    verify(cluster, load, "t", 1)
    wait_for_identical_replicas(cluster, "t")


def wait_until_following(cluster: Cluster, topic: str, old_leader: int) -> None:
    """Wait until every broker, the old leader too, knows another broker leads and the
    old leader is back in the ISR. Any broker's word is not enough: the old leader
    itself may still claim the partition (with a stale high watermark) until it hears
    from ZooKeeper, and clients asking it would believe it."""
    def followed(view) -> bool:
        (found,) = [t for t in view.topics if t.name == topic]
        return all(p.leader_id not in (old_leader, -1) and old_leader in p.isr_nodes
                   for p in found.partitions)

    cluster.wait_everywhere(followed, f"broker {old_leader} to follow, back in the ISR",
                            topics=[topic], timeout=60)


def test_a_leader_cut_off_from_its_peers_but_not_zookeeper_commits_nothing_alone(
        cluster: Cluster) -> None:
    """The leader keeps its ZooKeeper session, so it stays leader, but no follower can
    fetch: the ISR shrinks to the leader alone and, below min.insync.replicas, acks=all
    writes are refused rather than acknowledged by one copy. Once healed, the followers
    rejoin and the producer's retries are written once each."""
    cluster.create_topic("t")
    with LoadGenerator(cluster.bootstrap, "t") as load:
        load.wait_for_acks(300)
        leader = cluster.leader("t")
        cluster.isolate(leader, from_zookeeper=False)
        cluster.wait_for(lambda m: m.topics["t"].partitions[0].isrs == [leader],
                         "the ISR to shrink to the leader")
        assert cluster.registered() == {1, 2, 3}
        log = cluster.brokers[leader].log_path
        refusal = f"rejected produce to t-0 from 127.0.0.1: ISR [{leader}] is smaller"
        wait_until(lambda: refusal in log.read_text(), "the leader to refuse acks=all writes")
        cluster.heal_all()
        cluster.wait_for(lambda m: len(m.topics["t"].partitions[0].isrs) == 3
                         and m.topics["t"].partitions[0].leader == leader,
                         "the followers to rejoin")
        load.wait_for_acks(len(load.acked) + 300)
    verify(cluster, load, "t", 1)


def test_a_group_and_its_generation_survive_the_coordinator(cluster: Cluster) -> None:
    """The broker leading the group's __consumer_offsets partition dies; the new leader
    reads the group back from its replica, so the member goes on in the same generation
    (no rebalance: one assignment, its commits accepted) and resumes where it committed."""
    cluster.create_topic("t", partitions=3)
    with LoadGenerator(cluster.bootstrap, "t") as load:
        load.wait_for_acks(600)
    written = {a.value for a in load.acked}
    assignments: list[list[int]] = []
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "survivor",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 30000, "log_level": 0})
    consumer.subscribe(["t"], on_assign=lambda _, ps: assignments.append(
        sorted(p.partition for p in ps)), on_revoke=lambda _, ps: assignments.append([]))
    seen: list[bytes] = []
    try:
        _consume(consumer, seen, len(written) // 2)
        consumer.commit(asynchronous=False)  # acks=all: the ISR has the group's records
        member = consumer.memberid()
        coordinator = _coordinator(cluster, "survivor")
        cluster.brokers[coordinator].kill()
        cluster.wait_for(lambda m: coordinator not in m.brokers, "the coordinator to be gone")
        _consume(consumer, seen, len(written))
        consumer.commit(asynchronous=False)  # refused if its generation were unknown
        assert assignments == [[0, 1, 2]]
        assert consumer.memberid() == member
        assert _coordinator(cluster, "survivor") != coordinator
    finally:
        consumer.close()
    assert sorted(seen) == sorted(written)  # each once: nothing consumed twice


def _consume(consumer: Consumer, seen: list[bytes], until: int) -> None:
    deadline = time.monotonic() + 60
    while len(seen) < until:
        assert time.monotonic() < deadline, f"consumed {len(seen)} of {until}"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value())


def wait_until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_producer_ids_are_unique_across_brokers_and_restarts(cluster: Cluster) -> None:
    """Each broker hands out producer ids from blocks claimed in ZooKeeper: no two
    brokers, and no broker before and after a kill -9, give out the same id."""
    ids: list[int] = []

    def init_producer_ids() -> None:
        for broker in cluster.brokers.values():
            with WireConnection(broker.bootstrap) as connection:
                for _ in range(3):
                    answer = connection.request(ApiKey.INIT_PRODUCER_ID,
                                                INIT_PRODUCER_ID_VERSION,
                                                init_producer_id_request())
                    assert answer.error_code == ErrorCode.none
                    ids.append(answer.producer_id)

    init_producer_ids()
    cluster.brokers[1].kill()
    cluster.brokers[1].start()
    init_producer_ids()
    assert len(set(ids)) == len(ids) == 18, sorted(ids)


def test_an_offset_commit_is_acknowledged_only_once_replicated(cluster: Cluster) -> None:
    """Kafka commits offsets with acks=all: while the coordinator's followers cannot
    fetch, a commit waits; it completes once they have it."""
    cluster.create_topic("t")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g",
                         "enable.auto.commit": False, "log_level": 0})
    try:
        consumer.assign([TopicPartition("t", 0, 0)])
        consumer.commit(offsets=[TopicPartition("t", 0, 1)], asynchronous=False)
        coordinator = _coordinator(cluster, "g")
        followers = [b for b in cluster.brokers if b != coordinator]
        for broker_id in followers:
            cluster.brokers[broker_id].pause()
        committing = threading.Thread(target=consumer.commit, kwargs={
            "offsets": [TopicPartition("t", 0, 2)], "asynchronous": False})
        committing.start()
        committing.join(1.0)  # under replica.lag.time.max.ms: the followers stay in the ISR
        assert committing.is_alive(), "acknowledged before any follower had it"
        for broker_id in followers:
            cluster.brokers[broker_id].resume()
        committing.join(30)
        assert not committing.is_alive()
        assert consumer.committed([TopicPartition("t", 0)], timeout=30)[0].offset == 2
    finally:
        consumer.close()


def test_a_consumer_detects_the_truncation_of_an_unclean_election(cluster: Cluster) -> None:
    """KIP-320 through librdkafka: with min.insync.replicas=1 the leader alone committed
    records a consumer read; then it dies and unclean election makes a replica that never
    had them leader. Validating its position at the new leader epoch, the consumer is
    answered with the end of the epoch it read them in there (OffsetForLeaderEpoch),
    finds its log truncated and says so, then reads the new log from there."""
    cluster.create_topic("t", **{"min.insync.replicas": "1",
                                  "unclean.leader.election.enable": "true"})
    leader = cluster.leader("t")
    follower, other = [b for b in cluster.brokers if b != leader]
    cluster.brokers[follower].kill()
    cluster.brokers[other].kill()
    cluster.wait_for(lambda m: m.topics["t"].partitions[0].isrs == [leader],
                     "the ISR to shrink to the leader")
    # Every broker's address, the dead ones' too: clients must find the follower later.
    everyone = ",".join(broker.bootstrap for broker in cluster.brokers.values())
    producer = Producer({"bootstrap.servers": everyone, "acks": "all", "log_level": 0})
    for i in range(5):
        producer.produce("t", b"committed-alone-%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": everyone, "group.id": "kip-320",
                         "enable.auto.commit": False, "log_level": 0,
                         "auto.offset.reset": "error",
                         "topic.metadata.refresh.interval.ms": 500})
    try:
        consumer.assign([TopicPartition("t", 0, 0)])
        seen: list[bytes] = []
        _consume(consumer, seen, 5)
        cluster.brokers[leader].kill()
        cluster.brokers[follower].start()
        cluster.wait_for(lambda m: m.topics["t"].partitions[0].leader == follower,
                         "the replica without the records to lead")
        deadline = time.monotonic() + 60
        while (message := consumer.poll(0.5)) is None:
            assert time.monotonic() < deadline, "no word from the consumer"
        error = message.error()
        assert error is not None, message.value()
        # With auto.offset.reset=error librdkafka reports it rather than seeking.
        assert error.code() == KafkaError._AUTO_OFFSET_RESET
        assert ("log truncation detected at offset 5 (leader epoch 0): broker end offset "
                "is 0") in error.str()
        producer.produce("t", b"after")
        assert producer.flush(30) == 0
        consumer.assign([TopicPartition("t", 0, 0)])  # from the truncation point
        _consume(consumer, seen, 6)
        assert seen[5:] == [b"after"]
    finally:
        consumer.close()


def test_a_generations_assignment_is_handed_out_only_once_replicated(cluster: Cluster) -> None:
    """As Kafka's storeGroup: SyncGroup answers with a new generation's assignment only
    once the group's record is on every in-sync replica, so that a coordinator moving
    right after loads that generation, and its static members keep their assignment
    (librdkafka's 0102 saw a static member revoked once under load). While the
    coordinator's followers cannot fetch, the assignment waits; it comes once they can."""
    cluster.create_topic("t")
    group = "static"
    # The group's partition of __consumer_offsets exists, led and replicated.
    first = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                      "log_level": 0})
    first.assign([TopicPartition("t", 0, 0)])
    first.commit(offsets=[TopicPartition("t", 0, 0)], asynchronous=False)
    first.close()
    coordinator = _coordinator(cluster, group)
    followers = [b for b in cluster.brokers if b != coordinator]
    assignments: list[list[int]] = []
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "group.instance.id": "instance-1", "session.timeout.ms": 30000,
                         "log_level": 0})
    try:
        for broker_id in followers:
            cluster.brokers[broker_id].pause()
        consumer.subscribe(["t"], on_assign=lambda _, ps: assignments.append(
            sorted(p.partition for p in ps)))
        # Under replica.lag.time.max.ms: the followers stay in the ISR, the record waits.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            consumer.poll(0.1)
        assert assignments == [], "assigned before any follower had the group's record"
        for broker_id in followers:
            cluster.brokers[broker_id].resume()
        wait_until(lambda: consumer.poll(0.1) is not None or assignments == [[0]],
                   "the assignment once replicated")
    finally:
        for broker_id in followers:
            cluster.brokers[broker_id].resume()
        consumer.close()


def test_a_static_members_restart_is_answered_only_once_replicated(cluster: Cluster) -> None:
    """A static member restarted within its session takes its old place without a
    rebalance; as Kafka, the coordinator answers its JoinGroup only once the new member
    id is on every in-sync replica (a coordinator moving meanwhile would fence it).
    The restart's JoinGroup goes straight to the coordinator, so that nothing else
    (a client looking for the coordinator among paused brokers) delays it."""
    cluster.create_topic("t")
    group = "static-restart"
    assignments: list[list[int]] = []
    before = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                       "group.instance.id": "instance-1", "session.timeout.ms": 30000,
                       "log_level": 0})
    before.subscribe(["t"], on_assign=lambda _, ps: assignments.append(
        sorted(p.partition for p in ps)))
    wait_until(lambda: before.poll(0.1) is not None or assignments == [[0]], "an assignment")
    before.close()  # a static member leaves no LeaveGroup: its place is kept
    coordinator = _coordinator(cluster, group)
    followers = [b for b in cluster.brokers if b != coordinator]
    with WireConnection(cluster.brokers[coordinator].bootstrap, timeout=30) as connection:
        try:
            for broker_id in followers:
                cluster.brokers[broker_id].pause()
            connection.send(ApiKey.JOIN_GROUP, JOIN_VERSION, join_request(
                group, instance_id="instance-1", session_ms=30000))
            # Under replica.lag.time.max.ms: the followers stay in the ISR, the answer waits.
            readable, _, _ = select.select([connection.sock], [], [], 1.0)
            assert not readable, "answered before any follower had the new member id"
            for broker_id in followers:
                cluster.brokers[broker_id].resume()
            joined = connection.receive(ApiKey.JOIN_GROUP, JOIN_VERSION)
        finally:
            for broker_id in followers:
                cluster.brokers[broker_id].resume()
    assert joined.error_code == ErrorCode.none
    assert joined.generation_id == 1  # its old place: no rebalance
