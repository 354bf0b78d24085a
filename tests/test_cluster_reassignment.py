"""Reassignment's rules (KIP-455) without ZooKeeper: the replica set while a move runs,
when and how it ends, the topic node's layout (Kafka's), and a leader taking a new
replica set without losing an ISR change in flight."""

from __future__ import annotations

import json
from pathlib import Path

from replication_helpers import FakeClock, open_replica, state
from storage_helpers import batch

from gregor.cluster import znodes
from gregor.cluster.partition import StateChange
from gregor.cluster.partition_state import PartitionState, Reassignment
from gregor.cluster.reassignment import finished_state, invalid_target, started

TOPIC_ID = "6f1c2a4e-9c3b-4a57-8d2e-1f0b5a7c9e31"


def test_a_move_runs_on_the_target_and_original_replicas_together() -> None:
    # Kafka's order: the target's replicas first, so the final order is the target's.
    assert started((1, 2, 3), None, (4, 2, 3)) == ((4, 2, 3, 1), Reassignment((4,), (1,)))
    # Raising and lowering the replication factor.
    assert started((2,), None, (2, 3, 4)) == ((2, 3, 4), Reassignment((3, 4), ()))
    assert started((2, 3, 4), None, (3, 4)) == ((3, 4, 2), Reassignment((), (2,)))
    # A new order only: nothing to copy, done at once.
    assert started((1, 2, 3), None, (3, 1, 2)) == ((3, 1, 2), None)


def test_a_new_target_replaces_a_move_from_the_original_replicas() -> None:
    ongoing = Reassignment((4,), (1,))
    # 4 was being added to (1, 2, 3); now 5 is wanted instead: 4 is no longer added.
    assert started((4, 2, 3, 1), ongoing, (5, 2, 3)) == ((5, 2, 3, 1), Reassignment((5,), (1,)))
    # Back to the original replicas: nothing left to move.
    assert started((4, 2, 3, 1), ongoing, (1, 2, 3)) == ((1, 2, 3), None)
    assert ongoing.target((4, 2, 3, 1)) == (4, 2, 3)
    assert ongoing.original((4, 2, 3, 1)) == (2, 3, 1)


def test_invalid_targets_are_kafkas_invalid_replica_assignment() -> None:
    live = {1, 2, 3}
    assert invalid_target((1, 2), live) is None
    for target in ((), (1, 1), (-1, 2), (1, 9)):
        assert invalid_target(target, live) is not None, target


def test_the_end_of_a_move_keeps_or_moves_leadership_to_the_target() -> None:
    during = PartitionState(leader=1, leader_epoch=4, isr=(1, 2, 3, 4), replicas=(4, 2, 3, 1),
                            partition_epoch=7)
    # The leader leaves: the first target replica in sync and live leads, at a new epoch.
    done = finished_state(during, (4, 2, 3), {1, 2, 3, 4}, controller_epoch=2)
    assert done is not None
    assert (done.leader, done.leader_epoch, done.isr) == (4, 5, (2, 3, 4))
    assert finished_state(during, (4, 2, 3), {1, 2, 3}, 2).leader == 2  # type: ignore[union-attr]
    # The leader stays: the same epoch, the leaving replica out of the ISR.
    kept = finished_state(during, (1, 2, 3), {1, 2, 3, 4}, 2)
    assert kept is not None and (kept.leader, kept.leader_epoch, kept.isr) == (1, 4, (1, 2, 3))
    # Nothing to change: the state itself.
    settled = PartitionState(leader=2, leader_epoch=1, isr=(2, 3), replicas=(2, 3, 4))
    assert finished_state(settled, (2, 3), {2, 3}, 2) is settled
    # No target replica in sync: the move waits.
    assert finished_state(during, (5,), {1, 2, 3, 4, 5}, 2) is None


def test_the_topic_node_is_in_kafkas_layout() -> None:
    node = znodes.TopicAssignment(TOPIC_ID, ((4, 2, 3, 1), (1, 2)),
                                  {0: Reassignment((4,), (1,))})
    raw = json.loads(node.encode())
    assert raw["partitions"] == {"0": [4, 2, 3, 1], "1": [1, 2]}
    assert raw["adding_replicas"] == {"0": [4]}
    assert raw["removing_replicas"] == {"0": [1]}
    assert znodes.TopicAssignment.decode(node.encode()) == node
    # What Kafka writes when no partition is moving, and a cancelled move (removing only).
    plain = znodes.TopicAssignment(TOPIC_ID, ((1, 2),))
    assert json.loads(plain.encode())["adding_replicas"] == {}
    assert znodes.TopicAssignment.decode(plain.encode()).reassigning == {}
    cancelled = znodes.TopicAssignment(TOPIC_ID, ((4, 1, 2),), {0: Reassignment((), (4,))})
    assert znodes.TopicAssignment.decode(cancelled.encode()) == cancelled


def test_the_older_reassignment_node() -> None:
    data = b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3]}]}'
    assert znodes.decode_legacy_reassignment(data) == {("t", 0): (2, 3)}
    assert znodes.decode_legacy_reassignment(znodes.encode_legacy_reassignment(
        {("t", 0): (2, 3)})) == {("t", 0): (2, 3)}


def test_a_leader_takes_a_new_replica_set_at_the_same_epochs(tmp_path: Path) -> None:
    """The topic node's new replica set reaches a leader as the state it has with other
    replicas: it tracks the new follower, and an ISR change it asked for meanwhile
    still settles (and keeps the new replica set)."""
    clock = FakeClock()
    leader = open_replica(tmp_path, 1, state(1, 2, (1, 2), (1, 2), partition_epoch=3), clock)
    leader.append_as_leader(batch(3), 1)
    leader.record_follower_fetch(2, 3, 0, 3)
    proposal = leader.propose_isr_shrink() or leader.state.with_isr((1,))
    leader.pending_isr = proposal
    moved = state(1, 2, (1, 2), (1, 2, 3), partition_epoch=3)
    assert leader.update_state(moved) is StateChange.ISR
    assert set(leader.followers) == {2, 3} and leader.followers[2].log_end_offset == 3
    assert leader.pending_isr is proposal  # not dropped
    assert leader.update_state(moved) is StateChange.NONE
    leader.isr_changed(proposal, state(1, 2, (1,), (1, 2), partition_epoch=4))
    assert (leader.isr, leader.replicas) == ((1,), (1, 2, 3))
