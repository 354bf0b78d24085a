"""Moving replicas between this broker's log directories (AlterReplicaLogDirs), as
Kafka's ReplicaAlterLogDirsThread does: the partition keeps serving from its current
log while a *future* log in the destination copies it, whole batches at a time (read
from the current log's segments, appended as a follower appends: offsets, epochs and
producer state as they are, no record decoded); once the copy reached the current log's
end, the future replaces the current one between two turns of the event loop, so no
append falls in between.

What happens to the current log meanwhile is followed: a truncation (a follower
diverging from its leader) truncates the copy too, a log start moved by retention or
DeleteRecords moves the copy's at the swap.

``replica.alter.log.dirs.io.max.bytes.per.second`` bounds the copying, as in Kafka,
measured as the replication throttles are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from gregor.cluster.partition import Partition
from gregor.cluster.replication_quota import ReplicationQuota
from gregor.storage.log import Log, OffsetOutOfRange
from gregor.storage.log_manager import LogManager, TopicPartition

log = logging.getLogger(__name__)

# What one step copies of one partition before the loop turns (and the next partition's
# step comes): large enough to stream at disk speed, small enough not to hold the loop.
_STEP_BYTES = 4 * 1024 * 1024


class LogDirMoves:
    def __init__(self, log_manager: LogManager,
                 partition: Callable[[TopicPartition], Partition | None],
                 quota: ReplicationQuota) -> None:
        self.log_manager = log_manager
        self._partition = partition
        self.quota = quota
        self._task: asyncio.Task | None = None

    def start(self, tp: TopicPartition, destination: Path) -> None:
        """Begin moving ``tp``'s replica to ``destination`` (or carry on with a move
        found at start)."""
        self.log_manager.create_future(tp, destination)
        self.resume()

    def resume(self) -> None:
        """Copy while futures are behind (a move asked for, or found at start)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def destination(self, tp: TopicPartition) -> Path | None:
        future = self.log_manager.futures.get(tp)
        return None if future is None else self.log_manager.dir_of(future)

    async def _run(self) -> None:
        while self.log_manager.futures:
            held = self.quota.delay_s()
            if held:
                await asyncio.sleep(held)
            for tp in list(self.log_manager.futures):
                try:
                    self._step(tp)
                except OSError as exc:
                    self._failed(tp, exc)
                except Exception:
                    log.exception("%s-%d: moving between log directories failed; the move "
                                  "is dropped", *tp)
                    self.log_manager.abandon_future(tp)
                await asyncio.sleep(0)

    def _step(self, tp: TopicPartition) -> None:
        partition = self._partition(tp)
        future = self.log_manager.futures.get(tp)
        if future is None:
            return
        if partition is None:  # not hosted any more (or its directory failed)
            self.log_manager.abandon_future(tp)
            return
        current = partition.log
        _follow_truncation(current, future)
        try:
            # Under a low throttle, steps no larger than a second's worth.
            region = current.read(future.log_end_offset,
                                  min(_STEP_BYTES, max(1, int(self.quota.bound))))
        except OffsetOutOfRange:
            # Retention or DeleteRecords passed the copy's end: start it over there.
            future.truncate_fully_and_start_at(current.log_start_offset)
            return
        if region is not None:
            data = region.read()
            future.append_as_follower(data)
            self.quota.record(len(data))
            return
        if current.log_start_offset > future.log_start_offset:
            future.advance_log_start_offset(current.log_start_offset)
        partition.log = self.log_manager.replace_current_with_future(tp)

    def _failed(self, tp: TopicPartition, exc: OSError) -> None:
        """An IO error in the source or destination directory: that directory fails."""
        future = self.log_manager.futures.get(tp)
        partition = self._partition(tp)
        for lg in (future, None if partition is None else partition.log):
            if lg is not None and not lg.directory.exists():
                self.log_manager.dir_failed(self.log_manager.dir_of(lg), exc)
                return
        if future is not None:
            self.log_manager.dir_failed(self.log_manager.dir_of(future), exc)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def _follow_truncation(current: Log, future: Log) -> None:
    truncated_to = current.truncated_to
    current.truncated_to = None
    if truncated_to is not None and truncated_to < future.log_end_offset:
        future.truncate_to(truncated_to)
