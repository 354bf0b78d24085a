"""The leader's rules, on in-process replicas with an injected clock: the high watermark,
min.insync.replicas, when a follower is caught up, and how the ISR shrinks and grows
(Kafka's Partition and Replica)."""

from __future__ import annotations

from pathlib import Path

import pytest
from replication_helpers import LAG_S, FakeClock, catch_up, fetch, log_bytes, open_replica, state
from storage_helpers import batch

from gregor.cluster.partition import NEVER, StateChange
from gregor.protocol.errors import ErrorCode
from gregor.storage.log import LogAppendError


def test_high_watermark_is_the_smallest_log_end_over_the_isr(tmp_path: Path) -> None:
    clock = FakeClock()
    isr = (1, 2, 3)
    leader = open_replica(tmp_path, 1, state(1, 1, isr), clock)
    f2 = open_replica(tmp_path, 2, state(1, 1, isr), clock)
    f3 = open_replica(tmp_path, 3, state(1, 1, isr), clock)
    leader.append_as_leader(batch(5), required_acks=-1)
    assert leader.high_watermark == 0  # a new leader knows no follower's log end yet
    fetch(leader, f2)
    fetch(leader, f3)
    assert leader.high_watermark == 0  # both fetched from 0: that is all they had
    fetch(leader, f2)
    assert leader.high_watermark == 0  # f2 has 5, f3 still 0
    fetch(leader, f3)
    assert leader.high_watermark == 5
    fetch(leader, f2)
    assert f2.high_watermark == 5  # learnt on its next fetch
    leader.record_follower_fetch(2, 3, 0, leader.log_end_offset)  # a stale, older fetch
    assert leader.high_watermark == 5  # it never moves back


def test_a_followers_high_watermark_is_bounded_by_its_own_log(tmp_path: Path) -> None:
    follower = open_replica(tmp_path, 2, state(1, 1, (1, 2)), FakeClock())
    follower.log.append_as_follower(_stamped(tmp_path, 4, epoch=1))
    follower.follower_high_watermark(10)
    assert follower.high_watermark == 4
    follower.follower_high_watermark(2)  # a new leader's may be behind: taken as it is
    assert follower.high_watermark == 2


def test_a_follower_appends_the_whole_batches_of_an_answer_cut_inside_one(
        tmp_path: Path) -> None:
    """A leader's answer cut by its byte budget ends inside a batch when no index entry
    falls in the range (Kafka's leader sends the cut batch's head too): the follower
    appends the batches before it and fetches the rest, as Kafka's does. Refusing the
    whole answer held such a partition back a replica.fetch.backoff.ms each time: 8
    partitions of 1 MB batches behind a 4 MiB response limit never caught up."""
    leader = open_replica(tmp_path, 1, state(1, 1, (1, 2)), FakeClock())
    follower = open_replica(tmp_path, 2, state(1, 1, (1, 2)), FakeClock())
    leader.append_as_leader(batch(3), 1)
    first_end = leader.log_end_offset
    leader.append_as_leader(batch(3), 1)
    fetch(leader, follower, max_bytes=leader.log.size - 10)
    assert follower.log_end_offset == first_end
    catch_up(leader, follower)
    assert log_bytes(follower) == log_bytes(leader)


def _stamped(tmp_path: Path, count: int, epoch: int) -> bytes:
    """``count`` records as a leader at ``epoch`` stored them from offset 0."""
    source = open_replica(tmp_path / "source", 9, state(9, epoch, (9,), (9,)), FakeClock())
    source.append_as_leader(batch(count), 1)
    region = source.log.read(0, 1 << 20)
    assert region is not None
    return region.read()


def test_acks_all_is_refused_before_the_write_below_min_insync(tmp_path: Path) -> None:
    leader = open_replica(tmp_path, 1, state(1, 1, (1,)), FakeClock(), min_insync_replicas=2)
    with pytest.raises(LogAppendError) as refused:
        leader.append_as_leader(batch(1), required_acks=-1)
    assert refused.value.error == ErrorCode.not_enough_replicas
    assert leader.log_end_offset == 0
    leader.append_as_leader(batch(1), required_acks=1)  # acks=1 does not need the ISR
    assert leader.log_end_offset == 1


def test_min_insync_is_capped_at_the_replication_factor(tmp_path: Path) -> None:
    """Kafka's effectiveMinIsr: one replica with min.insync.replicas=2 takes acks=all."""
    alone = open_replica(tmp_path, 1, state(1, 0, (1,), (1,)), FakeClock(),
                         min_insync_replicas=2)
    alone.append_as_leader(batch(3), required_acks=-1)
    assert alone.high_watermark == 3
    assert alone.acks_error(3) == ErrorCode.none


def test_high_watermark_holds_while_the_isr_is_below_min_insync(tmp_path: Path) -> None:
    clock = FakeClock()
    leader = open_replica(tmp_path, 1, state(1, 1, (1, 2, 3)), clock, min_insync_replicas=2)
    f2 = open_replica(tmp_path, 2, state(1, 1, (1, 2, 3)), clock)
    # The controller took both followers out; they are not caught up either.
    leader.update_state(state(1, 1, (1,), partition_epoch=1))
    clock.advance(LAG_S + 1)
    leader.append_as_leader(batch(4), required_acks=1)
    assert leader.high_watermark == 0  # alone, it would be 4 (Kafka 3.x, KIP-966)
    fetch(leader, f2)
    fetch(leader, f2)
    proposal = leader.propose_isr_expansion(2)
    assert proposal is not None and proposal.isr == (1, 2)
    assert leader.high_watermark == 0  # asked, not written: still under min.insync
    leader.isr_changed(proposal, state(1, 1, (1, 2), partition_epoch=2))
    assert leader.high_watermark == 4


def test_a_follower_that_reaches_the_previous_log_end_stays_in_sync(tmp_path: Path) -> None:
    """Appends every second: f2's fetches never reach the leader's log end as it is, but
    each reaches it as it was at the fetch before (Kafka's updateFetchState); f3 takes one
    batch per fetch, falls further behind, and is out after the lag time."""
    clock = FakeClock()
    isr = (1, 2, 3)
    leader = open_replica(tmp_path, 1, state(1, 1, isr), clock)
    f2 = open_replica(tmp_path, 2, state(1, 1, isr), clock)
    f3 = open_replica(tmp_path, 3, state(1, 1, isr), clock)
    lagging_since = None
    for _ in range(3 * int(LAG_S)):
        clock.advance(1)
        leader.append_as_leader(batch(1), 1)
        leader.append_as_leader(batch(1), 1)
        fetch(leader, f2)
        fetch(leader, f3, max_bytes=1)  # one batch a fetch
        out = leader.out_of_sync_replicas()
        assert 2 not in out
        if 3 in out and lagging_since is None:
            lagging_since = clock.now
    assert leader.followers[2].log_end_offset == leader.log_end_offset - 2
    assert lagging_since is not None


def test_a_stuck_follower_leaves_after_exactly_the_lag_time(tmp_path: Path) -> None:
    clock = FakeClock()
    isr = (1, 2, 3)
    leader = open_replica(tmp_path, 1, state(1, 1, isr), clock)
    f2 = open_replica(tmp_path, 2, state(1, 1, isr), clock)
    f3 = open_replica(tmp_path, 3, state(1, 1, isr), clock)
    leader.append_as_leader(batch(2), 1)
    fetch(leader, f2)
    fetch(leader, f3)
    fetch(leader, f3)  # f3 is at the log end
    caught_up_at = clock.now
    leader.append_as_leader(batch(1), 1)  # f3 never fetches again; f2 keeps fetching
    clock.advance(LAG_S)
    fetch(leader, f2)
    assert leader.out_of_sync_replicas() == []  # exactly the lag: still in
    clock.advance(0.001)
    fetch(leader, f2)
    assert leader.out_of_sync_replicas() == [3]
    shrink = leader.propose_isr_shrink()
    assert shrink is not None and shrink.isr == (1, 2)
    assert clock.now - caught_up_at > LAG_S


def test_a_follower_at_the_log_end_is_in_sync_without_fetching(tmp_path: Path) -> None:
    """Kafka's isCaughtUp: equal log ends count as caught up however long ago the last
    fetch was (an idle partition whose follower is slow to fetch again)."""
    clock = FakeClock()
    leader = open_replica(tmp_path, 1, state(1, 1, (1, 2), (1, 2)), clock)
    f2 = open_replica(tmp_path, 2, state(1, 1, (1, 2), (1, 2)), clock)
    leader.append_as_leader(batch(2), 1)
    fetch(leader, f2)
    fetch(leader, f2)
    clock.advance(5 * LAG_S)
    assert leader.out_of_sync_replicas() == []
    leader.append_as_leader(batch(1), 1)
    assert leader.out_of_sync_replicas() == [2]


def test_a_follower_fetching_in_a_session_stays_in_sync_through_a_quiet_spell(
        tmp_path: Path) -> None:
    """A follower in a fetch session names a quiet partition in none of its fetches, yet
    each counts it (KIP-227; Kafka's leader counts every partition of the session at
    each fetch). The first write after a quiet spell longer than the lag time must not
    find it 'behind' (seen at 10,000 partitions: ISRs shrank below min.insync.replicas
    and acks=all was refused until the followers fetched the write); once it stops
    fetching, the lag time runs from its last fetch."""
    clock = FakeClock()
    session_fetch = {2: NEVER}
    leader = open_replica(tmp_path, 1, state(1, 1, (1, 2), (1, 2)), clock,
                          session_fetch_s=session_fetch.__getitem__)
    f2 = open_replica(tmp_path, 2, state(1, 1, (1, 2), (1, 2)), clock)
    leader.append_as_leader(batch(2), 1)
    fetch(leader, f2)
    fetch(leader, f2)
    clock.advance(5 * LAG_S)
    session_fetch[2] = clock.now - 0.1  # its session's latest fetch, not naming t-0
    leader.append_as_leader(batch(1), 1)
    assert leader.out_of_sync_replicas() == []
    clock.advance(LAG_S - 0.2)
    assert leader.out_of_sync_replicas() == []
    clock.advance(0.2)  # the lag time since its last fetch, which it stopped making
    assert leader.out_of_sync_replicas() == [2]


def test_a_follower_rejoins_at_the_high_watermark_and_the_epoch_start(tmp_path: Path) -> None:
    clock = FakeClock()
    # Broker 1 followed at epoch 1 and has 5 records; it now leads epoch 2 from offset 5,
    # with a checkpointed high watermark of 3 and f3 out of the ISR.
    leader = open_replica(tmp_path, 1, state(2, 1, (1, 2, 3)), clock)
    leader.log.append_as_follower(_stamped(tmp_path, 5, epoch=1))
    leader.follower_high_watermark(3)
    leader.update_state(state(1, 2, (1, 2), partition_epoch=1))
    assert leader.leader_epoch_start_offset == 5
    assert leader.log.leader_epoch_cache.epochs == [1, 2]
    leader.record_follower_fetch(3, 2, 0, 5)
    assert leader.propose_isr_expansion(3) is None  # below the high watermark
    leader.record_follower_fetch(3, 4, 0, 5)
    assert leader.propose_isr_expansion(3) is None  # not yet into this leader's epoch
    leader.record_follower_fetch(3, 5, 0, 5)
    expand = leader.propose_isr_expansion(3)
    assert expand is not None and expand.isr == (1, 2, 3)
    assert expand.partition_epoch == 1  # conditioned on the state this leader saw
    leader.record_follower_fetch(2, 5, 0, 5)
    assert leader.propose_isr_expansion(2) is None  # in the ISR already
    assert leader.propose_isr_shrink() is None  # one change at a time


def test_a_refused_isr_change_waits_for_the_controllers_state(tmp_path: Path) -> None:
    clock = FakeClock()
    leader = open_replica(tmp_path, 1, state(1, 1, (1, 2, 3), partition_epoch=4), clock)
    clock.advance(LAG_S + 1)
    shrink = leader.propose_isr_shrink()
    assert shrink is not None and shrink.isr == (1,)
    leader.isr_changed(shrink, None)  # the partition epoch was stale
    assert leader.isr == (1, 2, 3)
    assert leader.propose_isr_shrink() is None  # nothing more until the state arrives
    leader.update_state(state(1, 1, (1, 2), partition_epoch=5))
    again = leader.propose_isr_shrink()
    assert again is not None and (again.isr, again.partition_epoch) == ((1,), 5)
    leader.isr_change_failed(again)  # ZooKeeper unreachable: asked again next time
    again = leader.propose_isr_shrink()
    assert again is not None
    leader.isr_changed(again, state(1, 1, (1,), partition_epoch=6))
    assert (leader.isr, leader.state.partition_epoch) == ((1,), 6)


def test_an_isr_answer_after_a_leader_change_is_ignored(tmp_path: Path) -> None:
    clock = FakeClock()
    leader = open_replica(tmp_path, 1, state(1, 1, (1, 2, 3)), clock)
    clock.advance(LAG_S + 1)
    shrink = leader.propose_isr_shrink()
    assert shrink is not None
    leader.update_state(state(2, 2, (2, 3), partition_epoch=1))
    assert leader.isr_changed(shrink, state(1, 1, (1,), partition_epoch=1)) is False
    assert (leader.state.leader, leader.isr) == (2, (2, 3))


def test_a_member_being_admitted_holds_the_high_watermark(tmp_path: Path) -> None:
    """KIP-497's maximal ISR: once asked to admit f2, the leader counts it, even before
    the controller answers and though it is no longer caught up."""
    clock = FakeClock()
    leader = open_replica(tmp_path, 1, state(1, 1, (1,), (1, 2)), clock)
    f2 = open_replica(tmp_path, 2, state(1, 1, (1,), (1, 2)), clock)
    leader.append_as_leader(batch(2), 1)
    fetch(leader, f2)
    fetch(leader, f2)
    assert leader.propose_isr_expansion(2) is not None
    clock.advance(LAG_S + 1)
    leader.append_as_leader(batch(3), 1)
    assert leader.high_watermark == 2  # committed ISR (1,) alone would say 5


def test_a_caught_up_follower_outside_the_isr_holds_the_high_watermark(tmp_path: Path) -> None:
    """Kafka's shouldWaitForReplicaToJoinIsr: otherwise a follower catching up with an
    ISR of the leader alone would chase a high watermark it can never reach."""
    clock = FakeClock()
    leader = open_replica(tmp_path, 1, state(1, 1, (1,), (1, 2)), clock)
    f2 = open_replica(tmp_path, 2, state(1, 1, (1,), (1, 2)), clock)
    leader.append_as_leader(batch(2), 1)
    assert leader.high_watermark == 2  # f2 is not in the ISR and never fetched
    fetch(leader, f2)
    fetch(leader, f2)  # caught up: it fetched at the log end
    leader.append_as_leader(batch(3), 1)
    assert leader.high_watermark == 2
    clock.advance(LAG_S + 1)
    leader.append_as_leader(batch(1), 1)
    assert leader.high_watermark == 6  # it stopped fetching: no longer waited for


def test_a_dead_follower_outside_the_isr_does_not_hold_the_high_watermark(
        tmp_path: Path) -> None:
    """Kafka's isReplicaIsrEligible: when the controller drops a dead broker from the ISR,
    the records it did not fetch are committed at once by the live ISR, even though the
    dead one was caught up a moment ago."""
    clock = FakeClock()
    alive = {1, 2, 3}
    leader = open_replica(tmp_path, 1, state(1, 1, (1, 2, 3)), clock,
                          isr_eligible=alive.__contains__)
    f2 = open_replica(tmp_path, 2, state(1, 1, (1, 2, 3)), clock)
    f3 = open_replica(tmp_path, 3, state(1, 1, (1, 2, 3)), clock)
    leader.append_as_leader(batch(2), 1)
    catch_up(leader, f2)
    catch_up(leader, f3)
    fetch(leader, f2)
    fetch(leader, f3)
    assert leader.high_watermark == 2
    leader.append_as_leader(batch(3), 1)
    fetch(leader, f2)
    fetch(leader, f2)  # f2 has 5; f3 (about to die) still 2
    alive.discard(3)
    assert leader.update_state(state(1, 1, (1, 2), partition_epoch=1)) is StateChange.ISR
    assert leader.high_watermark == 5


def test_a_follower_in_a_controlled_shutdown_is_not_put_back_in_the_isr(
        tmp_path: Path) -> None:
    """Kafka's isReplicaIsrEligible: a broker shutting down keeps fetching until it stops.
    Once the controller has taken it out of the ISR, its leader must not ask to add it
    back, nor wait for it: else the two undo each other until the shutdown gives up."""
    clock = FakeClock()
    eligible = {1, 2, 3}
    leader = open_replica(tmp_path, 1, state(1, 1, (1, 2, 3)), clock,
                          isr_eligible=eligible.__contains__)
    f3 = open_replica(tmp_path, 3, state(1, 1, (1, 2, 3)), clock)
    eligible.discard(3)  # broker 3 asked for a controlled shutdown
    assert leader.update_state(state(1, 1, (1, 2), partition_epoch=1)) is StateChange.ISR
    leader.append_as_leader(batch(2), 1)
    leader.record_follower_fetch(2, 2, 0, 2)
    assert leader.high_watermark == 2  # broker 3, caught up a moment ago, holds nothing
    catch_up(leader, f3)
    fetch(leader, f3)  # the leader learns it has everything
    assert leader.propose_isr_expansion(3) is None
    eligible.add(3)  # back after a restart
    assert leader.propose_isr_expansion(3) is not None


def test_states_apply_by_leader_epoch_then_partition_epoch(tmp_path: Path) -> None:
    clock = FakeClock()
    leader = open_replica(tmp_path, 1, state(1, 3, (1, 2, 3), partition_epoch=3), clock)
    leader.append_as_leader(batch(4), 1)
    leader.record_follower_fetch(2, 4, 0, 4)
    clock.advance(LAG_S + 1)  # f3 never fetched: only the ISR counts
    assert leader.update_state(state(2, 2, (2,), partition_epoch=9)) is StateChange.NONE
    assert leader.update_state(state(1, 3, (1, 2, 3), partition_epoch=3)) is StateChange.NONE
    # Same leadership, the controller shrank the ISR: followers' positions are kept.
    assert leader.update_state(state(1, 3, (1, 2), partition_epoch=4)) is StateChange.ISR
    assert leader.isr == (1, 2) and leader.followers[2].log_end_offset == 4
    assert leader.high_watermark == 4
    # Re-elected at a new epoch: followers keep their log ends, the epoch starts at 4.
    assert leader.update_state(state(1, 4, (1, 2), partition_epoch=5)) is (
        StateChange.LEADER_EPOCH)
    assert leader.followers[2].log_end_offset == 4
    assert leader.log.leader_epoch_cache.epochs[-1] == 4
    assert leader.leader_epoch_start_offset == 4
    # Deposed: it follows, appends are refused, and no follower state is kept.
    assert leader.update_state(state(2, 5, (1, 2), partition_epoch=6)) is (
        StateChange.LEADER_EPOCH)
    assert not leader.is_leader and leader.followers == {}
    with pytest.raises(LogAppendError) as refused:
        leader.append_as_leader(batch(1), 1)
    assert refused.value.error == ErrorCode.not_leader_or_follower
