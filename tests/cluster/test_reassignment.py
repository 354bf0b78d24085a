"""Partition reassignment (KIP-455) on four real brokers and a real ZooKeeper, asked
with kafka-python's admin client (confluent-kafka 2.16 has no reassignment call) and,
for the older way, by writing ``/admin/reassign_partitions`` as old tools do.

Each move runs under an acks=all idempotent load, and the checker then reads every
acknowledged record back once at its offset. A move that must stay in progress (to
cancel it, or to kill the controller during it) adds a broker cut off from the
partition's replicas (nftables): it is registered and answers clients, so the move
is accepted, but it cannot catch up until the cut heals.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from checker import LoadGenerator, find_anomalies, read_partitions
from clients import WireConnection
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from harness import Cluster
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from kazoo.client import KazooClient
from kio.index import load_payload_module
from kio.schema.types import BrokerId
from kio.static.constants import EntityType
from kio.static.primitive import i32

from gregor.cluster import znodes
from gregor.cluster.zookeeper_server import ZooKeeperServer
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(240)
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Cluster]:
    """Four brokers shared by the module's tests (each uses topics of its own)."""
    started = Cluster(zookeeper, tmp_path_factory.mktemp("reassign"), size=4).start()
    yield started
    started.stop()


@pytest.fixture
def admin(cluster: Cluster) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    yield client
    client.close()


def zk(cluster: Cluster) -> KazooClient:
    cluster.registered()  # opens the harness's own ZooKeeper client
    assert cluster._kazoo is not None
    return cluster._kazoo


def assignment(cluster: Cluster, topic: str) -> znodes.TopicAssignment:
    data, _ = zk(cluster).get(znodes.topic_path(topic))
    return znodes.TopicAssignment.decode(data)


def wait_until(check, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def settled(cluster: Cluster, topic: str, replicas: list[list[int]]) -> None:
    """Wait until the topic's replica sets are ``replicas``, nothing is being moved, every
    ISR is the whole replica set and each leader one of them, in every broker's view."""
    wait_until(lambda: (assignment(cluster, topic).replicas == tuple(map(tuple, replicas))
                        and not assignment(cluster, topic).reassigning),
               f"{topic}'s reassignment to finish")
    cluster.wait_everywhere(
        lambda m: all(sorted(p.replica_nodes) == sorted(replicas[p.partition_index])
                      and sorted(p.isr_nodes) == sorted(replicas[p.partition_index])
                      and p.leader_id in replicas[p.partition_index]
                      for t in m.topics if t.name == topic for p in t.partitions),
        f"{topic} on {replicas} in every broker's metadata", topics=[topic])


def log_dirs(cluster: Cluster, topic: str, index: int) -> set[int]:
    """The brokers holding a log directory of the partition."""
    return {broker_id for broker_id, broker in cluster.brokers.items()
            if (Path(broker.data_dir) / f"{topic}-{index}").exists()}


def verify(cluster: Cluster, load: LoadGenerator, topic: str, partitions: int) -> None:
    found = find_anomalies(load.acked, read_partitions(cluster.bootstrap, topic, partitions))
    assert found.none, found


def test_a_move_under_load_keeps_every_acknowledged_record(cluster: Cluster,
                                                           admin: KafkaAdminClient) -> None:
    """3 brokers -> the other 3 (the leader among those leaving) under acks=all load:
    new replicas catch up and join the ISR, leadership leaves the broker going, the old
    replicas delete their logs, and every acknowledged record is read back once."""
    cluster.create_topic("moved", partitions=2, replication=3)
    before = assignment(cluster, "moved").replicas
    with LoadGenerator(cluster.bootstrap, "moved", rate=1000) as load:
        load.wait_for_acks(500)
        targets = {}
        for index, replicas in enumerate(before):
            (absent,) = set(cluster.brokers) - set(replicas)
            # The first (preferred, leading) replica leaves; the absent broker comes in.
            targets[TopicPartition("moved", index)] = [absent, *replicas[1:]]
        answer = admin.alter_partition_reassignments(targets)
        assert set(answer.values()) == {None}, answer
        load.wait_for_acks(len(load.acked) + 500)
        settled(cluster, "moved", [targets[TopicPartition("moved", i)] for i in range(2)])
        load.wait_for_acks(len(load.acked) + 500)
    verify(cluster, load, "moved", 2)
    assert admin.list_partition_reassignments() == {}
    for index in range(2):
        wanted = set(targets[TopicPartition("moved", index)])
        wait_until(lambda i=index, w=wanted: log_dirs(cluster, "moved", i) == w,
                   "the old replica to delete its log")


def test_replication_factor_up_and_down(cluster: Cluster, admin: KafkaAdminClient) -> None:
    """RF 1 -> 3 -> 2 (as kafka-reassign-partitions.sh does it), data kept throughout."""
    admin_client = cluster.admin()
    admin_client.create_topics([NewTopic("rf", 1, replica_assignment=[[2]])])["rf"].result(30)
    settled(cluster, "rf", [[2]])
    tp = TopicPartition("rf", 0)
    with LoadGenerator(cluster.bootstrap, "rf", rate=500) as load:
        load.wait_for_acks(300)
        assert admin.alter_partition_reassignments({tp: [2, 3, 4]}) == {tp: None}
        settled(cluster, "rf", [[2, 3, 4]])
        load.wait_for_acks(len(load.acked) + 300)
        assert admin.alter_partition_reassignments({tp: [3, 4]}) == {tp: None}
        settled(cluster, "rf", [[3, 4]])
        load.wait_for_acks(len(load.acked) + 300)
    verify(cluster, load, "rf", 1)
    wait_until(lambda: log_dirs(cluster, "rf", 0) == {3, 4}, "broker 2 to delete its log")


def test_cancel_restores_the_original_replicas(cluster: Cluster,
                                               admin: KafkaAdminClient) -> None:
    """A move that cannot finish (its new broker is cut off) is listed while in
    progress, and cancelled: the original replicas stay, the added one leaves."""
    cluster.create_topic("cancelled", partitions=1, replication=3)
    (original,) = assignment(cluster, "cancelled").replicas
    (absent,) = set(cluster.brokers) - set(original)
    tp = TopicPartition("cancelled", 0)
    with LoadGenerator(cluster.bootstrap, "cancelled", rate=500) as load:
        load.wait_for_acks(200)
        for replica in original:
            cluster.cut(absent, replica)
        try:
            target = [absent, *original[:2]]
            assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
            listed = admin.list_partition_reassignments()
            assert listed == {tp: {"replicas": [absent, *original],
                                   "adding_replicas": [absent],
                                   "removing_replicas": [original[2]]}}, listed
            stored = assignment(cluster, "cancelled")
            assert stored.reassigning[0].adding == (absent,)
            load.wait_for_acks(len(load.acked) + 300)
            assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
            settled(cluster, "cancelled", [list(original)])
            assert admin.list_partition_reassignments() == {}
            (again,) = admin.alter_partition_reassignments({tp: None}).values()
            assert again is NoReassignmentInProgressError
        finally:
            cluster.heal_all()
        load.wait_for_acks(len(load.acked) + 300)
    verify(cluster, load, "cancelled", 1)
    wait_until(lambda: log_dirs(cluster, "cancelled", 0) == set(original),
               "the cancelled replica to be gone")


def test_a_new_controller_resumes_a_move(cluster: Cluster, admin: KafkaAdminClient) -> None:
    """The controller is killed while a move waits on its new replica: the next one
    finds the move in the topic's node and finishes it once the replica catches up."""
    controller = cluster.metadata().controller_id
    others = sorted(set(cluster.brokers) - {controller})
    admin_client = cluster.admin()
    adding, kept = others[0], others[1:]
    admin_client.create_topics([NewTopic("resumed", 1, replica_assignment=[kept])])[
        "resumed"].result(30)
    settled(cluster, "resumed", [kept])
    tp = TopicPartition("resumed", 0)
    with LoadGenerator(cluster.bootstrap, "resumed", rate=500) as load:
        load.wait_for_acks(200)
        for replica in kept:
            cluster.cut(adding, replica)
        try:
            target = [adding, kept[0]]
            assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
            cluster.brokers[controller].kill()
            cluster.wait_for(lambda m: m.controller_id not in (controller, -1),
                             "a new controller")
            assert assignment(cluster, "resumed").reassigning  # still in progress
        finally:
            cluster.heal_all()
        settled_without = [target]
        wait_until(lambda: assignment(cluster, "resumed").replicas == ((adding, kept[0]),),
                   "the new controller to finish the move")
        load.wait_for_acks(len(load.acked) + 300)
    cluster.brokers[controller].start()
    settled(cluster, "resumed", settled_without)
    verify(cluster, load, "resumed", 1)


def test_the_older_znode_is_honoured(cluster: Cluster) -> None:
    """``/admin/reassign_partitions`` written as pre-2.4 tools do: the move is made and
    the node deleted once it is done."""
    cluster.create_topic("legacy", partitions=1, replication=2)
    (original,) = assignment(cluster, "legacy").replicas
    target = sorted(set(cluster.brokers) - set(original))
    zk(cluster).create(znodes.REASSIGN_PARTITIONS, json.dumps(
        {"version": 1, "partitions": [{"topic": "legacy", "partition": 0,
                                       "replicas": target}]}).encode())
    settled(cluster, "legacy", [target])
    wait_until(lambda: zk(cluster).exists(znodes.REASSIGN_PARTITIONS) is None,
               "the node to be deleted")


def test_kafkas_errors(cluster: Cluster, admin: KafkaAdminClient) -> None:
    cluster.create_topic("errors", partitions=1, replication=2)
    tp = TopicPartition("errors", 0)
    for target in ([1, 1], [1, 9], [-1, 2]):  # an empty list kafka-python refuses itself
        assert admin.alter_partition_reassignments({tp: target}) == {
            tp: InvalidReplicationAssignmentError}, target
    assert admin.alter_partition_reassignments({TopicPartition("errors", 5): [1, 2]}) == {
        TopicPartition("errors", 5): UnknownTopicOrPartitionError}
    assert admin.alter_partition_reassignments({tp: None}) == {
        tp: NoReassignmentInProgressError}
    assert admin.list_partition_reassignments() == {}
    # Sent to a broker that is not the controller: NOT_CONTROLLER, at the top level.
    controller = cluster.metadata().controller_id
    other = next(b for b in cluster.brokers if b != controller)
    key, version = ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0
    schema = load_payload_module(key, version, EntityType.request)
    body = schema.AlterPartitionReassignmentsRequest(topics=(schema.ReassignableTopic(
        name="errors", partitions=(schema.ReassignablePartition(
            partition_index=i32(0), replicas=(BrokerId(1), BrokerId(2))),)),))
    with WireConnection(cluster.brokers[other].bootstrap) as connection:
        answer = connection.request(key, version, body)
    assert answer.error_code == ErrorCode.not_controller
    assert answer.responses == ()


def gregor(cluster: Cluster, *args: str, status: int = 0) -> str:
    """Run a ``gregor cluster`` command as users do; its standard output."""
    result = subprocess.run([sys.executable, "-m", "gregor.cli.main", "cluster", *args,
                             "--bootstrap-server", cluster.bootstrap],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == status, result.stdout + result.stderr
    return result.stdout


def test_the_command_line_adds_drains_and_runs_plans(cluster: Cluster,
                                                      tmp_path: Path) -> None:
    """``add-broker`` moves broker 4's share of a topic onto it and ``drain`` moves it
    all off again, each waiting until done; ``reassign --generate`` proposes a plan
    that ``--execute`` starts and ``--verify`` sees done, in Kafka's JSON."""
    placement = [[1 + i % 3, 1 + (i + 1) % 3] for i in range(6)]
    admin_client = cluster.admin()  # kept alive until the answer: its futures need it
    admin_client.create_topics([NewTopic("cli", 6, replica_assignment=placement)])[
        "cli"].result(30)
    settled(cluster, "cli", placement)
    with LoadGenerator(cluster.bootstrap, "cli", rate=500) as load:
        load.wait_for_acks(300)
        out = gregor(cluster, "add-broker", "4", "--topics", "cli")
        assert "Done: 3/3 partition(s) done" in out, out
        held = Counter(r for replicas in assignment(cluster, "cli").replicas for r in replicas)
        assert held == {1: 3, 2: 3, 3: 3, 4: 3}
        out = gregor(cluster, "drain", "4", "--topics", "cli")
        assert "Done:" in out, out
        assert all(4 not in r for r in assignment(cluster, "cli").replicas)

        generated = gregor(cluster, "reassign", "--generate", "--topics", "cli",
                           "--brokers", "1,2").splitlines()
        assert generated[0] == "Current partition replica assignment"
        assert generated[3] == "Proposed partition reassignment configuration"
        plan_file = tmp_path / "plan.json"
        plan_file.write_text(generated[4])
        plan = json.loads(generated[4])
        assert {tuple(sorted(p["replicas"])) for p in plan["partitions"]} == {(1, 2)}
        out = gregor(cluster, "reassign", "--execute", "--reassignment-json-file",
                     str(plan_file), "--throttle", "50000000")
        assert "Successfully started partition reassignment(s) for cli-0" in out, out
        assert "throughput limit was set to 50000000 B/s" in out
        wait_until(lambda: subprocess.run(
            [sys.executable, "-m", "gregor.cli.main", "cluster", "reassign", "--verify",
             "--reassignment-json-file", str(plan_file), "--bootstrap-server",
             cluster.bootstrap], capture_output=True, timeout=60).returncode == 0,
            "--verify to see the plan done")
        out = gregor(cluster, "reassign", "--verify", "--reassignment-json-file",
                     str(plan_file))
        assert "is completed" in out and "Clearing broker-level throttles" in out
        # --verify removed every throttle --execute set.
        broker = ConfigResource("broker", "1")
        described = admin_client.describe_configs([broker])[broker].result(30)
        assert described["leader.replication.throttled.rate"].value == str(2**63 - 1)
        assert described["leader.replication.throttled.rate"].is_default
        topic = ConfigResource("topic", "cli")
        described = admin_client.describe_configs([topic])[topic].result(30)
        assert described["follower.replication.throttled.replicas"].value == ""
        assert described["follower.replication.throttled.replicas"].is_default
        assert gregor(cluster, "reassign", "--list") == ""
        load.wait_for_acks(len(load.acked) + 300)
    verify(cluster, load, "cli", 6)
    settled(cluster, "cli", [p["replicas"] for p in plan["partitions"]])


def test_throttles_slow_only_the_listed_replicas(cluster: Cluster) -> None:
    """With ``*.replication.throttled.rate`` at 1 MB/s on the brokers and one topic's
    replicas listed (``*``), copying that topic's 3 MB to a new broker takes about 3 s,
    while an unlisted topic's 3 MB moved at the same time is copied unthrottled."""
    admin_client = cluster.admin()
    for name in ("slow", "fast"):
        admin_client.create_topics([NewTopic(name, 1, replica_assignment=[[1]])])[
            name].result(30)
    settled(cluster, "slow", [[1]])
    settled(cluster, "fast", [[1]])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20})
    payload = os.urandom(10_000)
    for name in ("slow", "fast"):
        for _ in range(300):
            producer.produce(name, payload)
            producer.poll(0)
    assert producer.flush(30) == 0

    def set_configs(rate: str, replicas: str) -> None:
        for broker_id in ("1", "2"):
            resource = ConfigResource("broker", broker_id, incremental_configs=[
                ConfigEntry(name, rate, incremental_operation=AlterConfigOpType.SET)
                for name in ("leader.replication.throttled.rate",
                             "follower.replication.throttled.rate")])
            admin_client.incremental_alter_configs([resource])[resource].result(30)
        resource = ConfigResource("topic", "slow", incremental_configs=[
            ConfigEntry(name, replicas, incremental_operation=AlterConfigOpType.SET)
            for name in ("leader.replication.throttled.replicas",
                         "follower.replication.throttled.replicas")])
        admin_client.incremental_alter_configs([resource])[resource].result(30)

    set_configs("1000000", "*")
    try:
        cluster.wait_everywhere(lambda m: True, "the configs to spread")  # a round trip each
        time.sleep(1)
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        started = time.monotonic()
        admin.alter_partition_reassignments({TopicPartition("slow", 0): [1, 2],
                                             TopicPartition("fast", 0): [1, 2]})
        admin.close()
        settled(cluster, "fast", [[1, 2]])
        fast = time.monotonic() - started
        settled(cluster, "slow", [[1, 2]])
        slow = time.monotonic() - started
    finally:
        set_configs(str(2**63 - 1), "")
    # 3 MB at 1 MB/s, less the first second's allowance: at least 2 s, and well after
    # the unlisted topic's copy.
    assert slow >= 2.0 and slow > fast + 1.0, (slow, fast)
