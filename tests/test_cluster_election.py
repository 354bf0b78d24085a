"""The controller's placement and leader-election rules, without ZooKeeper or clocks."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gregor.cluster.election import (
    PREFERRED,
    UNCLEAN,
    AssignmentError,
    Election,
    assign_replicas,
    elect_for_shutdown,
    elect_offline,
    elect_on_request,
    elect_preferred,
    initial_state,
    without_replicas,
)
from gregor.cluster.partition_state import NO_LEADER, PartitionState
from gregor.protocol.errors import ErrorCode


def state(leader: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2, 3),
          epoch: int = 5) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=epoch, isr=isr, replicas=replicas)


def test_replicas_are_distinct_and_leaders_balanced() -> None:
    racks = {1: None, 2: None, 3: None}
    placement = assign_replicas(30, 3, racks, rng=random.Random(7))
    assert all(len(set(r)) == 3 for r in placement)
    assert Counter(r[0] for r in placement) == {1: 10, 2: 10, 3: 10}
    # The followers of one broker's leaderships are spread over the others.
    assert len({r[1] for r in placement if r[0] == 1}) == 2


def test_replicas_spread_over_racks_first() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    for replicas in assign_replicas(40, 2, racks, rng=random.Random(3)):
        assert {racks[r] for r in replicas} == {"a", "b"}


def test_more_replicas_than_brokers_is_refused() -> None:
    with pytest.raises(AssignmentError):
        assign_replicas(1, 4, {1: None, 2: None, 3: None})


def test_new_partition_is_led_by_its_first_live_replica() -> None:
    assert initial_state((2, 3, 1), {1, 3}, controller_epoch=4) == PartitionState(
        leader=3, leader_epoch=0, isr=(3, 1), replicas=(2, 3, 1), controller_epoch=4)


def test_leader_death_elects_the_first_live_isr_member() -> None:
    election = elect_offline(state(1, (1, 2, 3)), live={2, 3}, unclean_allowed=False,
                             controller_epoch=9)
    assert election is not None and not election.unclean
    assert (election.state.leader, election.state.leader_epoch, election.state.isr,
            election.state.controller_epoch) == (2, 6, (2, 3), 9)


def test_out_of_sync_replica_never_leads_without_unclean_election() -> None:
    # Jepsen 2013: the ISR shrank to the leader, which died; replica 2 is behind.
    election = elect_offline(state(1, (1,)), live={2, 3}, unclean_allowed=False,
                             controller_epoch=1)
    assert election is not None
    assert (election.state.leader, election.state.isr) == (NO_LEADER, (1,))
    # Offline stays offline until an ISR member returns ...
    assert elect_offline(election.state, live={2, 3}, unclean_allowed=False,
                         controller_epoch=1) is None
    back = elect_offline(election.state, live={1, 2, 3}, unclean_allowed=False,
                         controller_epoch=1)
    assert back is not None and (back.state.leader, back.state.isr) == (1, (1,))


def test_unclean_election_takes_the_first_live_replica_alone() -> None:
    election = elect_offline(state(1, (1,)), live={3, 2}, unclean_allowed=True,
                             controller_epoch=1)
    assert election is not None and election.unclean
    assert (election.state.leader, election.state.isr) == (2, (2,))


def test_live_leader_is_not_re_elected() -> None:
    assert elect_offline(state(2, (1, 2)), live={2}, unclean_allowed=True,
                         controller_epoch=1) is None


def test_preferred_replica_gets_leadership_back_only_when_in_sync() -> None:
    assert elect_preferred(state(2, (2, 3)), live={1, 2, 3}, controller_epoch=1) is None
    election = elect_preferred(state(2, (2, 3, 1)), live={1, 2, 3}, controller_epoch=1)
    assert election is not None and election.state.leader == 1


@pytest.mark.parametrize(("partition", "live", "election_type", "outcome"), [
    # Preferred: back to replica 1 when it is live and in sync, else Kafka's reasons.
    (state(2, (2, 3, 1)), {1, 2, 3}, PREFERRED, (1, (2, 3, 1))),
    (state(1, (1, 2)), {1, 2, 3}, PREFERRED, ErrorCode.election_not_needed),
    (state(2, (2, 3)), {1, 2, 3}, PREFERRED, ErrorCode.preferred_leader_not_available),
    (state(2, (2, 3, 1)), {2, 3}, PREFERRED, ErrorCode.preferred_leader_not_available),
    # Unclean: only for a partition whose leader is gone; an ISR member first, then any.
    (state(2, (2, 3)), {1, 2, 3}, UNCLEAN, ErrorCode.election_not_needed),
    (state(NO_LEADER, (1,)), {1, 3}, UNCLEAN, (1, (1,))),
    (state(NO_LEADER, (1,)), {2, 3}, UNCLEAN, (2, (2,))),
    (state(NO_LEADER, (1,)), set(), UNCLEAN, ErrorCode.eligible_leaders_not_available),
])
def test_elections_asked_for(partition: PartitionState, live: set[int], election_type: int,
                             outcome: tuple[int, tuple[int, ...]] | ErrorCode) -> None:
    decided = elect_on_request(partition, live, election_type, controller_epoch=7)
    if isinstance(outcome, ErrorCode):
        assert decided == outcome
        return
    assert isinstance(decided, Election)
    assert (decided.state.leader, decided.state.isr) == outcome
    assert (decided.state.leader_epoch, decided.state.controller_epoch) == (6, 7)


def test_controlled_shutdown_moves_leadership_and_leaves_the_isr() -> None:
    election = elect_for_shutdown(state(1, (1, 2, 3)), live={1, 2, 3}, shutting_down=1,
                                  controller_epoch=1)
    assert election is not None
    assert (election.state.leader, election.state.leader_epoch, election.state.isr) == (
        2, 6, (2, 3))
    follower = elect_for_shutdown(state(2, (1, 2, 3)), live={1, 2, 3}, shutting_down=3,
                                  controller_epoch=1)
    assert follower is not None
    assert (follower.state.leader, follower.state.leader_epoch, follower.state.isr) == (
        2, 5, (1, 2))
    # The last in-sync replica keeps leading until it is really gone.
    assert elect_for_shutdown(state(1, (1,)), live={1, 2, 3}, shutting_down=1,
                              controller_epoch=1) is None


def test_dead_followers_leave_the_isr_but_the_leader_stays() -> None:
    shrunk = without_replicas(state(1, (1, 2, 3)), gone={3}, controller_epoch=1)
    assert shrunk is not None and shrunk.isr == (1, 2) and shrunk.leader_epoch == 5
    assert without_replicas(state(1, (1,)), gone={1}, controller_epoch=1) is None
