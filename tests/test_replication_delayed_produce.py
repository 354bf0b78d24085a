"""acks=all through the delayed-produce purgatory and the ReplicaManager: a request waits
until every partition's high watermark covers its records, and is answered with all of
them; leadership moving, the ISR falling below min.insync.replicas, and the timeout end
the wait; on one broker nothing waits at all."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from replication_helpers import LAG_S, FakeClock, state
from storage_helpers import batch

from gregor.cluster.metadata_image import TopicMetadata
from gregor.cluster.partition import Partition
from gregor.cluster.partition_state import PartitionState
from gregor.cluster.replica_manager import ReplicaManager
from gregor.config import BrokerConfig
from gregor.protocol.errors import ErrorCode
from gregor.storage.log import LogAppendError
from gregor.storage.log_manager import LogManager, TopicPartition

TOPIC = TopicMetadata("t", "00000000-0000-0000-0000-000000000001", [],
                      configs={"min.insync.replicas": "2"})


def manager(tmp_path: Path, clock: FakeClock, alter_isr: Any = None) -> ReplicaManager:
    config = BrokerConfig.from_mapping({"broker.id": "1", "log.dirs": str(tmp_path),
                                        "replica.lag.time.max.ms": str(int(LAG_S * 1000))})
    return ReplicaManager(config, LogManager(tmp_path), clock=clock, alter_isr=alter_isr)


def lead(replicas: ReplicaManager, index: int, isr: tuple[int, ...],
         replica_set: tuple[int, ...] = (1, 2, 3), epoch: int = 1) -> Partition:
    replicas.apply_partition_state(TOPIC, index, state(1, epoch, isr, replica_set, epoch))
    partition = replicas.get("t", index)
    assert partition is not None and partition.is_leader
    return partition


def follower_fetched(replicas: ReplicaManager, partition: Partition, broker: int) -> None:
    """``broker`` fetched from the leader's log end: it has everything."""
    end = partition.log_end_offset
    replicas.record_follower_fetch(partition, broker, end, 0, end)


async def started(work: Coroutine[Any, Any, list[ErrorCode]]) -> asyncio.Task:
    task = asyncio.create_task(work)
    await asyncio.sleep(0)  # let it check once and park
    assert not task.done()
    return task


def test_a_request_is_answered_once_every_partition_is_replicated(tmp_path: Path) -> None:
    async def scenario() -> None:
        replicas = manager(tmp_path, FakeClock())
        p0, p1 = lead(replicas, 0, (1, 2, 3)), lead(replicas, 1, (1, 2, 3))
        ends = [(p0, p0.append_as_leader(batch(3), -1).last_offset + 1),
                (p1, p1.append_as_leader(batch(2), -1).last_offset + 1)]
        waiting = await started(replicas.delayed_produce.wait(ends, timeout_s=60))
        for broker in (2, 3):
            follower_fetched(replicas, p0, broker)
        assert p0.high_watermark == 3
        await asyncio.sleep(0)
        assert not waiting.done()  # partition 0 is replicated, partition 1 not yet
        follower_fetched(replicas, p1, 2)
        follower_fetched(replicas, p1, 3)
        assert await waiting == [ErrorCode.none, ErrorCode.none]
        assert replicas.delayed_produce.watched(("t", 0)) == 0
        assert replicas.delayed_produce.watched(("t", 1)) == 0

    asyncio.run(scenario())


def test_what_is_not_replicated_in_time_answers_request_timed_out(tmp_path: Path) -> None:
    async def scenario() -> None:
        replicas = manager(tmp_path, FakeClock())
        p0, p1 = lead(replicas, 0, (1, 2)), lead(replicas, 1, (1, 2))
        ends = [(p0, p0.append_as_leader(batch(1), -1).last_offset + 1),
                (p1, p1.append_as_leader(batch(1), -1).last_offset + 1)]
        follower_fetched(replicas, p0, 2)
        follower_fetched(replicas, p0, 3)
        errors = await replicas.delayed_produce.wait(ends, timeout_s=0.05)
        assert errors == [ErrorCode.none, ErrorCode.request_timed_out]
        assert replicas.delayed_produce.watched(("t", 1)) == 0

    asyncio.run(scenario())


def test_a_backlog_is_settled_oldest_first_up_to_the_first_still_waiting(
        tmp_path: Path) -> None:
    """With requests queued on a partition (a pipelining producer under load), a moved
    high watermark settles those it covers and looks at one more, not at every one:
    each look at the backlog made a loaded leader slower, and so the backlog longer."""
    async def scenario() -> None:
        replicas = manager(tmp_path, FakeClock())
        p0 = lead(replicas, 0, (1, 2, 3))
        waiting = []
        for _ in range(6):
            end = p0.append_as_leader(batch(1), -1).last_offset + 1
            waiting.append(await started(replicas.delayed_produce.wait([(p0, end)], 60)))
        looked: list[int] = []
        acks_error = p0.acks_error

        def counted(required: int) -> ErrorCode | None:
            looked.append(required)
            return acks_error(required)

        p0.acks_error = counted  # type: ignore[method-assign]
        for broker in (2, 3):
            replicas.record_follower_fetch(p0, broker, 2, 0, p0.log_end_offset)
        assert p0.high_watermark == 2
        await asyncio.sleep(0)
        assert [task.done() for task in waiting] == [True, True] + [False] * 4
        assert looked == [1, 2, 3]
        for broker in (2, 3):
            follower_fetched(replicas, p0, broker)
        assert [await task for task in waiting] == [[ErrorCode.none]] * 6
        assert replicas.delayed_produce.watched(("t", 0)) == 0

    asyncio.run(scenario())


def test_a_request_needing_less_than_those_before_it_is_not_held_behind_them(
        tmp_path: Path) -> None:
    """A retried batch found already written needs only its earlier offset: it is
    answered once that is replicated, whatever newer requests still wait for."""
    async def scenario() -> None:
        replicas = manager(tmp_path, FakeClock())
        p0 = lead(replicas, 0, (1, 2, 3))
        first = p0.append_as_leader(batch(3), -1).last_offset + 1
        second = p0.append_as_leader(batch(3), -1).last_offset + 1
        newer = await started(replicas.delayed_produce.wait([(p0, second)], 60))
        retried = await started(replicas.delayed_produce.wait([(p0, first)], 60))
        for broker in (2, 3):
            replicas.record_follower_fetch(p0, broker, first, 0, p0.log_end_offset)
        assert await retried == [ErrorCode.none]
        assert not newer.done()
        for broker in (2, 3):
            follower_fetched(replicas, p0, broker)
        assert await newer == [ErrorCode.none]

    asyncio.run(scenario())


def test_a_leader_that_is_deposed_answers_not_leader(tmp_path: Path) -> None:
    async def scenario() -> None:
        replicas = manager(tmp_path, FakeClock())
        p0, p1 = lead(replicas, 0, (1, 2)), lead(replicas, 1, (1, 2))
        ends = [(p0, p0.append_as_leader(batch(1), -1).last_offset + 1),
                (p1, p1.append_as_leader(batch(1), -1).last_offset + 1)]
        waiting = await started(replicas.delayed_produce.wait(ends, timeout_s=60))
        replicas.apply_partition_state(TOPIC, 0, state(2, 2, (2, 3), partition_epoch=2))
        await asyncio.sleep(0)
        assert not waiting.done()
        replicas.remove_partition("t", 1)  # reassigned away
        assert await waiting == [ErrorCode.not_leader_or_follower] * 2
        await replicas.stop()

    asyncio.run(scenario())


def test_an_isr_falling_below_min_insync_answers_at_once(tmp_path: Path) -> None:
    """The high watermark stops (Kafka 3.x), so the write cannot be acknowledged; it is
    in the leader's log though, which NOT_ENOUGH_REPLICAS_AFTER_APPEND says."""
    async def scenario() -> None:
        clock = FakeClock()
        asked: list[PartitionState] = []

        async def alter_isr(tp: TopicPartition, proposal: PartitionState) -> PartitionState:
            asked.append(proposal)
            return PartitionState(**{**_fields(proposal), "partition_epoch": 9})

        replicas = manager(tmp_path, clock, alter_isr)
        p0 = lead(replicas, 0, (1, 2, 3))
        end = p0.append_as_leader(batch(1), -1).last_offset + 1
        waiting = await started(replicas.delayed_produce.wait([(p0, end)], timeout_s=60))
        clock.advance(LAG_S + 1)
        replicas.shrink_isrs()  # neither follower fetched: both go
        assert await waiting == [ErrorCode.not_enough_replicas_after_append]
        assert [a.isr for a in asked] == [(1,)]
        assert p0.high_watermark == 0
        with pytest.raises(LogAppendError) as refused:
            p0.append_as_leader(batch(1), -1)
        assert refused.value.error == ErrorCode.not_enough_replicas

    asyncio.run(scenario())


def test_a_silent_caught_up_follower_holds_acks_all_only_for_the_lag_time(
        tmp_path: Path) -> None:
    """f3, outside the ISR, caught up, holds the HW (it is about to be admitted), then
    stops fetching. Nothing else happens: the producer waits on this HW, f2 has it all.
    The periodic ISR check must let the HW move once f3 is no longer caught up."""
    async def scenario() -> None:
        clock = FakeClock()
        replicas = manager(tmp_path, clock)
        p0 = lead(replicas, 0, (1, 2))
        p0.append_as_leader(batch(2), 1)
        follower_fetched(replicas, p0, 2)
        replicas.record_follower_fetch(p0, 3, 2, 0, 2)  # f3 at the log end too
        end = p0.append_as_leader(batch(3), -1).last_offset + 1
        follower_fetched(replicas, p0, 2)
        assert p0.high_watermark == 2  # f3 is caught up: it is waited for
        waiting = await started(replicas.delayed_produce.wait([(p0, end)], timeout_s=60))
        clock.advance(LAG_S + 1)
        replicas.shrink_isrs()
        await asyncio.sleep(0)
        assert waiting.done() and waiting.result() == [ErrorCode.none]
        assert p0.high_watermark == end
        await replicas.stop()

    asyncio.run(scenario())


def _fields(s: PartitionState) -> dict:
    return {name: getattr(s, name) for name in s.__dataclass_fields__}


def test_a_follower_that_catches_up_is_added_through_alter_isr(tmp_path: Path) -> None:
    async def scenario() -> None:
        answered = asyncio.Event()

        async def alter_isr(tp: TopicPartition, proposal: PartitionState) -> PartitionState:
            assert (tp, proposal.isr, proposal.partition_epoch) == (("t", 0), (1, 2), 1)
            answered.set()
            return PartitionState(**{**_fields(proposal), "partition_epoch": 2})

        replicas = manager(tmp_path, FakeClock(), alter_isr)
        p0 = lead(replicas, 0, (1,), (1, 2))
        p0.append_as_leader(batch(2), 1)
        replicas.record_follower_fetch(p0, 2, 0, 0, 2)
        assert not answered.is_set()  # behind the high watermark
        follower_fetched(replicas, p0, 2)
        await answered.wait()
        await asyncio.sleep(0)
        assert (p0.isr, p0.state.partition_epoch) == ((1, 2), 2)
        await replicas.stop()

    asyncio.run(scenario())


def test_one_broker_answers_acks_all_without_waiting(tmp_path: Path) -> None:
    """A single broker's high watermark moves with the append: the request is answered
    on its first check, without a future, a timer or a task."""
    replicas = manager(tmp_path, FakeClock())
    replicas.apply_partition_state(TOPIC, 0, state(1, 0, (1,), (1,)))
    partition = replicas.get("t", 0)
    assert partition is not None
    end = partition.append_as_leader(batch(2), -1).last_offset + 1
    waiting = replicas.delayed_produce.wait([(partition, end)], timeout_s=60)
    with pytest.raises(StopIteration) as answered:
        waiting.send(None)  # no event loop: it must not need one
    assert answered.value.value == [ErrorCode.none]
