"""The controller and metadata caches against a real ZooKeeper, with brokers in-process.

Each ``ZkClusterMember`` is what a broker runs for its cluster membership (session,
registration, metadata cache, controller) without the broker's network server and
logs, so election, failover and fencing are tested quickly and deterministically:
closing a member's session is what ZooKeeper sees when a broker dies.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from gregor.cluster import znodes
from gregor.cluster.controller import ControllerError
from gregor.cluster.partition_state import NO_LEADER, PartitionState
from gregor.cluster.zk_cluster import ZkClusterMember
from gregor.cluster.zookeeper import ZooKeeperSession
from gregor.config import BrokerConfig
from gregor.protocol.errors import ErrorCode

# Generous: the whole suite runs three workers on two cores beside Spark's JVMs, and a
# wait that passes takes milliseconds anyway.
WAIT_S = 20.0


@pytest.fixture(autouse=True)
def _cluster_decisions_in_failures(caplog: pytest.LogCaptureFixture) -> None:
    """Keep the members' INFO lines (the controller's elections and writes, the caches'
    applied changes), which pytest prints only for a test that fails: a failure seen
    once in CI is then explained by its own log."""
    caplog.set_level(logging.INFO, logger="gregor.cluster")


class Members:
    def __init__(self, connect: str) -> None:
        self.connect = connect
        self.members: dict[int, ZkClusterMember] = {}

    async def start(self, broker_id: int, **overrides: str) -> ZkClusterMember:
        config = BrokerConfig.from_mapping({
            "broker.id": str(broker_id), "zookeeper.connect": self.connect,
            "zookeeper.session.timeout.ms": "2000", **overrides})
        member = ZkClusterMember(config)
        await member.connect()
        member.follow(lambda topic, index, state: None, lambda topic: None, lambda topic: None,
                      lambda image: None, lambda: None)
        await member.register(
            (znodes.Endpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9000 + broker_id),))
        self.members[broker_id] = member
        return member

    async def kill(self, broker_id: int) -> None:
        """End the member's session at once, as ZooKeeper sees a dead broker's."""
        await self.members.pop(broker_id).close()

    async def start_all(self, *broker_ids: int) -> None:
        """Start members and wait until each sees all of them and the controller."""
        for broker_id in broker_ids:
            await self.start(broker_id)
        await eventually(lambda: all(
            set(m.image.brokers) == set(self.members) and m.image.controller_id >= 0
            for m in self.members.values()), "every member to see the cluster")

    def controller(self) -> ZkClusterMember:
        active = [m for m in self.members.values() if m.controller.is_active]
        assert len(active) == 1, f"{len(active)} active controllers"
        return active[0]

    def any(self) -> ZkClusterMember:
        return next(iter(self.members.values()))


async def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def states(member: ZkClusterMember, topic: str) -> list[PartitionState]:
    return member.image.topics[topic].partitions


@pytest.fixture
def cluster(zookeeper) -> Members:
    """Members in a ZooKeeper chroot of their own (a fresh cluster per test)."""
    return Members(f"{zookeeper.connect}/controller-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def run(cluster: Members) -> Callable[[Coroutine[Any, Any, None]], None]:
    """Run a test's scenario on an event loop, ending every member's session after."""
    async def with_cleanup(scenario: Coroutine[Any, Any, None]) -> None:
        try:
            await scenario
        finally:
            for broker_id in list(cluster.members):
                await cluster.kill(broker_id)

    return lambda scenario: asyncio.run(with_cleanup(scenario))


def test_one_controller_and_leaders_from_the_assignment(cluster: Members, run) -> None:
    async def scenario() -> None:
        await cluster.start_all(1, 2, 3)
        controller = cluster.controller()
        assert {m.image.controller_id for m in cluster.members.values()} == {
            controller.broker_id}
        created = await cluster.members[2].admin.create_topic("orders", 6, 3)
        assert all(p.leader == p.replicas[0] and p.isr == p.replicas and p.leader_epoch == 0
                   for p in created.partitions)
        assert sorted(p.leader for p in created.partitions) == [1, 1, 2, 2, 3, 3]
        # Every broker's cache shows the same states.
        await eventually(lambda: all(states(m, "orders") == created.partitions
                                     for m in cluster.members.values()), "caches to agree")

    run(scenario())


def test_partitions_added_where_the_client_assigns_them(cluster: Members, run) -> None:
    async def scenario() -> None:
        await cluster.start_all(1, 2, 3)
        admin = cluster.members[2].admin
        await admin.create_topic("orders", 1, 2, assignment=[(1, 2)])
        with pytest.raises(ControllerError) as refused:
            await admin.create_partitions("orders", 3, [(2, 3)])  # one list for two
        assert refused.value.error == ErrorCode.invalid_replica_assignment
        with pytest.raises(ControllerError) as refused:
            await admin.create_partitions("orders", 2, [(3,)])  # the topic has two replicas
        assert refused.value.error == ErrorCode.invalid_replica_assignment
        await admin.create_partitions("orders", 3, [(3, 1), (2, 3)])
        await eventually(lambda: all(
            [(p.replicas, p.leader) for p in states(m, "orders")] == [
                ((1, 2), 1), ((3, 1), 3), ((2, 3), 2)]
            for m in cluster.members.values()), "every cache to see the new partitions")

    run(scenario())


def test_leader_death_elects_from_the_isr_and_shrinks_it(cluster: Members, run) -> None:
    async def scenario() -> None:
        await cluster.start_all(1, 2, 3)
        victim = next(b for b in (1, 2, 3) if b != cluster.controller().broker_id)
        before = (await cluster.any().admin.create_topic("t", 3, 3)).partitions
        await cluster.kill(victim)
        survivor = cluster.any()

        def moved() -> bool:
            return all(victim not in p.isr and p.leader != victim
                       for p in states(survivor, "t"))
        await eventually(moved, "leaders and ISR to leave the dead broker")
        for old, new in zip(before, states(survivor, "t"), strict=True):
            if old.leader == victim:
                # The next replica of the assignment that was in sync, one epoch later.
                assert new.leader == next(r for r in old.replicas if r != victim)
                assert new.leader_epoch == old.leader_epoch + 1
            else:
                assert (new.leader, new.leader_epoch) == (old.leader, old.leader_epoch)
            assert new.isr == tuple(r for r in old.isr if r != victim)

    run(scenario())


def test_controller_death_hands_over_with_a_new_epoch(cluster: Members, run) -> None:
    async def scenario() -> None:
        await cluster.start_all(1, 2, 3)
        first = cluster.controller()
        epoch = first.controller.epoch
        await cluster.any().admin.create_topic("t", 3, 3)
        await cluster.kill(first.broker_id)
        await eventually(lambda: any(m.controller.is_active for m in cluster.members.values()),
                         "a new controller")
        second = cluster.controller()
        assert second.controller.epoch == epoch + 1
        await eventually(lambda: all(p.leader != first.broker_id and p.leader != NO_LEADER
                                     for p in states(second, "t")),
                         "the old controller's leaderships to move")

    run(scenario())


def test_a_deposed_controller_cannot_write(cluster: Members, run) -> None:
    async def scenario() -> None:
        member = await cluster.start(1)
        await eventually(lambda: member.controller.is_active, "a controller")
        # Another controller was elected meanwhile (as after this one's session paused):
        # the epoch moved on, so the next write this one tries is refused, and it resigns.
        outsider = ZooKeeperSession(cluster.connect, 2000)
        await outsider.start()
        found = await outsider.get(znodes.CONTROLLER_EPOCH)
        assert found is not None
        await outsider.set(znodes.CONTROLLER_EPOCH, b"99", found[1].version)
        await member.admin.create_topic("t", 1, 1)  # the controller must elect its leader
        await eventually(lambda: not member.controller.is_active, "the old controller to resign")
        assert states(member, "t")[0].partition_epoch < 0  # nothing was written
        await outsider.close()

    run(scenario())


def test_a_follower_in_the_isr_stays_while_the_cache_lags(cluster: Members, run) -> None:
    """A restarted follower registers, fetches, and its leader puts it back in the ISR;
    the controller's cache may learn of the new ISR before the registration. Liveness
    is read from ZooKeeper, so the controller does not drop the follower again as dead
    (which made the ISR flap after every restart)."""
    async def scenario() -> None:
        await cluster.start_all(1, 2)
        await cluster.members[1].admin.create_topic("t", 1, 2, assignment=[(1, 2)])
        member = cluster.controller()
        await eventually(lambda: states(member, "t")[0].isr == (1, 2), "both in sync")
        follower = next(b for b in cluster.members if b != member.broker_id)
        del member.image.brokers[follower]  # the registration not yet seen
        await member.controller._reconcile(everything=True, partitions=set())
        found = await member.zk.get(znodes.partition_state_path("t", 0))
        assert found is not None
        assert znodes.decode_partition_state(found[0], (1, 2), found[1].version).isr == (1, 2)

    run(scenario())


def test_a_stale_leader_cannot_change_the_isr(cluster: Members, run) -> None:
    async def scenario() -> None:
        await cluster.start_all(1, 2)
        member = cluster.members[1]
        state = (await member.admin.create_topic("t", 1, 2,
                                                 assignment=[(1, 2)])).partitions[0]
        shrunk = await member.admin.alter_isr(("t", 0), state.with_isr((1,)))
        assert shrunk is not None and shrunk.isr == (1,)
        assert shrunk.partition_epoch == state.partition_epoch + 1
        # The same change from the older view is refused: someone wrote in between.
        assert await member.admin.alter_isr(("t", 0), state.with_isr((1,))) is None
        await eventually(lambda: states(cluster.members[2], "t")[0] == shrunk,
                         "every cache to see the written ISR")

    run(scenario())


def test_isr_changes_made_together_are_written_together(cluster: Members, run) -> None:
    """Leaders' ISR changes that come together share one multi-op and one change node,
    and one stale among them is refused alone: the others are still written."""
    async def scenario() -> None:
        await cluster.start_all(1, 2)
        member = cluster.members[1]
        created = (await member.admin.create_topic("t", 6, 2, assignment=[(1, 2)] * 6))
        before = set(await member.zk.children(znodes.STATE_CHANGES) or [])
        written = await asyncio.gather(*(member.admin.alter_isr(("t", i), state.with_isr((1,)))
                                         for i, state in enumerate(created.partitions[:3])))
        assert [s.isr for s in written if s is not None] == [(1,)] * 3
        after = set(await member.zk.children(znodes.STATE_CHANGES) or [])
        assert len(after - before) == 1, "three changes made together, one change node"
        # Partition 0 again from its older state (stale), with three current ones.
        stale_too = await asyncio.gather(
            member.admin.alter_isr(("t", 0), created.partitions[0].with_isr((2,))),
            *(member.admin.alter_isr(("t", i), state.with_isr((1,)))
              for i, state in enumerate(created.partitions[3:], start=3)))
        assert stale_too[0] is None
        assert [s.isr for s in stale_too[1:] if s is not None] == [(1,)] * 3
        for index in range(6):
            found = await member.zk.get(znodes.partition_state_path("t", index))
            assert found is not None
            assert znodes.decode_partition_state(found[0], (1, 2), found[1].version).isr == (1,)
        await eventually(lambda: all(s.isr == (1,) for s in states(cluster.members[2], "t")),
                         "every cache to see the written ISRs")

    run(scenario())


@pytest.mark.parametrize("unclean", [False, True])
def test_whole_isr_down(cluster: Members, run, unclean: bool) -> None:
    async def scenario() -> None:
        await cluster.start_all(1, 2, 3)
        controller = cluster.controller().broker_id
        leader, follower = [b for b in (1, 2, 3) if b != controller]
        configs = {"unclean.leader.election.enable": str(unclean).lower()}
        state = (await cluster.any().admin.create_topic(
            "t", configs=configs, assignment=[(leader, follower)])).partitions[0]
        # The follower fell behind and left the ISR; then the leader died.
        assert await cluster.members[leader].admin.alter_isr(
            ("t", 0), state.with_isr((leader,))) is not None
        await cluster.kill(leader)
        watcher = cluster.members[controller]
        if unclean:
            await eventually(lambda: states(watcher, "t")[0].leader == follower,
                             "the out-of-sync follower to lead")
            assert states(watcher, "t")[0].isr == (follower,)
        else:
            await eventually(lambda: states(watcher, "t")[0].leader == NO_LEADER,
                             "the partition to go offline")
            assert states(watcher, "t")[0].isr == (leader,)
            await cluster.start(leader)  # the last in-sync replica returns and leads
            await eventually(lambda: states(watcher, "t")[0].leader == leader,
                             "the returning ISR member to lead")

    run(scenario())


def test_controlled_shutdown_moves_leaderships_first(cluster: Members, run) -> None:
    async def scenario() -> None:
        await cluster.start_all(1, 2, 3)
        stopping = next(b for b in (1, 2, 3) if b != cluster.controller().broker_id)
        await cluster.any().admin.create_topic("t", 6, 3)
        await cluster.members[stopping].controlled_shutdown()
        # Still registered, yet it leads nothing and is in no ISR.
        watcher = cluster.controller()
        assert stopping in watcher.image.brokers
        assert all(p.leader != stopping and stopping not in p.isr
                   for p in states(cluster.members[stopping], "t"))

    run(scenario())


def test_producer_ids_are_unique_across_brokers(cluster: Members, run) -> None:
    async def scenario() -> None:
        await cluster.start_all(1, 2)
        ids = await asyncio.gather(*(cluster.members[b].admin.allocate_producer_id()
                                     for b in (1, 2, 1, 2) for _ in range(3)))
        assert len(set(ids)) == len(ids)

    run(scenario())
