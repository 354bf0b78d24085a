"""Consumer groups with confluent-kafka (librdkafka): sharing, rebalancing, commits.

Each test runs real group members against the session broker (initial rebalance
delay 0) with a 6 s session timeout and fast heartbeats, so every scenario that
waits for the coordinator takes seconds.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from group_clients import (
    TIMEOUT,
    ConsumerProcess,
    PollingConsumer,
    assert_no_errors,
    committed_offsets,
    create_topic,
    group_consumer,
    produce,
    wait_for_assignments,
    wait_until,
)

from gregor.broker.process import BrokerProcess


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def _close_all(consumers: list[PollingConsumer]) -> None:
    for consumer in consumers:
        consumer.close()


def test_three_consumers_share_six_partitions_and_a_fourth_redistributes(
        broker: BrokerProcess, topic_name: str, group: str) -> None:
    create_topic(broker.bootstrap, topic_name, 6)
    consumers = [PollingConsumer(broker.bootstrap, group, [topic_name]) for _ in range(3)]
    try:
        wait_for_assignments(consumers, 6, [2, 2, 2])
        consumers.append(PollingConsumer(broker.bootstrap, group, [topic_name]))
        wait_for_assignments(consumers, 6, [2, 2, 1, 1])
        assert_no_errors(consumers)
    finally:
        _close_all(consumers)


def test_subscribe_by_regex(broker: BrokerProcess, topic_name: str, group: str) -> None:
    create_topic(broker.bootstrap, f"{topic_name}-a", 2)
    create_topic(broker.bootstrap, f"{topic_name}-b", 1)
    create_topic(broker.bootstrap, f"other-{topic_name}", 1)
    consumer = PollingConsumer(broker.bootstrap, group, [f"^{topic_name}-.*"])
    try:
        wait_until(lambda: consumer.assignment == {
            (f"{topic_name}-a", 0), (f"{topic_name}-a", 1), (f"{topic_name}-b", 0)},
            what="the regex's three partitions")
        assert_no_errors([consumer])
    finally:
        consumer.close()


def test_clean_leave_rebalances_at_once(broker: BrokerProcess, topic_name: str,
                                        group: str) -> None:
    # A session far longer than the wait below: only LeaveGroup can explain the move.
    slow_session = {"session.timeout.ms": 60000}
    create_topic(broker.bootstrap, topic_name, 4)
    stays = PollingConsumer(broker.bootstrap, group, [topic_name], **slow_session)
    leaves = PollingConsumer(broker.bootstrap, group, [topic_name], **slow_session)
    try:
        wait_for_assignments([stays, leaves], 4, [2, 2])
        leaves.close()
        wait_until(lambda: stays.partitions() == {0, 1, 2, 3}, timeout=15,
                   what="the remaining member to take every partition")
        assert_no_errors([stays, leaves])
    finally:
        stays.close()


def test_killed_member_loses_its_partitions_after_session_timeout(
        broker: BrokerProcess, topic_name: str, group: str) -> None:
    create_topic(broker.bootstrap, topic_name, 4)
    survivor = PollingConsumer(broker.bootstrap, group, [topic_name])
    victim = ConsumerProcess(broker.bootstrap, group, topic_name)
    try:
        wait_until(lambda: len(victim.assignment) == 2 and len(survivor.partitions()) == 2,
                   what="two members with two partitions each")
        victim.kill()
        killed_at = time.monotonic()
        wait_until(lambda: survivor.partitions() == {0, 1, 2, 3}, timeout=25,
                   what="the survivor to take the killed member's partitions")
        # No LeaveGroup was sent: the move must come from the 6 s session expiring.
        assert time.monotonic() - killed_at > 3
        assert_no_errors([survivor])
    finally:
        victim.terminate()
        survivor.close()


def test_member_that_stops_polling_loses_its_partitions(broker: BrokerProcess, topic_name: str,
                                                        group: str) -> None:
    """A member stuck longer than max.poll.interval.ms leaves the group, although its
    client keeps heartbeating, and the others take over its partitions."""
    create_topic(broker.bootstrap, topic_name, 4)
    config = {"max.poll.interval.ms": 6000}
    healthy = PollingConsumer(broker.bootstrap, group, [topic_name], **config)
    stuck = PollingConsumer(broker.bootstrap, group, [topic_name], **config)
    try:
        wait_for_assignments([healthy, stuck], 4, [2, 2])
        stuck.stall()
        wait_until(lambda: healthy.partitions() == {0, 1, 2, 3}, timeout=20,
                   what="the healthy member to take every partition")
        assert_no_errors([healthy, stuck])
    finally:
        healthy.close()
        stuck.close()


def test_static_member_restarting_within_session_keeps_partitions_without_rebalance(
        broker: BrokerProcess, topic_name: str, group: str) -> None:
    create_topic(broker.bootstrap, topic_name, 4)
    static = {"session.timeout.ms": 30000}
    other = PollingConsumer(broker.bootstrap, group, [topic_name],
                            **{"group.instance.id": "other", **static})
    first = PollingConsumer(broker.bootstrap, group, [topic_name],
                            **{"group.instance.id": "restarts", **static})
    restarted = None
    try:
        wait_for_assignments([other, first], 4, [2, 2])
        kept, others = first.partitions(), other.partitions()
        other.fresh_stats()
        rebalances = (other.assign_calls, other.revoke_calls, other.rebalances())
        first.close()  # a static member does not send LeaveGroup
        restarted = PollingConsumer(broker.bootstrap, group, [topic_name],
                                    **{"group.instance.id": "restarts", **static})
        wait_until(lambda: restarted.partitions() == kept, what="the same partitions back")
        # A rebalance started by the rejoin reaches the other member as the answer to
        # its next heartbeat; it sends one only once the previous one was answered, so
        # by its second heartbeat from now it has heard of any rebalance.
        other.fresh_stats()
        heartbeats = other.requests_sent("Heartbeat")
        wait_until(lambda: other.requests_sent("Heartbeat") >= heartbeats + 2,
                   what="two more heartbeats of the other member")
        assert other.partitions() == others
        assert (other.assign_calls, other.revoke_calls, other.rebalances()) == rebalances
        assert_no_errors([other, restarted])
    finally:
        _close_all([c for c in (other, restarted) if c is not None])


def _member_ids(broker: BrokerProcess, group: str, consumers: list[PollingConsumer]
                ) -> list[str]:
    """Each consumer's member id, as DescribeGroups names the members of the stable group
    (by client.id). Not Consumer.memberid(): called while the member's thread polls, it
    deadlocks in librdkafka."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    by_client: dict[str, str] = {}

    def described() -> bool:
        group_ = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        by_client.clear()
        by_client.update((m.client_id, m.member_id) for m in group_.members)
        return (group_.state == ConsumerGroupState.STABLE
                and sorted(by_client) == sorted(c.client_id for c in consumers))
    wait_until(described, what=f"group {group} stable with {len(consumers)} members")
    return [by_client[c.client_id] for c in consumers]


def _expected_layout(strategy: str, topics: list[str], member_ids: list[str]
                     ) -> list[set[tuple[str, int]]]:
    """What each of two members (sorted by member id, as both assignors sort them)
    holds of two three-partition topics under an eager assignor: range splits each
    topic on its own (4 + 2), roundrobin deals every partition in turn (3 + 3)."""
    first, second = sorted(member_ids)
    partitions = [(topic, p) for topic in sorted(topics) for p in range(3)]
    if strategy == "range":
        layout = {first: {tp for tp in partitions if tp[1] < 2},
                  second: {tp for tp in partitions if tp[1] == 2}}
    else:
        layout = {first: set(partitions[0::2]), second: set(partitions[1::2])}
    return [layout[member_id] for member_id in member_ids]


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_assignors_are_passed_through(broker: BrokerProcess, topic_name: str, group: str,
                                      strategy: str) -> None:
    """The broker selects the members' protocol and relays the leader's assignment
    untouched: DescribeGroups names the strategy, and the partitions land where that
    assignor puts them. Under cooperative-sticky the first member gives up only what
    moves to the newcomer, never the partitions it keeps."""
    topics = [f"{topic_name}-a", f"{topic_name}-b"]
    for topic in topics:
        create_topic(broker.bootstrap, topic, 3)
    config = {"partition.assignment.strategy": strategy}
    first = PollingConsumer(broker.bootstrap, group, topics, **config, **{"client.id": "first"})
    consumers = [first]
    try:
        wait_until(lambda: len(first.assignment) == 6, what="all six partitions to the first")
        second = PollingConsumer(broker.bootstrap, group, topics, **config,
                                 **{"client.id": "second"})
        consumers.append(second)
        if strategy == "cooperative-sticky":
            wait_until(lambda: len(first.assignment) == len(second.assignment) == 3,
                       what="three partitions each")
            assert first.revoked == [second.assignment]
        else:
            expected = _expected_layout(strategy, topics, _member_ids(broker, group, consumers))
            wait_until(lambda: [set(c.assignment) for c in consumers] == expected,
                       what=f"the {strategy} layout {expected}")
            assert first.revoked[-1] == {(t, p) for t in topics for p in range(3)}
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        described = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        assert described.partition_assignor == strategy
        assert_no_errors(consumers)
    finally:
        _close_all(consumers)


def test_two_groups_each_receive_every_record(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 3)
    produce(broker.bootstrap, topic_name, 300, 3)
    groups = [[PollingConsumer(broker.bootstrap, name, [topic_name]) for _ in range(2)]
              for name in (f"a-{topic_name}", f"b-{topic_name}")]
    try:
        for members in groups:
            wait_until(lambda members=members: sum(len(m.received()) for m in members) >= 300,
                       what="a group to receive all 300 records")
        for name, members in zip((f"a-{topic_name}", f"b-{topic_name}"), groups, strict=True):
            # Auto-commit commits what poll() returned: once every partition is committed
            # to its end, no member will be handed a record again.
            wait_until(lambda name=name: committed_offsets(
                broker.bootstrap, name, topic_name, 3) == [100] * 3,
                what=f"group {name} to commit every partition to its end")
            values = [v for m in members for v in m.received()]
            # Within a group each record went to exactly one member.
            assert sorted(values) == sorted(b"%d" % n for n in range(300))
            assert_no_errors(members)
    finally:
        _close_all([m for members in groups for m in members])


def test_no_record_skipped_through_rebalances_and_a_kill(broker: BrokerProcess,
                                                         topic_name: str, group: str) -> None:
    """Members commit after processing each record while members join, leave and one
    is killed mid-stream. Every record is seen, and none whose commit succeeded twice."""
    create_topic(broker.bootstrap, topic_name, 4)
    total = 4000
    produce(broker.bootstrap, topic_name, total // 2, 4)
    members = [PollingConsumer(broker.bootstrap, group, [topic_name], commit_each=True)]
    victim = ConsumerProcess(broker.bootstrap, group, topic_name)
    try:
        wait_until(lambda: bool(victim.assignment), what="the victim to get partitions")
        members.append(PollingConsumer(broker.bootstrap, group, [topic_name], commit_each=True))
        produce(broker.bootstrap, topic_name, total // 2, 4, start=total // 2)
        victim.kill()
        members[0].close()
        members.append(PollingConsumer(broker.bootstrap, group, [topic_name], commit_each=True))
        produce(broker.bootstrap, topic_name, 1000, 4, start=total)
        total += 1000

        def seen() -> list[bytes]:
            return [v for m in members for v in m.received()]
        wait_until(lambda: len(set(seen())) >= total, timeout=60, what="every record")
        # Once the group's commits reach the end of every partition, no member will be
        # handed a record again: only then are the deliveries final.
        wait_until(lambda: sum(committed_offsets(broker.bootstrap, group, topic_name, 4))
                   == total, timeout=60, what="commits up to the end of every partition")
        assert set(seen()) == {b"%d" % n for n in range(total)}
        deliveries = Counter(seen())
        committed = set().union(*(m.committed_values for m in members))
        assert not {v for v in committed if deliveries[v] > 1}
        # Each delivery was followed by one commit, and only a rebalance may refuse it:
        # a few records each time, not most of them.
        assert_no_errors(members)
        failed = sum(len(m.commit_failures) for m in members)
        assert failed < total // 10, f"{failed} of {len(seen())} commits refused"
    finally:
        victim.terminate()
        _close_all(members[1:])


def test_commit_metadata_round_trips_and_survives_a_new_member(
        broker: BrokerProcess, topic_name: str, group: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    produce(broker.bootstrap, topic_name, 20, 2)
    consumer = group_consumer(broker.bootstrap, group, **{"enable.auto.commit": False})
    consumer.subscribe([topic_name])
    try:
        wait_until(lambda: _collect(consumer, set()) >= 0 and bool(consumer.assignment()),
                   what="an assignment")
        committed = [TopicPartition(topic_name, 0, 7, metadata="checkpoint-7"),
                     TopicPartition(topic_name, 1, 3, metadata="")]
        consumer.commit(offsets=committed, asynchronous=False)
        back = consumer.committed([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)],
                                  timeout=TIMEOUT)
        assert [(tp.partition, tp.offset, tp.metadata) for tp in back] == [
            (0, 7, "checkpoint-7"), (1, 3, "")]
    finally:
        consumer.close()
    # A new member of the group starts where the group left off.
    follower = group_consumer(broker.bootstrap, group)
    follower.subscribe([topic_name])
    try:
        values: set[bytes] = set()
        wait_until(lambda: _collect(follower, values) >= (10 - 7) + (10 - 3), what="the rest")
        # Partition 0 holds even numbers, partition 1 odd ones (round robin).
        assert values == ({b"%d" % n for n in range(14, 20, 2)}
                          | {b"%d" % n for n in range(7, 20, 2)})
    finally:
        follower.close()


def _collect(consumer: Consumer, into: set[bytes]) -> int:
    message = consumer.poll(0.1)
    if message is not None and message.error() is None:
        into.add(message.value())
    return len(into)


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_auto_offset_reset_applies_without_a_committed_offset(
        broker: BrokerProcess, topic_name: str, group: str, reset: str) -> None:
    """Ten records exist before the group does. earliest: the member reads them all, in
    order. latest: it starts fetching at 10 (the log end), so of ten more records
    produced once it is there it gets exactly those."""
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, 10, 1)
    member = PollingConsumer(broker.bootstrap, group, [topic_name],
                             **{"auto.offset.reset": reset})
    try:
        if reset == "earliest":
            wait_until(lambda: len(member.received()) >= 10, what="ten records")
            assert member.received() == [b"%d" % n for n in range(10)]
        else:
            wait_until(lambda: member.fetch_position(topic_name, 0) >= 0,
                       what="the member to resolve its starting offset")
            assert member.fetch_position(topic_name, 0) == 10
            produce(broker.bootstrap, topic_name, 10, 1, start=10)
            wait_until(lambda: len(member.received()) >= 10, what="ten records")
            assert member.received() == [b"%d" % n for n in range(10, 20)]
        assert_no_errors([member])
    finally:
        member.close()


def test_auto_commit_stores_the_position(broker: BrokerProcess, topic_name: str,
                                         group: str) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, 10, 1)
    consumer = group_consumer(broker.bootstrap, group, **{"auto.commit.interval.ms": 200})
    consumer.subscribe([topic_name])
    try:
        values: set[bytes] = set()
        wait_until(lambda: _collect(consumer, values) >= 10, what="ten records")

        def committed() -> int:
            return consumer.committed([TopicPartition(topic_name, 0)], timeout=TIMEOUT)[0].offset
        wait_until(lambda: committed() == 10, what="the auto-commit of offset 10")
    finally:
        consumer.close()


def test_unknown_group_member_commit_is_refused(broker: BrokerProcess, topic_name: str,
                                                group: str) -> None:
    """A consumer using assign() may commit to an empty group, not to one with members."""
    create_topic(broker.bootstrap, topic_name, 1)
    # Offset 5 must exist: a consumer fetching from an offset out of range resets it, and
    # closed meanwhile, librdkafka 2.16 can deadlock in that reset (the broker thread
    # takes the partition's lock it already holds; close() then waits forever).
    produce(broker.bootstrap, topic_name, 10, 1)
    member = PollingConsumer(broker.bootstrap, group, [topic_name])
    standalone = group_consumer(broker.bootstrap, group)
    try:
        wait_for_assignments([member], 1)
        standalone.assign([TopicPartition(topic_name, 0)])
        with pytest.raises(Exception) as failure:
            standalone.commit(offsets=[TopicPartition(topic_name, 0, 5)], asynchronous=False)
        assert failure.value.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID
    finally:
        member.close()
        standalone.close()
    # Once the group is empty, the same commit is accepted.
    standalone = group_consumer(broker.bootstrap, group)
    try:
        standalone.assign([TopicPartition(topic_name, 0)])
        standalone.commit(offsets=[TopicPartition(topic_name, 0, 5)], asynchronous=False)
        assert standalone.committed([TopicPartition(topic_name, 0)],
                                    timeout=TIMEOUT)[0].offset == 5
    finally:
        standalone.close()
