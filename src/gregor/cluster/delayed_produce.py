"""DelayedProduce: acks=all produce requests waiting for their records to be replicated.

Kafka's delayed-produce purgatory. A request's partitions are answered together:
each one is settled when its high watermark covers the request's records (or
when the partition stops being led here, or when the ISR fell below
min.insync.replicas), and the request completes when all are settled or its
timeout passes, whichever comes first; the rest then answer REQUEST_TIMED_OUT.

A request is checked once when it arrives, by the handler that appended it; only
if something is missing does it get a future and a timer (a loop timer, not a
task), and it is checked again only when one of its partitions changes: its high
watermark or ISR moved, or it changed leader. On one broker every acks=all write
is settled by the first check.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import defaultdict
from collections.abc import Callable, Sequence
from operator import itemgetter

from gregor.cluster.partition import Partition
from gregor.protocol.errors import ErrorCode
from gregor.storage.log_manager import TopicPartition

Lookup = Callable[[TopicPartition], Partition | None]
# A request waiting on a partition: the offset it needs there, the request, its part.
_Watcher = tuple[int, "DelayedProduce", int]
_required = itemgetter(0)


class DelayedProduce:
    """One request: per partition, the offset its high watermark must reach."""

    __slots__ = ("parts", "errors", "unsettled", "future", "timer", "keys")

    def __init__(self, parts: Sequence[tuple[Partition, int]]) -> None:
        self.parts = parts
        self.errors: list[ErrorCode | None] = [None] * len(parts)
        self.unsettled = len(parts)
        # Set only while watched: the answers, the timeout, the partitions watched.
        self.future: asyncio.Future[list[ErrorCode]] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.keys: list[TopicPartition] | None = None

    def try_complete(self, lookup: Lookup) -> bool:
        """Settle what can be settled; True once every partition is."""
        for i in range(len(self.parts)):
            self.settle(i, lookup)
        return self.unsettled == 0

    def settle(self, i: int, lookup: Lookup) -> None:
        """Settle part ``i`` if its partition allows it now."""
        if self.errors[i] is not None:
            return
        partition, required_offset = self.parts[i]
        if lookup((partition.topic, partition.index)) is not partition:
            # Deleted, or moved off this broker and back: not the log written to.
            error: ErrorCode | None = ErrorCode.not_leader_or_follower
        else:
            error = partition.acks_error(required_offset)
        if error is not None:
            self.errors[i] = error
            self.unsettled -= 1

    def result(self) -> list[ErrorCode]:
        return [ErrorCode.request_timed_out if e is None else e for e in self.errors]


class DelayedProducePurgatory:
    def __init__(self, lookup: Lookup) -> None:
        self._lookup = lookup
        # Per partition, the requests waiting on it and which of their parts it is, by
        # the offset each needs the high watermark to reach: a change settles those
        # parts alone, from the lowest offset up to the first still short of it, so a
        # follower's fetch of n partitions costs about n settlements, not n times the
        # size of every request waiting on them (a backlog under load most of all).
        self._watchers: defaultdict[TopicPartition, list[_Watcher]] = defaultdict(list)

    def watch(self, parts: Sequence[tuple[Partition, int]],
              timeout_s: float) -> DelayedProduce:
        """Check an acks=all request now, and if something is missing, watch it until
        all is settled or ``timeout_s`` passed (its ``future`` then holds the answers).

        Checked and watched in one step, by the handler that appended: a high watermark
        moving before the answer is awaited is seen, and the request is checked once.
        The purgatory stops watching by itself (settled, or at the timeout), so an
        answer that is never awaited (its connection closed first) leaves nothing."""
        operation = DelayedProduce(parts)
        if operation.try_complete(self._lookup):
            return operation
        loop = asyncio.get_running_loop()
        operation.future = loop.create_future()
        operation.keys = self._watch(operation)
        operation.timer = loop.call_later(timeout_s, self._finish, operation)
        return operation

    async def answers(self, operation: DelayedProduce) -> list[ErrorCode]:
        """Each partition's answer, in ``parts`` order, once all are settled or the
        timeout passed."""
        future = operation.future
        if future is None:
            return operation.result()
        try:
            return await future
        finally:
            self._finish(operation)  # the request was cancelled (the broker stopping)

    async def wait(self, parts: Sequence[tuple[Partition, int]],
                   timeout_s: float) -> list[ErrorCode]:
        """Each partition's answer to an acks=all request, in ``parts`` order, once all
        are settled or ``timeout_s`` passed."""
        return await self.answers(self.watch(parts, timeout_s))

    def check(self, tp: TopicPartition) -> None:
        """The partition's high watermark, ISR or leadership changed: settle what waits on it."""
        watching = self._watchers.get(tp)
        if not watching:
            return
        for _, operation, i in list(watching):
            if operation.keys is None:
                continue  # finished by an earlier entry of this loop
            operation.settle(i, self._lookup)
            if operation.errors[i] is None:
                # Short of the high watermark, and so is every one after it, which needs
                # as much or more; an error for the partition would have settled it.
                break
            if operation.unsettled == 0:
                self._finish(operation)

    def watched(self, tp: TopicPartition) -> int:
        """How many requests wait on ``tp``."""
        return len(self._watchers.get(tp, ()))

    def _finish(self, operation: DelayedProduce) -> None:
        """Settled, timed out or abandoned: stop watching and answer (once)."""
        keys = operation.keys
        if keys is None:
            return
        operation.keys = None
        if operation.timer is not None:
            operation.timer.cancel()
        self._unwatch(operation, keys)
        future = operation.future
        if future is not None and not future.done():
            future.set_result(operation.result())

    def _watch(self, operation: DelayedProduce) -> list[TopicPartition]:
        """Watch each unsettled part's partition; the partitions watched."""
        keys = []
        for i, ((partition, required), error) in enumerate(zip(operation.parts,
                                                               operation.errors, strict=True)):
            if error is None:
                key = (partition.topic, partition.index)
                watching = self._watchers[key]
                if watching and watching[-1][0] > required:
                    # Behind a later offset: a duplicate's earlier batch, a retry.
                    bisect.insort(watching, (required, operation, i), key=_required)
                else:
                    watching.append((required, operation, i))  # appended last: the rule
                keys.append(key)
        return keys

    def _unwatch(self, operation: DelayedProduce, keys: list[TopicPartition]) -> None:
        for key in dict.fromkeys(keys):
            watching = self._watchers.get(key)
            if watching is None:
                continue
            watching[:] = [entry for entry in watching if entry[1] is not operation]
            if not watching:
                del self._watchers[key]
