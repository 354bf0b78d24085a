"""Replication rules on in-process replicas: high watermark, ISR, acks=all, truncation.

Leader and followers are ``Partition`` objects over real logs in temporary
directories; the time is passed in, so lag windows are exact. What a follower
fetches is copied the way the replica fetcher copies it (the leader's bytes,
appended unchanged), and truncation goes through the fetcher's own rule.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from storage_helpers import batch, topic_config

from gregor.cluster.partition import Partition
from gregor.cluster.partition_state import PartitionState
from gregor.cluster.replica_fetcher import ReplicaFetcher
from gregor.cluster.replica_manager import ReplicaManager
from gregor.config import BrokerConfig
from gregor.protocol.errors import ErrorCode
from gregor.storage.log import Log, LogAppendError
from gregor.storage.log_manager import LogManager

LAG_S = 10.0


def state(leader: int, epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2, 3),
          partition_epoch: int = 0) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=epoch, isr=isr, replicas=replicas,
                          partition_epoch=partition_epoch)


def replica(tmp_path: Path, broker_id: int, current: PartitionState, **config: object
            ) -> Partition:
    log = Log(tmp_path / f"b{broker_id}" / "t-0", "t", 0, topic_config(**config))
    return Partition("t", 0, log, broker_id, current)


def copy(leader: Partition, follower: Partition, now: float) -> None:
    """One follower fetch: the leader notes the offset, the follower appends what it got."""
    leader.record_follower_fetch(follower.local_broker_id, follower.log_end_offset, now)
    region = leader.log.read(follower.log_end_offset, 1 << 20) if (
        follower.log_end_offset < leader.log_end_offset) else None
    if region is not None:
        follower.log.append_as_follower(region.read())
    follower.follower_high_watermark(leader.high_watermark)


def test_high_watermark_is_the_smallest_log_end_in_the_isr(tmp_path: Path) -> None:
    isr = (1, 2, 3)
    leader = replica(tmp_path, 1, state(1, 0, isr))
    f2 = replica(tmp_path, 2, state(1, 0, isr))
    f3 = replica(tmp_path, 3, state(1, 0, isr))
    leader.append_as_leader(batch(5), required_acks=-1)
    assert leader.high_watermark == 0  # nobody else has it yet
    copy(leader, f2, 1.0)
    leader.record_follower_fetch(2, f2.log_end_offset, 1.1)  # f2's next fetch shows 5
    assert leader.high_watermark == 0  # f3 still has nothing
    copy(leader, f3, 1.2)
    leader.record_follower_fetch(3, f3.log_end_offset, 1.3)
    assert leader.high_watermark == 5
    copy(leader, f2, 1.4)
    assert f2.high_watermark == 5 and f2.log_end_offset == 5
    # It never moves back, even if a fetch reports less (a stale request).
    leader.record_follower_fetch(2, 3, 1.5)
    assert leader.high_watermark == 5


def test_acks_all_is_refused_below_min_insync(tmp_path: Path) -> None:
    leader = replica(tmp_path, 1, state(1, 0, (1,)), min_insync_replicas=2)
    with pytest.raises(LogAppendError) as refused:
        leader.append_as_leader(batch(1), required_acks=-1)
    assert refused.value.error == ErrorCode.not_enough_replicas
    assert leader.log_end_offset == 0  # refused before the write
    leader.append_as_leader(batch(1), required_acks=1)  # acks=1 does not need the ISR
    assert leader.log_end_offset == 1


def test_follower_not_caught_up_for_the_lag_time_leaves_and_rejoins(tmp_path: Path) -> None:
    isr = (1, 2, 3)
    leader = replica(tmp_path, 1, state(1, 0, isr))
    f2 = replica(tmp_path, 2, state(1, 0, isr))
    f3 = replica(tmp_path, 3, state(1, 0, isr))
    for second in range(1, 30):
        leader.append_as_leader(batch(1), required_acks=1)
        copy(leader, f2, float(second))  # f2 keeps up; f3 stopped fetching at 0
        shrink = leader.propose_isr_shrink(float(second), LAG_S)
        if shrink is not None:
            break
    assert shrink is not None and shrink.isr == (1, 2)
    assert second == 11  # first check past LAG_S since the leader began
    assert leader.propose_isr_shrink(float(second), LAG_S) is None  # one change at a time
    written = PartitionState(**{**_fields(shrink), "partition_epoch": 1})
    leader.isr_changed(shrink, written)
    assert leader.isr == (1, 2)
    # The HW no longer waits for f3.
    assert leader.high_watermark == leader.log_end_offset - 1 or leader.high_watermark == (
        f2.log_end_offset)
    # f3 comes back: first fetches take it up to the HW, then it may rejoin.
    copy(leader, f3, 40.0)
    copy(leader, f3, 40.1)
    expand = leader.propose_isr_expansion()
    assert expand is not None and expand.isr == (1, 2, 3)


def test_a_stale_isr_answer_is_ignored(tmp_path: Path) -> None:
    leader = replica(tmp_path, 1, state(1, 0, (1, 2, 3)))
    shrink = leader.propose_isr_shrink(100.0, LAG_S)
    assert shrink is not None
    # The controller moved leadership before the answer came back.
    leader.update_state(state(2, 1, (2, 3), partition_epoch=1), 100.0)
    leader.isr_changed(shrink, PartitionState(**{**_fields(shrink), "partition_epoch": 1}))
    assert (leader.state.leader, leader.isr) == (2, (2, 3))


def _fields(s: PartitionState) -> dict:
    return {name: getattr(s, name) for name in s.__dataclass_fields__}


def test_follower_appends_the_leaders_bytes_unchanged(tmp_path: Path) -> None:
    leader = replica(tmp_path, 1, state(1, 4, (1, 2)), )
    follower = replica(tmp_path, 2, state(1, 4, (1, 2)))
    leader.append_as_leader(batch(3, producer_id=7, producer_epoch=0, base_sequence=0), 1)
    leader.append_as_leader(batch(2), 1)
    copy(leader, follower, 1.0)
    assert follower.log.read(0, 1 << 20).read() == leader.log.read(0, 1 << 20).read()
    assert follower.log.leader_epoch_cache.epochs == [4]
    # The idempotent producer's state came along: a retry is a duplicate there too.
    assert follower.log.producer_state.producers[7].last_seq == 2
    with pytest.raises(LogAppendError):  # a gap backwards is refused
        follower.log.append_as_follower(leader.log.read(0, 1 << 20).read())


def truncate_like_the_fetcher(leader: Partition, follower: Partition) -> None:
    """The follower asks for the end of its latest epoch and truncates as the fetcher does."""
    epoch, end = leader.log.leader_epoch_cache.end_offset_for(
        follower.log.leader_epoch_cache.latest_epoch, leader.log_end_offset)
    ReplicaFetcher._truncate_to_leader(follower, epoch, end)


def test_kip_101_a_returning_follower_keeps_what_its_hw_did_not_cover(tmp_path: Path) -> None:
    """KIP-101: b2 fetched offsets 0-1 but restarted before learning HW 2. Truncating
    to its HW (0) and then leading would lose acknowledged records."""
    b1 = replica(tmp_path, 1, state(1, 0, (1, 2), (1, 2)))
    b2 = replica(tmp_path, 2, state(1, 0, (1, 2), (1, 2)))
    b1.append_as_leader(batch(2), 1)
    b2.log.append_as_follower(b1.log.read(0, 1 << 20).read())
    b1.record_follower_fetch(2, 2, 1.0)
    assert b1.high_watermark == 2 and b2.high_watermark == 0
    truncate_like_the_fetcher(b1, b2)
    assert b2.log_end_offset == 2  # nothing cut: epoch 0 ends at 2 on the leader too


def test_kip_279_divergent_logs_after_two_failovers(tmp_path: Path) -> None:
    """b1 led epoch 0 and wrote 0-2, of which b2 got only 0; b1 died. b2 led epoch 1
    and wrote two records at 1-2. b1 returns as follower: its offsets 1-2 of epoch 0
    diverge and must go, replaced by b2's."""
    b1 = replica(tmp_path, 1, state(1, 0, (1, 2), (1, 2)))
    b2 = replica(tmp_path, 2, state(1, 0, (1, 2), (1, 2)))
    b1.append_as_leader(batch(1, tag="a"), 1)
    b2.log.append_as_follower(b1.log.read(0, 1 << 20).read())
    b1.append_as_leader(batch(2, tag="lost"), 1)  # never replicated
    b2.update_state(state(2, 1, (2,), (1, 2), 1), 2.0)
    b2.append_as_leader(batch(2, tag="b"), 1)
    b1.update_state(state(2, 1, (2,), (1, 2), 1), 3.0)
    truncate_like_the_fetcher(b2, b1)
    assert b1.log_end_offset == 1
    b1.log.append_as_follower(b2.log.read(1, 1 << 20).read())
    assert b1.log.read(0, 1 << 20).read() == b2.log.read(0, 1 << 20).read()
    assert b1.log.leader_epoch_cache.epochs == [0, 1]


@pytest.fixture
def manager(tmp_path: Path) -> ReplicaManager:
    config = BrokerConfig.from_mapping({"broker.id": "1", "log.dirs": str(tmp_path)})
    return ReplicaManager(config, LogManager(tmp_path))


def test_delayed_produce_completes_when_the_high_watermark_covers_it(
        manager: ReplicaManager, tmp_path: Path) -> None:
    async def scenario() -> None:
        leader = replica(tmp_path, 1, state(1, 0, (1, 2), (1, 2)))
        manager.partitions[("t", 0)] = leader
        leader.append_as_leader(batch(3), -1)
        waiting = asyncio.create_task(manager.wait_for_acks(leader, 3, timeout_s=10))
        await asyncio.sleep(0)
        assert not waiting.done()
        manager.record_follower_fetch(leader, 2, 3)  # the follower has all three
        assert await waiting == ErrorCode.none
        # A write nobody replicates times out.
        leader.append_as_leader(batch(1), -1)
        assert await manager.wait_for_acks(leader, 4, timeout_s=0.05) == (
            ErrorCode.request_timed_out)

    asyncio.run(scenario())


def test_delayed_produce_fails_when_leadership_moves(manager: ReplicaManager,
                                                     tmp_path: Path) -> None:
    async def scenario() -> None:
        leader = replica(tmp_path, 1, state(1, 0, (1, 2), (1, 2)))
        manager.partitions[("t", 0)] = leader
        leader.append_as_leader(batch(1), -1)
        waiting = asyncio.create_task(manager.wait_for_acks(leader, 1, timeout_s=10))
        await asyncio.sleep(0)
        from gregor.cluster.metadata_image import TopicMetadata
        topic = TopicMetadata("t", "00000000-0000-0000-0000-000000000000", [])
        manager.apply_partition_state(topic, 0, state(2, 1, (2,), (1, 2), 1))
        assert await waiting == ErrorCode.not_leader_or_follower
        await manager.stop()

    asyncio.run(scenario())


def test_kip_279_leader_answers_an_epoch_the_follower_never_had(tmp_path: Path) -> None:
    """The follower's latest epoch (2) is unknown to the leader, which answers with its
    epoch 1 ending at its log end. The follower never had epoch 1: its own records after
    epoch 0 (offsets 2-5, epoch 2) diverge and must go, though the leader's end is 8."""
    leader = replica(tmp_path, 1, state(1, 0, (1,), (1, 2)))
    follower = replica(tmp_path, 2, state(1, 0, (1,), (1, 2)))
    leader.append_as_leader(batch(2, tag="a"), 1)
    follower.log.append_as_follower(leader.log.read(0, 1 << 20).read())
    leader.append_as_leader(batch(2, tag="a"), 1)  # offsets 2-3 of epoch 0
    leader.update_state(state(1, 1, (1,), (1, 2), 1), 1.0)
    leader.append_as_leader(batch(4, tag="b"), 1)  # offsets 4-7 of epoch 1
    follower.update_state(state(2, 2, (2,), (1, 2), 2), 1.0)  # an unclean turn of its own
    follower.append_as_leader(batch(4, tag="z"), 1)  # offsets 2-5 of epoch 2
    for returned in (leader, follower):
        returned.update_state(state(1, 3, (1,), (1, 2), 3), 2.0)
    truncate_like_the_fetcher(leader, follower)
    assert follower.log_end_offset == 2
    follower.log.append_as_follower(leader.log.read(2, 1 << 20).read())
    assert follower.log.read(0, 1 << 20).read() == leader.log.read(0, 1 << 20).read()
