"""ZkIsrWrites: leaders' ISR changes written to ZooKeeper together.

A leader changes a partition's ISR when a follower falls behind or catches up.
Those changes come in crowds: a broker that stalls, dies or starts again moves
the ISR of every partition it follows, thousands of them, and a write (and change
node, and a read of that node by every broker) per partition queued the brokers'
ZooKeeper sessions for tens of seconds. As Kafka's AlterPartition request carries
many partitions, the changes that gather while a write is in flight go in the
next one: one multi-op of up to ``znodes.STATE_WRITES_PER_MULTI`` conditioned
state writes and one change node. ZooKeeper refuses a multi-op as a whole when one
of its states changed meanwhile (the controller wrote it): the versions of the
batch's states are then read together, the stale ones answered as refused and the
rest sent again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from gregor.cluster import znodes
from gregor.cluster.partition_state import PartitionState
from gregor.cluster.zookeeper import Op, SetData, TransactionFailed, ZooKeeperSession
from gregor.storage.log_manager import TopicPartition

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class _Pending:
    tp: TopicPartition
    state: PartitionState  # carries the partition epoch the write is conditioned on
    done: asyncio.Future[PartitionState | None]


class ZkIsrWrites:
    def __init__(self, zk: ZooKeeperSession, topic_id: Callable[[str], str]) -> None:
        self.zk = zk
        self._topic_id = topic_id
        self._queue: list[_Pending] = []
        self._writer: asyncio.Task[None] | None = None

    async def write(self, tp: TopicPartition, state: PartitionState) -> PartitionState | None:
        """Write ``tp``'s new ISR if the state it was decided on is still the current
        one, with the change node every broker learns it from.

        Returns the state as written (its partition epoch is the znode's new
        version), or None if anyone wrote since: the leader's view is stale, and the
        metadata cache is about to deliver the newer state.
        """
        done: asyncio.Future[PartitionState | None] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(tp, state, done))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_queued())
        return await done

    async def _write_queued(self) -> None:
        """Write what is queued, in multi-ops sent together; what queues meanwhile goes
        in the next round."""
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                await asyncio.gather(*(self._write_chunk(chunk)
                                       for chunk in znodes.multi_op_batches(batch)))
        finally:
            self._writer = None

    async def _write_chunk(self, chunk: list[_Pending]) -> None:
        """One multi-op writing every state of ``chunk``. Refused, the states' versions
        are read together: those that moved (stale) are answered None and the others
        sent again."""
        try:
            while chunk:
                written = [p.state.with_partition_epoch(p.state.partition_epoch + 1)
                           for p in chunk]
                ops: list[Op] = [SetData(znodes.partition_state_path(*p.tp),
                                         znodes.encode_partition_state(p.state),
                                         p.state.partition_epoch) for p in chunk]
                ops.append(znodes.state_change_node([
                    znodes.StateChange(p.tp[0], self._topic_id(p.tp[0]), p.tp[1], state)
                    for p, state in zip(chunk, written, strict=True)]))
                try:
                    await self.zk.multi(ops)
                except TransactionFailed:
                    versions = await self.zk.versions(
                        [znodes.partition_state_path(*p.tp) for p in chunk])
                    stale = [p for p, v in zip(chunk, versions, strict=True)
                             if v != p.state.partition_epoch]
                    if not stale:
                        raise
                    for refused in stale:
                        topic, index = refused.tp
                        log.info("%s-%d: ISR change to %s refused: partition epoch %d is "
                                 "stale", topic, index, list(refused.state.isr),
                                 refused.state.partition_epoch)
                        _settle(refused.done, None)
                    chunk = [p for p in chunk if not p.done.done()]
                    continue
                for pending, state in zip(chunk, written, strict=True):
                    _settle(pending.done, state)
                if len(chunk) > 1:
                    log.info("wrote the ISR changes of %d partition(s) in one multi-op",
                             len(chunk))
                return
        except Exception as exc:  # ZooKeeper unreachable: each leader retries later
            for pending in chunk:
                if not pending.done.done():
                    pending.done.set_exception(exc)


def _settle(done: asyncio.Future[PartitionState | None], state: PartitionState | None) -> None:
    """Answer a leader still waiting (one stopping has cancelled its wait)."""
    if not done.done():
        done.set_result(state)
