"""Truncation by leader epoch, on in-process replicas over real logs: a returning replica
keeps what its leader has and cuts exactly what diverges, never by high watermark alone
(KIP-101), walking back one epoch at a time where leaders changed in a row (KIP-279).

Fetches go through ``replication_helpers.fetch``: the leader's divergence check, its
read, and the follower's truncation or append, as the fetch handler and the replica
fetcher call them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from replication_helpers import FakeClock, catch_up, fetch, log_bytes, open_replica, state
from storage_helpers import batch, decode_region, open_log

from gregor.storage.leader_epoch_cache import LeaderEpochFileCache
from gregor.storage.log import Log


def test_kip_101_a_restarted_follower_keeps_what_its_high_watermark_did_not_cover(
        tmp_path: Path) -> None:
    """A acknowledged m2 on B's fetch of offset 2, but B restarted before it learnt the
    new high watermark. Truncating to its high watermark (1) and then leading would lose
    m2; B asks by epoch instead, keeps it, and still has it when it leads."""
    clock = FakeClock()
    a = open_replica(tmp_path, 1, state(1, 1, (1, 2), (1, 2)), clock)
    b = open_replica(tmp_path, 2, state(1, 1, (1, 2), (1, 2)), clock)
    a.append_as_leader(batch(1, tag="m1"), -1)
    catch_up(a, b)
    fetch(a, b)
    a.append_as_leader(batch(1, tag="m2"), -1)
    fetch(a, b)  # B gets m2 ...
    a.record_follower_fetch(2, 2, 0, 2)  # ... and its next fetch acknowledges it
    assert (a.high_watermark, b.high_watermark) == (2, 1)
    b.log.close()
    b = open_replica(tmp_path, 2, state(1, 1, (1, 2), (1, 2)), clock, high_watermark=1)
    assert b.log_end_offset == 2  # following again, it cut nothing before asking A
    assert fetch(a, b)  # no divergence: epoch 1 ends at 2 on A too
    assert b.log_end_offset == 2
    b.update_state(state(2, 2, (2,), (1, 2), 1))  # A dies, B leads
    assert [r.value for r in decode_region(b.log.read(0, 1 << 20))] == [b"m1-0", b"m2-0"]


def test_kip_101_replicas_that_both_restart_do_not_keep_two_values_at_one_offset(
        tmp_path: Path) -> None:
    """A wrote m2 at offset 1 that B never got; both lost power; B came back first, led
    epoch 2 and wrote m3 at offset 1. A, following, must drop m2: by its high watermark
    it would keep it, and offset 1 would hold m2 on A and m3 on B."""
    clock = FakeClock()
    a = open_replica(tmp_path, 1, state(1, 1, (1, 2), (1, 2)), clock)
    b = open_replica(tmp_path, 2, state(1, 1, (1, 2), (1, 2)), clock)
    a.append_as_leader(batch(1, tag="m1"), -1)
    catch_up(a, b)
    fetch(a, b)
    a.append_as_leader(batch(1, tag="m2"), 1)
    b.update_state(state(2, 2, (2,), (1, 2), 1))
    b.append_as_leader(batch(1, tag="m3"), 1)
    a.update_state(state(2, 2, (2,), (1, 2), 1))
    assert catch_up(b, a) == 1
    assert log_bytes(a) == log_bytes(b)
    assert [r.value for r in decode_region(a.log.read(0, 1 << 20))] == [b"m1-0", b"m3-0"]
    assert a.log.leader_epoch_cache.epochs == [1, 2]


def test_kip_279_a_follower_walks_back_one_epoch_at_a_time(tmp_path: Path) -> None:
    """Two unclean elections in a row. F led epoch 0 (offsets 0-3); L led epoch 1 from
    an empty log (0-5); F led epoch 2 (4-7); L leads epoch 3 (6-7). F's latest epoch 2 is
    unknown to L, which answers epoch 1, ending at 6. F never had epoch 1: cutting at 6,
    or at its own end of epoch 0 (4), would keep F's epoch-0 records at offsets L holds
    from epoch 1. F cuts to 4, asks about epoch 0, learns L has none of it, and starts
    over."""
    clock = FakeClock()
    f = open_replica(tmp_path, 2, state(2, 0, (2,), (1, 2)), clock)
    leader = open_replica(tmp_path, 1, state(2, 0, (2,), (1, 2)), clock)
    f.append_as_leader(batch(4, tag="f0"), 1)
    leader.update_state(state(1, 1, (1,), (1, 2), 1))
    leader.append_as_leader(batch(6, tag="l1"), 1)
    f.update_state(state(2, 2, (2,), (1, 2), 2))
    f.append_as_leader(batch(4, tag="f2"), 1)
    leader.update_state(state(1, 3, (1,), (1, 2), 3))
    leader.append_as_leader(batch(2, tag="l3"), 1)
    f.update_state(state(1, 3, (1,), (1, 2), 3))

    assert leader.diverging_epoch(2, 8) == (1, 6)
    assert not fetch(leader, f)
    assert (f.log_end_offset, f.log.leader_epoch_cache.epochs) == (4, [0])
    assert leader.diverging_epoch(0, 4) == (0, 0)
    assert not fetch(leader, f)
    assert f.log_end_offset == 0
    assert catch_up(leader, f) == 0
    assert log_bytes(f) == log_bytes(leader)
    assert f.log.leader_epoch_cache.epochs == [1, 3]


def test_an_epoch_assigned_but_never_written_is_dropped(tmp_path: Path) -> None:
    """A was re-elected at epoch 5 and wrote nothing before B led epoch 6, never having
    heard of 5. A's latest epoch is then 5 at its log end: A cuts nothing, but must
    forget epoch 5, or every fetch would name it and diverge again."""
    clock = FakeClock()
    a = open_replica(tmp_path, 1, state(1, 1, (1, 2), (1, 2)), clock)
    b = open_replica(tmp_path, 2, state(1, 1, (1, 2), (1, 2)), clock)
    a.append_as_leader(batch(3), -1)
    catch_up(a, b)
    a.update_state(state(1, 5, (1, 2), (1, 2), 1))
    assert a.log.leader_epoch_cache.epochs == [1, 5]
    b.update_state(state(2, 6, (2,), (1, 2), 2))
    b.append_as_leader(batch(2), 1)
    a.update_state(state(2, 6, (2,), (1, 2), 2))
    assert catch_up(b, a) == 1
    assert a.log.leader_epoch_cache.epochs == [1, 6]
    assert log_bytes(a) == log_bytes(b)


def test_a_follower_appends_the_leaders_batches_unchanged(tmp_path: Path) -> None:
    clock = FakeClock()
    leader = open_replica(tmp_path, 1, state(1, 4, (1, 2), (1, 2)), clock)
    follower = open_replica(tmp_path, 2, state(1, 4, (1, 2), (1, 2)), clock)
    leader.append_as_leader(batch(3, producer_id=7, producer_epoch=0, base_sequence=0), 1)
    leader.append_as_leader(batch(2), 1)
    catch_up(leader, follower)
    assert log_bytes(follower) == log_bytes(leader)
    assert follower.log.leader_epoch_cache.epochs == [4]
    # The idempotent producer's state came along: leading now, it spots the retry of a
    # batch whose acknowledgement the old leader never sent, and writes nothing twice.
    assert follower.log.producer_state.producers[7].last_seq == 2
    follower.update_state(state(2, 5, (2,), (1, 2), 1))
    end = follower.log_end_offset
    retry = follower.append_as_leader(
        batch(3, producer_id=7, producer_epoch=0, base_sequence=0), 1)
    assert (retry.duplicate, retry.first_offset, retry.last_offset) == (True, 0, 2)
    assert follower.log_end_offset == end


def test_a_follower_starts_inside_a_batch_the_leaders_log_start_cuts(tmp_path: Path) -> None:
    """DeleteRecords moved the leader's log start to 4, inside its batch 3-5: a new
    follower starts its log at the batch (the only way to hold it), then moves its log
    start to the leader's, as Kafka does."""
    leader = open_log(tmp_path / "leader")
    leader.append_as_leader(batch(3), 1)
    leader.append_as_leader(batch(3), 1)
    leader.roll()
    leader.advance_log_start_offset(4)
    follower = open_log(tmp_path / "follower")
    follower.truncate_fully_and_start_at(4)  # its fetch at 0 was out of range
    region = leader.read(4, 1 << 20)
    assert region is not None
    follower.append_as_follower(region.read())
    follower.advance_log_start_offset(leader.log_start_offset)
    assert (follower.log_start_offset, follower.log_end_offset) == (4, 6)
    assert [r.offset for r in decode_region(follower.read(4, 1 << 20))] == [3, 4, 5]


def test_epochs_contradicted_by_a_new_one_are_dropped(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(tmp_path)
    cache.assign(1, 0)
    cache.assign(5, 3)
    cache.assign(4, 3)  # Kafka's assign: entries at or after it, in epoch or offset, go
    assert list(zip(cache.epochs, cache.start_offsets, strict=True)) == [(1, 0), (4, 3)]
    cache.assign(4, 9)  # the same epoch again later: nothing changes
    cache.assign(6, 2)
    assert list(zip(cache.epochs, cache.start_offsets, strict=True)) == [(1, 0), (6, 2)]
    assert LeaderEpochFileCache(tmp_path).epochs == [1, 6]


def _epochs_log(directory: Path) -> Log:
    log = open_log(directory)
    log.append_as_leader(batch(2), 1)
    log.append_as_leader(batch(2), 3)
    log.roll()
    log.append_as_leader(batch(2), 4)
    return log


def test_recovery_restores_an_epoch_the_checkpoint_missed(tmp_path: Path) -> None:
    """A crash between the batch starting epoch 4 and the checkpoint naming it: recovery
    reads the epoch from the batch header, as Kafka's does."""
    log = _epochs_log(tmp_path)
    log.flush()
    log.leader_epoch_cache.path.write_text("0\n2\n1 0\n3 2\n")
    # Reopened as after kill -9 (no close), recovering from the last roll.
    reopened = open_log(tmp_path, recover=True, recovery_point=log.active_segment.base_offset)
    assert list(zip(reopened.leader_epoch_cache.epochs,
                    reopened.leader_epoch_cache.start_offsets, strict=True)) == [
        (1, 0), (3, 2), (4, 4)]


def test_a_lost_epoch_checkpoint_is_rebuilt_from_the_batches(tmp_path: Path) -> None:
    log = _epochs_log(tmp_path)
    log.close()
    (tmp_path / "leader-epoch-checkpoint").unlink()
    reopened = open_log(tmp_path)
    assert list(zip(reopened.leader_epoch_cache.epochs,
                    reopened.leader_epoch_cache.start_offsets, strict=True)) == [
        (1, 0), (3, 2), (4, 4)]


def test_a_new_epoch_is_fsynced_before_the_recovery_point_passes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new epoch's write is not fsynced (a first produce to each of thousands of
    partitions was one fsync each), but the file is before the recovery point moves
    past it: below the recovery point, recovery no longer reads epochs back from the
    batches."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), 1)
    log.append_as_leader(batch(2), 3)
    assert "leader-epoch-checkpoint" not in synced
    assert LeaderEpochFileCache(tmp_path).epochs == [1, 3]  # written all the same
    log.roll()
    assert synced.count("leader-epoch-checkpoint") == 1
    assert log.recovery_point == 4
    log.append_as_leader(batch(1), 4)
    synced.clear()
    log.flush()
    assert synced[-1:] == ["leader-epoch-checkpoint"] and len(synced) == 2
    synced.clear()
    log.flush()  # nothing written since: no second fsync of the file
    assert "leader-epoch-checkpoint" not in synced
