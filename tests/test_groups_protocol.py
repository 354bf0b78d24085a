"""The group coordinator's exact answers, request by request.

Real clients react to errors (rejoin, reset their member id, retry) before a test
could see them, so the error cases and the misbehaving clients -- a member that
stops rejoining, a leader that vanishes mid-rebalance, absurd timeouts, huge
metadata -- are sent as raw requests with kio, as a client would encode them.
"""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from typing import Any

import pytest
from clients import WireConnection
from group_clients import PollingConsumer, create_topic, produce, wait_until
from kio.index import load_payload_module
from kio.static.constants import EntityType

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build
from gregor.protocol.errors import ErrorCode

JOIN_VERSION = 5
SYNC_VERSION = 3
HEARTBEAT_VERSION = 3
LEAVE_VERSION = 3
COMMIT_VERSION = 8
FETCH_VERSION = 7


def _schema(api_key: ApiKey, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def wire(broker: BrokerProcess):
    connections: list[WireConnection] = []

    def connect() -> WireConnection:
        connections.append(WireConnection(broker.bootstrap, timeout=30))
        return connections[-1]
    yield connect
    for connection in connections:
        connection.close()


def join_request(group: str, member_id: str = "", *, instance_id: str | None = None,
                 session_ms: int = 6000, rebalance_ms: int = 3000, metadata: bytes = b"meta",
                 protocol_type: str = "consumer", protocol: str = "range",
                 version: int = JOIN_VERSION):
    s = _schema(ApiKey.JOIN_GROUP, version)
    return build(s.JoinGroupRequest, group_id=group, session_timeout=_ms(session_ms),
                 rebalance_timeout=_ms(rebalance_ms), member_id=member_id,
                 group_instance_id=instance_id, protocol_type=protocol_type, reason=None,
                 protocols=(s.JoinGroupRequestProtocol(name=protocol, metadata=metadata),))


def join(connection: WireConnection, group: str, member_id: str = "", **kwargs: Any):
    version = kwargs.get("version", JOIN_VERSION)
    return connection.request(ApiKey.JOIN_GROUP, version, join_request(group, member_id, **kwargs))


def join_new(connection: WireConnection, group: str, **kwargs: Any):
    """A dynamic member's two JoinGroups (KIP-394): get a member id, then join with it."""
    first = join(connection, group, **kwargs)
    assert first.error_code == ErrorCode.member_id_required
    return join(connection, group, first.member_id, **kwargs)


def sync(connection: WireConnection, group: str, generation: int, member_id: str,
         assignments: dict[str, bytes] | None = None, instance_id: str | None = None):
    s = _schema(ApiKey.SYNC_GROUP, SYNC_VERSION)
    return connection.request(ApiKey.SYNC_GROUP, SYNC_VERSION, s.SyncGroupRequest(
        group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=instance_id, assignments=tuple(
            s.SyncGroupRequestAssignment(member_id=m, assignment=a)
            for m, a in (assignments or {}).items())))


def heartbeat(connection: WireConnection, group: str, generation: int, member_id: str,
              instance_id: str | None = None) -> ErrorCode:
    s = _schema(ApiKey.HEARTBEAT, HEARTBEAT_VERSION)
    return connection.request(ApiKey.HEARTBEAT, HEARTBEAT_VERSION, s.HeartbeatRequest(
        group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=instance_id)).error_code


def commit(connection: WireConnection, group: str, generation: int, member_id: str,
           offsets: dict[tuple[str, int], int], metadata: str = "",
           version: int = COMMIT_VERSION, retention_ms: int = -1) -> dict[tuple[str, int], int]:
    s = _schema(ApiKey.OFFSET_COMMIT, version)
    topics: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(build(
            s.OffsetCommitRequestPartition, partition_index=partition, committed_offset=offset,
            committed_leader_epoch=-1, committed_metadata=metadata))
    answer = connection.request(ApiKey.OFFSET_COMMIT, version, build(
        s.OffsetCommitRequest, group_id=group, generation_id_or_member_epoch=generation,
        member_id=member_id, group_instance_id=None, retention_time=_ms(retention_ms),
        topics=tuple(s.OffsetCommitRequestTopic(name=t, partitions=tuple(p))
                     for t, p in topics.items())))
    return {(t.name, p.partition_index): p.error_code for t in answer.topics
            for p in t.partitions}


def fetch_offsets(connection: WireConnection, group: str,
                  partitions: list[tuple[str, int]] | None = None) -> tuple[ErrorCode, dict]:
    s = _schema(ApiKey.OFFSET_FETCH, FETCH_VERSION)
    topics = None
    if partitions is not None:
        topics = tuple(s.OffsetFetchRequestTopic(name=t, partition_indexes=(p,))
                       for t, p in partitions)
    answer = connection.request(ApiKey.OFFSET_FETCH, FETCH_VERSION, s.OffsetFetchRequest(
        group_id=group, topics=topics, require_stable=False))
    return answer.error_code, {(t.name, p.partition_index): (p.committed_offset, p.metadata)
                               for t in answer.topics for p in t.partitions}


def describe(connection: WireConnection, group: str, version: int = 5):
    s = _schema(ApiKey.DESCRIBE_GROUPS, version)
    return connection.request(ApiKey.DESCRIBE_GROUPS, version, build(
        s.DescribeGroupsRequest, groups=(group,), include_authorized_operations=True)).groups[0]


class Heartbeats:
    """Keeps a member's session alive from a thread, like a client's heartbeat thread."""

    def __init__(self, broker: BrokerProcess, group: str, generation: int,
                 member_id: str) -> None:
        self.errors: list[ErrorCode] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(broker, group, generation, member_id), daemon=True)
        self._thread.start()

    def _run(self, broker: BrokerProcess, group: str, generation: int, member_id: str) -> None:
        with WireConnection(broker.bootstrap) as connection:
            while not self._stop.wait(0.3):
                self.errors.append(heartbeat(connection, group, generation, member_id))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------- membership
def test_join_sync_heartbeat_describe_and_leave(wire, group: str) -> None:
    connection = wire()
    joined = join_new(connection, group, metadata=b"subscription")
    assert joined.error_code == ErrorCode.none
    assert joined.generation_id == 1 and joined.leader == joined.member_id
    assert joined.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in joined.members] == [
        (joined.member_id, b"subscription")]
    synced = sync(connection, group, 1, joined.member_id, {joined.member_id: b"assignment"})
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"assignment")
    assert heartbeat(connection, group, 1, joined.member_id) == ErrorCode.none
    described = describe(connection, group)
    assert (described.error_code, described.group_state, described.protocol_type,
            described.protocol_data) == (ErrorCode.none, "Stable", "consumer", "range")
    [member] = described.members
    assert (member.member_id, member.client_id, member.client_host, member.member_metadata,
            member.member_assignment) == (joined.member_id, "gregor-tests", "/127.0.0.1",
                                          b"subscription", b"assignment")
    s = _schema(ApiKey.LEAVE_GROUP, LEAVE_VERSION)
    left = connection.request(ApiKey.LEAVE_GROUP, LEAVE_VERSION, s.LeaveGroupRequest(
        group_id=group, members=(s.MemberIdentity(member_id=joined.member_id,
                                                  group_instance_id=None),)))
    assert [m.error_code for m in left.members] == [ErrorCode.none]
    assert describe(connection, group).group_state == "Empty"


@pytest.mark.parametrize("version", [0, 1, 3, 7, 9])
def test_join_versions_without_and_with_member_id_required(wire, group: str,
                                                           version: int) -> None:
    connection = wire()
    if version >= 4:
        joined = join_new(connection, group, version=version)
    else:
        joined = join(connection, group, version=version, rebalance_ms=6000)
    assert joined.error_code == ErrorCode.none and joined.generation_id == 1
    assert joined.leader == joined.member_id and len(joined.members) == 1


def test_join_rejects_bad_requests(wire, group: str) -> None:
    connection = wire()
    for session_ms in (1000, 3_600_000):
        answer = join(connection, group, session_ms=session_ms)
        assert answer.error_code == ErrorCode.invalid_session_timeout
    assert join(connection, "").error_code == ErrorCode.invalid_group_id
    assert join(connection, group, "made-up").error_code == ErrorCode.unknown_member_id
    assert join(connection, group, protocol_type="").error_code == (
        ErrorCode.inconsistent_group_protocol)
    joined = join_new(connection, group)
    other = join(wire(), group, protocol_type="connect")
    assert other.error_code == ErrorCode.inconsistent_group_protocol
    other = join(wire(), group, protocol="a-protocol-nobody-else-has")
    assert other.error_code == ErrorCode.inconsistent_group_protocol
    assert heartbeat(connection, group, 1, joined.member_id) == ErrorCode.none


def test_heartbeat_and_sync_errors(wire, group: str) -> None:
    connection = wire()
    assert heartbeat(connection, group, 1, "nobody") == ErrorCode.unknown_member_id
    joined = join_new(connection, group)
    member = joined.member_id
    assert sync(connection, group, 1, member, {member: b"a"}).error_code == ErrorCode.none
    assert heartbeat(connection, group, 1, "nobody") == ErrorCode.unknown_member_id
    assert heartbeat(connection, group, 0, member) == ErrorCode.illegal_generation
    assert sync(connection, group, 7, member).error_code == ErrorCode.illegal_generation
    assert sync(connection, group, 1, "nobody").error_code == ErrorCode.unknown_member_id
    # A second member starts a rebalance: the first learns it from its heartbeat.
    newcomer = wire()
    first = join(newcomer, group)
    newcomer.send(ApiKey.JOIN_GROUP, JOIN_VERSION, join_request(group, first.member_id))
    assert heartbeat(connection, group, 1, member) == ErrorCode.rebalance_in_progress
    assert sync(connection, group, 1, member).error_code == ErrorCode.rebalance_in_progress
    rejoined = join(connection, group, member)
    assert rejoined.generation_id == 2
    assert newcomer.receive(ApiKey.JOIN_GROUP, JOIN_VERSION).generation_id == 2


def test_join_completes_as_soon_as_every_member_rejoined(wire, group: str) -> None:
    """With a 60 s rebalance timeout, the join phase still ends when the last known
    member is back, not when the timeout runs out."""
    leader = wire()
    joined = join_new(leader, group, rebalance_ms=60000)
    sync(leader, group, 1, joined.member_id, {joined.member_id: b""})
    newcomer = wire()
    first = join(newcomer, group, rebalance_ms=60000)
    started = time.monotonic()
    newcomer.send(ApiKey.JOIN_GROUP, JOIN_VERSION,
                  join_request(group, first.member_id, rebalance_ms=60000))
    assert heartbeat(leader, group, 1, joined.member_id) == ErrorCode.rebalance_in_progress
    rejoined = join(leader, group, joined.member_id, rebalance_ms=60000)
    answer = newcomer.receive(ApiKey.JOIN_GROUP, JOIN_VERSION)
    assert time.monotonic() - started < 10
    assert rejoined.generation_id == answer.generation_id == 2
    assert {m.member_id for m in rejoined.members} == {joined.member_id, first.member_id}
    assert answer.members == ()


def test_member_that_stops_rejoining_is_removed_after_its_rebalance_timeout(
        broker: BrokerProcess, wire, group: str) -> None:
    """max.poll.interval.ms: a member that keeps heartbeating but never rejoins (its
    application is stuck) is dropped when the rebalance timeout ends the join phase."""
    stuck = wire()
    joined = join_new(stuck, group, rebalance_ms=2000)
    sync(stuck, group, 1, joined.member_id, {joined.member_id: b""})
    beats = Heartbeats(broker, group, 1, joined.member_id)
    try:
        newcomer = wire()
        answer = join_new(newcomer, group, rebalance_ms=2000)
        assert answer.error_code == ErrorCode.none and answer.generation_id == 2
        assert answer.leader == answer.member_id
        assert [m.member_id for m in answer.members] == [answer.member_id]
        wait_until(lambda: ErrorCode.unknown_member_id in beats.errors, timeout=5,
                   what="the stuck member to learn it was removed")
    finally:
        beats.stop()
    assert ErrorCode.rebalance_in_progress in beats.errors


def test_leader_vanishing_before_sync_does_not_wedge_the_group(wire, group: str) -> None:
    leader, follower = wire(), wire()
    first = join_new(leader, group, rebalance_ms=2000)
    sync(leader, group, 1, first.member_id, {first.member_id: b""})
    second = join(follower, group, rebalance_ms=2000)
    follower.send(ApiKey.JOIN_GROUP, JOIN_VERSION,
                  join_request(group, second.member_id, rebalance_ms=2000))
    join(leader, group, first.member_id, rebalance_ms=2000)
    follower_joined = follower.receive(ApiKey.JOIN_GROUP, JOIN_VERSION)
    assert follower_joined.generation_id == 2
    leader.close()  # the leader is gone before sending its assignment
    synced = sync(follower, group, 2, second.member_id)
    assert synced.error_code == ErrorCode.rebalance_in_progress
    again = join(follower, group, second.member_id, rebalance_ms=2000)
    assert again.error_code == ErrorCode.none and again.leader == second.member_id
    assert [m.member_id for m in again.members] == [second.member_id]
    synced = sync(follower, group, again.generation_id, second.member_id,
                  {second.member_id: b"all"})
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"all")


def test_huge_member_metadata_does_not_break_the_group(broker: BrokerProcess, wire,
                                                       group: str) -> None:
    """5 MB of subscription metadata is too big for one __consumer_offsets record:
    the rebalance still completes (only the group's persistence is skipped), and
    the group and its offsets keep working."""
    create_topic(broker.bootstrap, f"{group}-t", 1)
    huge = bytes(5 * 1024 * 1024)
    connection = wire()
    joined = join_new(connection, group, metadata=huge)
    assert joined.error_code == ErrorCode.none
    assert joined.members[0].metadata == huge
    synced = sync(connection, group, 1, joined.member_id, {joined.member_id: b"x"})
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"x")
    assert commit(connection, group, 1, joined.member_id, {(f"{group}-t", 0): 3}) == {
        (f"{group}-t", 0): ErrorCode.none}
    assert fetch_offsets(connection, group)[1] == {(f"{group}-t", 0): (3, "")}


def test_static_members_fence_their_old_incarnation(wire, group: str) -> None:
    connection = wire()
    old = join(connection, group, instance_id="instance-1")
    assert old.error_code == ErrorCode.none  # static members need no MEMBER_ID_REQUIRED
    assert sync(connection, group, 1, old.member_id, {old.member_id: b"mine"},
                instance_id="instance-1").error_code == ErrorCode.none
    restarted = join(wire(), group, instance_id="instance-1")
    assert restarted.error_code == ErrorCode.none and restarted.member_id != old.member_id
    assert restarted.generation_id == 1  # no rebalance
    assert heartbeat(connection, group, 1, old.member_id, "instance-1") == (
        ErrorCode.fenced_instance_id)
    assert sync(connection, group, 1, restarted.member_id, instance_id="instance-1"
                ).assignment == b"mine"
    # Admin removal by instance id alone (LeaveGroup v3+).
    s = _schema(ApiKey.LEAVE_GROUP, LEAVE_VERSION)
    left = connection.request(ApiKey.LEAVE_GROUP, LEAVE_VERSION, s.LeaveGroupRequest(
        group_id=group, members=(s.MemberIdentity(member_id="", group_instance_id="instance-1"),
                                 s.MemberIdentity(member_id="", group_instance_id="unknown"))))
    assert [m.error_code for m in left.members] == [ErrorCode.none, ErrorCode.unknown_member_id]
    assert describe(connection, group).group_state == "Empty"


# ------------------------------------------------------------------- offsets
def test_commit_validation(broker: BrokerProcess, wire, group: str) -> None:
    topic = f"{group}-t"
    create_topic(broker.bootstrap, topic, 2)
    connection = wire()
    # A generation for a group that does not exist is from a past life.
    assert commit(connection, group, 3, "ghost", {(topic, 0): 1}) == {
        (topic, 0): ErrorCode.illegal_generation}
    joined = join_new(connection, group)
    member = joined.member_id
    # Between JoinGroup and SyncGroup, the assignment is not known yet.
    assert commit(connection, group, 1, member, {(topic, 0): 1}) == {
        (topic, 0): ErrorCode.rebalance_in_progress}
    sync(connection, group, 1, member, {member: b""})
    assert commit(connection, group, 1, "ghost", {(topic, 0): 1}) == {
        (topic, 0): ErrorCode.unknown_member_id}
    assert commit(connection, group, 0, member, {(topic, 0): 1}) == {
        (topic, 0): ErrorCode.illegal_generation}
    assert commit(connection, group, -1, "", {(topic, 0): 1}) == {
        (topic, 0): ErrorCode.unknown_member_id}
    answer = commit(connection, group, 1, member, {(topic, 0): 5, (topic, 9): 1, ("nope", 0): 1})
    assert answer == {(topic, 0): ErrorCode.none, (topic, 9): ErrorCode.unknown_topic_or_partition,
                      ("nope", 0): ErrorCode.unknown_topic_or_partition}
    too_long = commit(connection, group, 1, member, {(topic, 1): 1}, metadata="x" * 5000)
    assert too_long == {(topic, 1): ErrorCode.offset_metadata_too_large}
    assert commit(connection, group, 1, member, {(topic, 1): 8}, metadata="m" * 4096) == {
        (topic, 1): ErrorCode.none}
    error, offsets = fetch_offsets(connection, group, [(topic, 0), (topic, 1), ("nope", 0)])
    assert error == ErrorCode.none
    assert offsets == {(topic, 0): (5, ""), (topic, 1): (8, "m" * 4096), ("nope", 0): (-1, "")}


def test_offset_fetch_every_version_and_all_partitions(broker: BrokerProcess, wire,
                                                       group: str) -> None:
    topic = f"{group}-t"
    create_topic(broker.bootstrap, topic, 2)
    connection = wire()
    assert commit(connection, group, -1, "", {(topic, 0): 4, (topic, 1): 6}, metadata="md") == {
        (topic, 0): ErrorCode.none, (topic, 1): ErrorCode.none}
    for version in range(1, 9):
        s = _schema(ApiKey.OFFSET_FETCH, version)
        if version >= 8:
            request = s.OffsetFetchRequest(require_stable=False, groups=(s.OffsetFetchRequestGroup(
                group_id=group, topics=(s.OffsetFetchRequestTopics(
                    name=topic, partition_indexes=(0, 1)),)),))
        else:
            request = build(s.OffsetFetchRequest, group_id=group, require_stable=False, topics=(
                s.OffsetFetchRequestTopic(name=topic, partition_indexes=(0, 1)),))
        answer = connection.request(ApiKey.OFFSET_FETCH, version, request)
        topics = answer.groups[0].topics if version >= 8 else answer.topics
        assert [(p.partition_index, p.committed_offset, p.metadata)
                for p in topics[0].partitions] == [(0, 4, "md"), (1, 6, "md")], version
    assert fetch_offsets(connection, group) == (
        ErrorCode.none, {(topic, 0): (4, "md"), (topic, 1): (6, "md")})


def test_offset_delete_and_delete_groups(broker: BrokerProcess, wire, topic_name: str,
                                         group: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    create_topic(broker.bootstrap, f"{topic_name}-other", 1)
    connection = wire()
    produce(broker.bootstrap, topic_name, 3, 1)
    member = PollingConsumer(broker.bootstrap, group, [topic_name], commit_each=True)
    try:
        wait_until(lambda: len(member.committed_values) == 3, what="three commits")
        assert commit(connection, group, -1, "", {(f"{topic_name}-other", 0): 1}) == {
            (f"{topic_name}-other", 0): ErrorCode.unknown_member_id}
        s = _schema(ApiKey.OFFSET_DELETE, 0)
        request = s.OffsetDeleteRequest(group_id=group, topics=(s.OffsetDeleteRequestTopic(
            name=topic_name, partitions=(s.OffsetDeleteRequestPartition(partition_index=0),)),))
        answer = connection.request(ApiKey.OFFSET_DELETE, 0, request)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.group_subscribed_to_topic
        s42 = _schema(ApiKey.DELETE_GROUPS, 2)
        answer = connection.request(ApiKey.DELETE_GROUPS, 2, s42.DeleteGroupsRequest(
            groups_names=(group, f"{group}-unknown")))
        assert [r.error_code for r in answer.results] == [ErrorCode.non_empty_group,
                                                          ErrorCode.group_id_not_found]
    finally:
        member.close()
    # The group is empty now: its offsets may go, then the group itself.
    answer = connection.request(ApiKey.OFFSET_DELETE, 0, request)
    assert (answer.error_code, answer.topics[0].partitions[0].error_code) == (
        ErrorCode.none, ErrorCode.none)
    assert fetch_offsets(connection, group, [(topic_name, 0)])[1] == {(topic_name, 0): (-1, "")}
    answer = connection.request(ApiKey.DELETE_GROUPS, 2, s42.DeleteGroupsRequest(
        groups_names=(group,)))
    assert [r.error_code for r in answer.results] == [ErrorCode.none]
    assert describe(connection, group).group_state == "Dead"
    assert describe(connection, group, version=6).error_code == ErrorCode.group_id_not_found
    unknown = s.OffsetDeleteRequest(group_id=group, topics=())
    assert connection.request(ApiKey.OFFSET_DELETE, 0, unknown).error_code == (
        ErrorCode.group_id_not_found)


# --------------------------------------------------------------------- admin
def test_find_coordinator_every_version(broker: BrokerProcess, wire, group: str) -> None:
    connection = wire()
    host, port = broker.bootstrap.split(":")
    for version in range(0, 5):
        s = _schema(ApiKey.FIND_COORDINATOR, version)
        if version >= 4:
            answer = connection.request(ApiKey.FIND_COORDINATOR, version, s.FindCoordinatorRequest(
                key_type=0, coordinator_keys=(group, "another")))
            found = [(c.key, c.error_code, c.node_id, c.host, c.port) for c in answer.coordinators]
            assert found == [(group, ErrorCode.none, 1, host, int(port)),
                             ("another", ErrorCode.none, 1, host, int(port))]
        else:
            answer = connection.request(ApiKey.FIND_COORDINATOR, version, build(
                s.FindCoordinatorRequest, key=group, key_type=0))
            assert (answer.error_code, answer.node_id, answer.host, answer.port) == (
                ErrorCode.none, 1, host, int(port))


def test_list_groups_with_state_and_type_filters(wire, group: str) -> None:
    connection = wire()
    joined = join_new(connection, group)
    sync(connection, group, 1, joined.member_id, {joined.member_id: b""})

    def listed(version: int, **filters: tuple[str, ...]) -> dict[str, tuple[str, str]]:
        s = _schema(ApiKey.LIST_GROUPS, version)
        answer = connection.request(ApiKey.LIST_GROUPS, version, build(
            s.ListGroupsRequest, **{"states_filter": (), "types_filter": (), **filters}))
        assert answer.error_code == ErrorCode.none
        return {g.group_id: (g.protocol_type, getattr(g, "group_state", "")) for g in answer.groups}
    assert listed(0)[group] == ("consumer", "")
    assert listed(4)[group] == ("consumer", "Stable")
    assert group in listed(4, states_filter=("stable",))
    assert group not in listed(4, states_filter=("Empty",))
    assert group in listed(5, types_filter=("classic",))
    assert group not in listed(5, types_filter=("consumer",))


# ------------------------------------------------------------ broker configs
def test_initial_rebalance_delay_gathers_members_into_one_generation(
        fresh_broker: BrokerProcess, group: str) -> None:
    fresh_broker.overrides["group.initial.rebalance.delay.ms"] = "1500"
    fresh_broker.start()
    first, second = (WireConnection(fresh_broker.bootstrap, timeout=30) for _ in range(2))
    try:
        ids = [join(c, group).member_id for c in (first, second)]
        for connection, member_id in zip((first, second), ids, strict=True):
            connection.send(ApiKey.JOIN_GROUP, JOIN_VERSION, join_request(group, member_id))
        answers = [c.receive(ApiKey.JOIN_GROUP, JOIN_VERSION) for c in (first, second)]
        assert [a.generation_id for a in answers] == [1, 1]
        assert sum(len(a.members) for a in answers) == 2
    finally:
        first.close()
        second.close()


def test_offsets_with_their_own_retention_expire(fresh_broker: BrokerProcess,
                                                 group: str) -> None:
    """OffsetCommit v2-4 may set a retention per commit; the expiry check removes
    those offsets, keeps the others, and survives a restart."""
    fresh_broker.overrides["offsets.retention.check.interval.ms"] = "200"
    fresh_broker.start()
    topic = f"{group}-t"
    create_topic(fresh_broker.bootstrap, topic, 2)
    with WireConnection(fresh_broker.bootstrap) as connection:
        assert commit(connection, group, -1, "", {(topic, 0): 5}, version=2,
                      retention_ms=300) == {(topic, 0): ErrorCode.none}
        assert commit(connection, group, -1, "", {(topic, 1): 7}) == {(topic, 1): ErrorCode.none}
        # One fetch per look: the offset may expire between two.
        wait_until(lambda: fetch_offsets(connection, group)[1].get((topic, 0), (-1, ""))[0] == -1,
                   timeout=10, what="the short-lived offset to expire")
        assert fetch_offsets(connection, group)[1] == {(topic, 1): (7, "")}
    fresh_broker.restart()
    with WireConnection(fresh_broker.bootstrap) as connection:
        wait_until(lambda: fetch_offsets(connection, group)[0] == ErrorCode.none,
                   what="the coordinator to load")
        assert fetch_offsets(connection, group)[1] == {(topic, 1): (7, "")}


def test_commit_too_large_for_one_record_batch_is_refused(fresh_broker: BrokerProcess,
                                                          group: str) -> None:
    """Each commit is one record batch of __consumer_offsets: past max.message.bytes it
    is refused as a whole (INVALID_COMMIT_OFFSET_SIZE), and metadata longer than the
    record format's int16 strings is refused whatever offset.metadata.max.bytes says."""
    fresh_broker.overrides["offset.metadata.max.bytes"] = str(4 * 1024 * 1024)
    fresh_broker.start()
    topic = f"{group}-t"
    create_topic(fresh_broker.bootstrap, topic, 40)
    with WireConnection(fresh_broker.bootstrap) as connection:
        big = {(topic, p): 1 for p in range(40)}
        assert commit(connection, group, -1, "", big, metadata="x" * 32767) == dict.fromkeys(
            big, ErrorCode.invalid_commit_offset_size)
        assert commit(connection, group, -1, "", {(topic, 0): 1}, metadata="x" * 32768) == {
            (topic, 0): ErrorCode.offset_metadata_too_large}
        assert commit(connection, group, -1, "", {(topic, 0): 2}, metadata="small") == {
            (topic, 0): ErrorCode.none}
        assert fetch_offsets(connection, group)[1] == {(topic, 0): (2, "small")}


def test_ids_longer_than_the_record_format_allows(wire, group: str) -> None:
    """Flexible JoinGroup versions carry strings longer than __consumer_offsets records
    can hold: such a group id is refused, such an instance id only goes unpersisted."""
    connection = wire()
    assert join(connection, "g" * 40000, version=9).error_code == ErrorCode.invalid_group_id
    instance = "i" * 40000
    joined = join(connection, group, instance_id=instance, version=9)
    assert joined.error_code == ErrorCode.none
    s = _schema(ApiKey.SYNC_GROUP, 5)
    synced = connection.request(ApiKey.SYNC_GROUP, 5, s.SyncGroupRequest(
        group_id=group, generation_id=1, member_id=joined.member_id, group_instance_id=instance,
        protocol_type="consumer", protocol_name="range", assignments=(
            s.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"a"),)))
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"a")
