"""Read and fsync errors take a log directory offline too (KIP-112: any IO error on a
directory does), on a real 3-broker cluster on real ZooKeeper.

Broker 1 keeps its partitions in two log directories, one of them an ext4 file system
on a loop device. ``EXT4_IOC_SHUTDOWN`` (what xfstests' ``godown`` uses to simulate a
dead disk) makes every later IO on that file system fail with EIO, cached pages or not:
a real kernel IO error, not a mock. Nothing is written there after the shutdown (the
periodic checkpoint has nothing new to write, no producer runs), so the only IO is the
one under test: a consumer's fetch reading a segment, or the ``flush.ms`` fsync that
the broker's flusher thread runs. Either must take the directory offline: its
partitions' leaderships move off broker 1, which keeps serving the other directory.

Every broker's Metadata answers then list broker 1's replicas of the failed directory
in ``offline_replicas`` (as Kafka's do), read by kafka-python's admin client and by
each broker's own answer, and still do after the controller is killed and restarted
(a new controller, and a broker that starts after the failure, learn them from
ZooKeeper), and after broker 1's own session expired and it registered again.

Needs root and a free loop device; skipped otherwise.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import (
    FETCH_VERSION,
    PRODUCE_VERSION,
    TIMEOUT,
    WireConnection,
    fetch_request,
    make_batch,
    produce_request,
    versioned_request,
)
from confluent_kafka.admin import NewTopic
from harness import Cluster
from kafka.admin import KafkaAdminClient

from gregor.cluster import znodes
from gregor.cluster.zookeeper_server import ZooKeeperServer
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(240)

_PARTITIONS = 6
_EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
_GOING_FLAGS_NOLOGFLUSH = 2
# Longer than a periodic checkpoint (5 s): the HWs the producer moved are on disk
# before the file system goes, so the checkpoint writes nothing there afterwards.
_SETTLE_S = 7.0
# Batches of 4 records (under max.message.bytes): 16 MB in one partition of the 64 MB
# disk, far more than the socket buffers between broker 1 and a consumer that is not
# reading hold.
_SENDFILE_BATCHES, _SENDFILE_RECORD = 20, 200 << 10
# The leaderships move within seconds once the directory is offline.
_MOVE_S = 20.0


@pytest.fixture
def ext4_disk(tmp_path: Path) -> Iterator[Path]:
    """A mounted 64 MB ext4 file system on a loop device; unmounted at the end."""
    image, mount = tmp_path / "disk.img", (tmp_path / "disk-ext4").resolve()
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True)
    if made.returncode != 0 or subprocess.run(
            ["mount", "-o", "loop", str(image), str(mount)], capture_output=True).returncode:
        pytest.skip("needs root, mkfs.ext4 and a loop device")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _shut_down(mount: Path) -> None:
    fd = os.open(mount, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, _EXT4_IOC_SHUTDOWN, struct.pack("I", _GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)


def _cluster(zookeeper: ZooKeeperServer, tmp_path: Path, disk: Path) -> Cluster:
    cluster = Cluster(zookeeper, tmp_path)
    other = (tmp_path / "disk-a").resolve()
    cluster.brokers[1].overrides["log.dirs"] = f"{other},{disk}"
    return cluster


def _on_disk(disk: Path, topic: str) -> set[int]:
    return {i for i in range(_PARTITIONS) if (disk / f"{topic}-{i}").is_dir()}


def _produce(cluster: Cluster, topic: str) -> None:
    for index in range(_PARTITIONS):
        leader = cluster.leader(topic, index)
        with WireConnection(cluster.brokers[leader].bootstrap) as connection:
            answer = connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
                topic, index, make_batch([b"record-%d" % i for i in range(50)])))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none


def _moved_off_broker_1(cluster: Cluster, topic: str, lost: set[int]) -> None:
    cluster.wait_for(lambda m: all(
        m.topics[topic].partitions[i].leader not in (1, -1)
        and 1 not in m.topics[topic].partitions[i].isrs for i in lost),
        "the failed directory's leaderships to move off broker 1", timeout=_MOVE_S)


def _offline_in_describe_log_dirs(cluster: Cluster, disk: Path) -> None:
    with WireConnection(cluster.brokers[1].bootstrap) as connection:
        key = ApiKey.DESCRIBE_LOG_DIRS
        described = connection.request(key, 4, versioned_request(
            key, 4, "DescribeLogDirsRequest", topics=None))
    results = {r.log_dir: r.error_code for r in described.results}
    assert results[str(disk)] == ErrorCode.kafka_storage_error
    assert list(results.values()).count(ErrorCode.none) == 1


def test_a_read_error_takes_the_directory_offline(
        zookeeper: ZooKeeperServer, tmp_path: Path, ext4_disk: Path) -> None:
    with _cluster(zookeeper, tmp_path, ext4_disk) as cluster:
        cluster.create_topic("r", partitions=_PARTITIONS)
        _produce(cluster, "r")
        lost = _on_disk(ext4_disk, "r")
        led = [i for i in sorted(lost) if cluster.leader("r", i) == 1]
        assert led, "broker 1 leads none of the partitions on the ext4 disk"
        time.sleep(_SETTLE_S)
        _shut_down(ext4_disk)
        # A consumer reads from the start: the segment read fails with EIO, either in
        # finding the bytes (the answer says KAFKA_STORAGE_ERROR) or, where the segment
        # remembers where its latest batches start and reads nothing to find them, in
        # sending them (the connection closes). Either way the directory fails.
        try:
            with WireConnection(cluster.brokers[1].bootstrap) as connection:
                answer = connection.request(ApiKey.FETCH, FETCH_VERSION,
                                            fetch_request("r", led[0], 0))
        except ConnectionError:
            pass
        else:
            error = answer.responses[0].partitions[0].error_code
            assert error == ErrorCode.kafka_storage_error
        _moved_off_broker_1(cluster, "r", lost)
        _offline_in_describe_log_dirs(cluster, ext4_disk)
        assert 1 in cluster.registered()


def test_a_read_error_inside_sendfile_takes_the_directory_offline(
        zookeeper: ZooKeeperServer, tmp_path: Path, ext4_disk: Path) -> None:
    """The fetch finds its bytes (the file system still works), and the disk fails
    while ``sendfile`` sends them: the consumer reads slower than the answer goes, so
    most of it is sent after the shutdown, and that ``sendfile`` meets EIO."""
    with _cluster(zookeeper, tmp_path, ext4_disk) as cluster:
        cluster.create_topic("s", partitions=_PARTITIONS)
        lost = _on_disk(ext4_disk, "s")
        led = [i for i in sorted(lost) if cluster.leader("s", i) == 1]
        assert led, "broker 1 leads none of the partitions on the ext4 disk"
        with WireConnection(cluster.brokers[1].bootstrap) as connection:
            for _ in range(_SENDFILE_BATCHES):
                answer = connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
                    "s", led[0], make_batch([os.urandom(_SENDFILE_RECORD)] * 4), acks=1))
                assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
        time.sleep(_SETTLE_S)
        with WireConnection(cluster.brokers[1].bootstrap) as connection:
            # A small receive window: the answer waits in broker 1's sendfile.
            connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
            connection.send(ApiKey.FETCH, FETCH_VERSION, fetch_request(
                "s", led[0], 0, max_bytes=_SENDFILE_BATCHES * 4 * _SENDFILE_RECORD))
            time.sleep(1.0)
            _shut_down(ext4_disk)
            received = 0
            while chunk := connection.sock.recv(1 << 20):
                received += len(chunk)
        # Cut short: the connection closed in the middle of the answer.
        assert received < _SENDFILE_BATCHES * 4 * _SENDFILE_RECORD
        _moved_off_broker_1(cluster, "s", lost)
        _offline_in_describe_log_dirs(cluster, ext4_disk)
        assert 1 in cluster.registered()


def test_a_failed_fsync_on_the_flusher_thread_takes_the_directory_offline(
        zookeeper: ZooKeeperServer, tmp_path: Path, ext4_disk: Path) -> None:
    with _cluster(zookeeper, tmp_path, ext4_disk) as cluster:
        # The timed flush comes after the settling and the shutdown.
        cluster.create_topic("f", partitions=_PARTITIONS, **{"flush.ms": "15000"})
        _produce(cluster, "f")
        lost = _on_disk(ext4_disk, "f")
        assert lost
        time.sleep(_SETTLE_S)
        _shut_down(ext4_disk)
        # Nothing asks anything of the directory: the flusher's fsync finds the error.
        _moved_off_broker_1(cluster, "f", lost)
        _offline_in_describe_log_dirs(cluster, ext4_disk)
        assert 1 in cluster.registered()


def _offline_everywhere(cluster: Cluster, topic: str, lost: set[int]) -> None:
    expected = {i: [1] if i in lost else [] for i in range(_PARTITIONS)}
    cluster.wait_everywhere(lambda m: {
        p.partition_index: sorted(p.offline_replicas) for t in m.topics if t.name == topic
        for p in t.partitions} == expected,
        "every broker to name broker 1's lost replicas offline", topics=[topic])


def test_metadata_names_the_replicas_of_a_failed_directory_offline(
        zookeeper: ZooKeeperServer, tmp_path: Path, ext4_disk: Path) -> None:
    with _cluster(zookeeper, tmp_path, ext4_disk) as cluster:
        cluster.create_topic("m", partitions=_PARTITIONS)
        lost = _on_disk(ext4_disk, "m")
        assert lost and len(lost) < _PARTITIONS
        _shut_down(ext4_disk)
        # A write to each lost partition fails on broker 1 (leader or follower).
        for index in sorted(lost):
            leader = cluster.leader("m", index)
            with WireConnection(cluster.brokers[leader].bootstrap) as connection:
                connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
                    "m", index, make_batch([b"after"]), acks=1))
        _moved_off_broker_1(cluster, "m", lost)
        _offline_everywhere(cluster, "m", lost)
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap,
                                 request_timeout_ms=int(TIMEOUT * 1000))
        try:
            (described,) = admin.describe_topics(["m"])
        finally:
            admin.close()
        assert {p["partition_index"]: p["offline_replicas"] for p in described["partitions"]} == {
            i: [1] if i in lost else [] for i in range(_PARTITIONS)}
        # A new controller, and a broker started after the failure, know it too.
        controller = cluster.metadata().controller_id
        restarted = controller if controller != 1 else 2
        cluster.brokers[restarted].kill()
        cluster.wait_for(lambda m: m.controller_id not in (-1, restarted)
                         and restarted not in m.brokers, "a new controller")
        cluster.brokers[restarted].start()
        cluster.wait_everywhere(lambda m: {b.node_id for b in m.brokers} == {1, 2, 3},
                                f"broker {restarted} to be back")
        _offline_everywhere(cluster, "m", lost)
        # Broker 1's session expires (paused past its timeout): its ephemeral nodes go,
        # and it writes its offline replicas again once registered in a new session.
        cluster.brokers[1].pause()
        try:
            cluster.wait_for(lambda m: 1 not in m.brokers, "broker 1's session to expire")
        finally:
            cluster.brokers[1].resume()
        cluster.wait_everywhere(lambda m: {b.node_id for b in m.brokers} == {1, 2, 3},
                                "broker 1 to register again")
        _offline_everywhere(cluster, "m", lost)


def test_a_new_controller_elects_no_replica_it_learns_offline_from_zookeeper(
        zookeeper: ZooKeeperServer, tmp_path: Path, ext4_disk: Path) -> None:
    """Partitions on brokers 1 and C (the controller), unclean election allowed: broker
    1's directory fails, C leads them alone. C dies: its successor, which never saw the
    failure's event (C consumed it), must still leave broker 1's lost replicas out of
    the unclean election (it learns them from ``/offline_replicas/1``): they stay
    leaderless rather than led by a broker that has no log for them."""
    with _cluster(zookeeper, tmp_path, ext4_disk) as cluster:
        while (controller := cluster.metadata().controller_id) in (1, -1):
            cluster.brokers[1].kill()  # broker 1 must stay up: the controller moves off it
            cluster.brokers[1].start()
            cluster.wait_for(lambda m: 1 in m.brokers and m.controller_id != -1,
                             "broker 1 back and a controller")
        admin = cluster.admin()
        assignment = [[1, 2], [1, 2], [1, 3], [1, 3], [1, 2], [1, 3]]
        admin.create_topics([NewTopic("u", _PARTITIONS, replica_assignment=assignment, config={
            "unclean.leader.election.enable": "true"})])["u"].result(timeout=30)
        cluster.wait_everywhere(lambda m: any(
            t.name == "u" and len(t.partitions) == _PARTITIONS
            and all(len(p.isr_nodes) == 2 for p in t.partitions) for t in m.topics),
            "u led and in sync", topics=["u"])
        lost = _on_disk(ext4_disk, "u")
        target = sorted(i for i in lost if assignment[i] == [1, controller])
        assert target, f"no partition of broker 1's ext4 disk is shared with {controller}"
        _shut_down(ext4_disk)
        for index in sorted(lost):  # a write to each fails on broker 1
            with WireConnection(cluster.brokers[cluster.leader("u", index)].bootstrap) as c:
                c.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
                    "u", index, make_batch([b"after"]), acks=1))
        _moved_off_broker_1(cluster, "u", lost)
        _offline_everywhere(cluster, "u", lost)
        cluster.registered()  # opens the harness's own ZooKeeper client
        zk = cluster._kazoo
        assert zk is not None

        def states() -> dict[int, tuple[int, int]]:
            """(leader, partition epoch) of each target partition, from ZooKeeper."""
            found = {}
            for index in target:
                data, stat = zk.get(znodes.partition_state_path("u", index))
                found[index] = (znodes.decode_partition_state(
                    data, tuple(assignment[index]), stat.version).leader, stat.version)
            return found

        before = states()
        assert {leader for leader, _ in before.values()} == {controller}
        cluster.brokers[controller].kill()
        deadline = time.monotonic() + _MOVE_S
        after = before
        while any(leader == controller for leader, _ in after.values()):
            assert time.monotonic() < deadline, "no new controller elected for them"
            time.sleep(0.05)
            after = states()
        # One election each, to no leader: not broker 1, not even for a moment.
        assert after == {index: (-1, epoch + 1) for index, (_, epoch) in before.items()}
