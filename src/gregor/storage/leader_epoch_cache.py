"""LeaderEpochFileCache: which leader epoch started at which offset, as Kafka keeps it.

A leader answers from it where one of its epochs ended (OffsetForLeaderEpoch, and
Fetch's diverging epoch), and a follower compares that with its own to find where
its log diverges from the leader's and truncate there (KIP-101, KIP-279). On one
node it still records every epoch change, so a broker that joins a cluster later
has it.

Only the epochs a log starts with must be on disk before the log goes on: a crash
after the log start moved (DeleteRecords, retention) and before the file said so
leaves entries below the new start, which loading the log removes again. So those
writes may go to the broker's checkpoint writer, off its event loop, as Kafka's
truncateFromStartAsync does (KAFKA-15046). A new epoch goes there too: an epoch
with records is in their batch headers, which recovery after a crash reads back
into the cache past the recovery point, and one without (a leadership's start)
only matters to that leadership, which a crash ends. Kafka writes those at once,
on a thread of their own; here that was an fsync on the event loop per partition,
and a broker taking the lead of 3,000 partitions at once stopped serving for
half a minute. Truncations at the end are written at once.

For the same reason a new epoch's write is not fsynced (as in Kafka since
KAFKA-15046): the file is fsynced (``sync``) before the recovery point passes the
epoch, which is when recovery would stop reading it back from the batches. With an
fsync each, a first produce to each of 10,000 partitions kept the writer's thread
busy with 10,000 fsyncs, holding up every flush queued behind them.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from pathlib import Path

from gregor.storage.checkpoint_file import fsync_file, write_atomically

CHECKPOINT_FILE = "leader-epoch-checkpoint"
_VERSION = 0


class LeaderEpochFileCache:
    def __init__(self, directory: Path) -> None:
        self.path = directory / CHECKPOINT_FILE
        self.epochs: list[int] = []
        self.start_offsets: list[int] = []
        # Set by a broker's LogManager: runs a write on its worker thread, in order.
        self.deferred_writer: Callable[[Callable[[], None]], object] | None = None
        # Each write carries the version of the contents it renders; a deferred one that
        # runs after a newer write was stored (on the loop, meanwhile) is dropped.
        self._version = 0
        self._stored_version = 0
        self._store_lock = threading.Lock()
        self._deleted = False
        # Written without an fsync since the last one: ``sync`` owes the disk one.
        self._unsynced = False
        self._load()

    def _load(self) -> None:
        try:
            lines = self.path.read_text().split("\n")
        except FileNotFoundError:
            return
        try:
            count = int(lines[1])
            for line in lines[2 : 2 + count]:
                epoch, offset = (int(x) for x in line.split())
                self.epochs.append(epoch)
                self.start_offsets.append(offset)
        except (IndexError, ValueError):
            self.epochs, self.start_offsets = [], []

    def _write(self, deferrable: bool = False, durable: bool = True) -> None:
        """Write the contents of this moment, now or (``deferrable``) on the deferred
        writer if there is one; fsynced unless not ``durable``."""
        body = "".join(f"{e} {o}\n" for e, o in zip(self.epochs, self.start_offsets, strict=True))
        self._version += 1
        version, text = self._version, f"{_VERSION}\n{len(self.epochs)}\n{body}"
        if deferrable and self.deferred_writer is not None:
            self.deferred_writer(lambda: self._store(version, text, durable))
        else:
            self._store(version, text, durable)

    def _store(self, version: int, text: str, durable: bool) -> None:
        with self._store_lock:
            if version < self._stored_version or self._deleted:
                return
            write_atomically(self.path, text, durable=durable)
            self._stored_version = version
            self._unsynced = not durable

    def sync(self) -> None:
        """Fsync what was written without one: the log's recovery point is about to pass
        the epochs it holds."""
        with self._store_lock:
            if self._unsynced and not self._deleted:
                fsync_file(self.path)
                self._unsynced = False

    def forget(self) -> None:
        """The log's directory is about to be removed: a deferred write still to come
        must not put the file back (a topic created again under the name would find
        it). Waits for one being written."""
        with self._store_lock:
            self._deleted = True

    def copy_from(self, other: LeaderEpochFileCache) -> None:
        """Take another log's epochs (a replica moved to another directory: its copy
        has the epochs its batches carry, not those assigned at a log end never
        written after)."""
        self.epochs, self.start_offsets = list(other.epochs), list(other.start_offsets)
        self._write()

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1] if self.epochs else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Note that ``epoch`` begins at ``start_offset``.

        As in Kafka, entries the new one contradicts (an epoch at least as new, or one
        starting at or after it) go first, so the cache stays monotonic in both epoch
        and offset whatever a follower is sent: e.g. an epoch this broker assigned when
        it became leader but never wrote in, and which its new leader does not know.
        Every append calls this; the common case returns on the first comparison.
        """
        if self.epochs and epoch == self.epochs[-1] and start_offset >= self.start_offsets[-1]:
            return
        if epoch < 0:
            return
        keep = len(self.epochs)
        while keep and (self.epochs[keep - 1] >= epoch
                        or self.start_offsets[keep - 1] >= start_offset):
            keep -= 1
        del self.epochs[keep:]
        del self.start_offsets[keep:]
        self.epochs.append(epoch)
        self.start_offsets.append(start_offset)
        self._write(deferrable=True, durable=False)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end offset)`` for OffsetForLeaderEpoch, as Kafka answers it.

        The largest epoch at or below ``epoch`` and the offset where the next one
        began (the log end for the latest); ``(-1, -1)`` for an epoch newer than any
        known, and for an older one ``(epoch, first epoch's start)``.
        """
        if epoch < 0 or not self.epochs:
            return -1, -1
        if epoch == self.epochs[-1]:
            return epoch, log_end_offset
        higher = bisect.bisect_right(self.epochs, epoch)
        if higher == len(self.epochs):
            return -1, -1
        if higher == 0:
            return epoch, self.start_offsets[0]
        return self.epochs[higher - 1], self.start_offsets[higher]

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs that start at or after ``end_offset`` (the log was truncated there)."""
        keep = bisect.bisect_left(self.start_offsets, end_offset)
        if keep < len(self.epochs):
            del self.epochs[keep:]
            del self.start_offsets[keep:]
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly before the new log start, keeping the one covering it;
        written on the deferred writer if there is one (see the module's docstring)."""
        i = bisect.bisect_right(self.start_offsets, start_offset) - 1
        changed = i > 0
        if changed:
            del self.epochs[:i]
            del self.start_offsets[:i]
        if self.start_offsets and self.start_offsets[0] < start_offset:
            self.start_offsets[0] = start_offset
            changed = True
        if changed:
            self._write(deferrable=True)
