"""Fsyncs that would stall the event loop, done on a worker thread instead.

A rolled segment can hold a gigabyte of dirty pages, and its fsync takes as long as the
disk needs to write them: done on the event loop, every client of the broker would wait
for it. Kafka hands the same work to its scheduler (the "flush-log" task after a roll,
and the periodic checkpoints). One worker thread keeps the flushes in roll order, so a
log's recovery point only ever passes segments that are on disk, and keeps checkpoints
from overtaking each other. The same goes for the fsyncs that ``flush.messages`` and
``flush.ms`` ask of the active segment, and for the log start offsets that DeleteRecords
moves: those who must answer after them (a produce, a DeleteRecords) wait for their
future, and the loop serves everyone else meanwhile.

An fsync that fails is an IO error of the segment's log directory: as every IO error
there (KIP-112), it takes the directory offline (``on_storage_error``), not only a line
in the log; a checkpoint write reports its own directory.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gregor.storage.log import Log
from gregor.storage.segment import LogSegment

log = logging.getLogger(__name__)


class LogFlusher:
    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-flusher")
        self._pending: set[asyncio.Future[None]] = set()
        # Work handed over and not yet run, in order, and whether the worker is on it.
        self._queue: collections.deque[tuple[Callable[[], None], asyncio.Future[None]]] = (
            collections.deque())
        self._lock = threading.Lock()
        self._draining = False
        # Told, on the event loop, of a log directory whose fsync failed.
        self.on_storage_error: Callable[[Path, OSError], None] | None = None

    def segment_rolled(self, owner: Log, segment: LogSegment, next_offset: int) -> None:
        """Fsync ``segment`` in the background, then the producer-state snapshot taken as
        it rolled and the log's leader epochs (the recovery point is about to pass them);
        the log hears back on the event loop."""
        future = self._submit(functools.partial(_flush_rolled, owner, segment, next_offset))
        future.add_done_callback(functools.partial(self._flushed, owner, segment, next_offset))
        future.add_done_callback(functools.partial(self._storage_error, segment))

    def segment_due(self, segment: LogSegment) -> asyncio.Future[None]:
        """Fsync the active ``segment`` (flush.messages, flush.ms) on the worker, after
        what came before; done once it is on disk."""
        future = self._reported(self._submit(segment.fsync), "fsync of an active segment")
        future.add_done_callback(functools.partial(self._storage_error, segment))
        return future

    def write(self, action: Callable[[], None]) -> asyncio.Future[None]:
        """Run ``action`` (a checkpoint write) on the worker, after what came before;
        done once it has run."""
        return self._reported(self._submit(action), "checkpoint write")

    async def drain(self) -> None:
        """Wait for every flush and write handed over so far (before the logs close)."""
        await asyncio.gather(*self._pending, return_exceptions=True)

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def _submit(self, action: Callable[[], None]) -> asyncio.Future[None]:
        """Queue ``action`` behind everything handed over before it.

        One queue drained by the worker, not an executor job each: a broker taking the
        lead of thousands of partitions hands over a leader-epoch write for each, and
        an executor job (a concurrent future wrapped in an asyncio one) cost a third of
        the event loop's time applying those leaderships."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._queue.append((action, future))
            start, self._draining = not self._draining, True
        if start:
            self._executor.submit(self._drain, loop)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return future

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the worker: run what is queued, in order, until nothing is."""
        while True:
            with self._lock:
                if not self._queue:
                    self._draining = False
                    return
                action, future = self._queue.popleft()
            error: Exception | None = None
            try:
                action()
            except Exception as exc:
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, future, error)

    def _storage_error(self, segment: LogSegment, future: asyncio.Future[None]) -> None:
        """A failed fsync of ``segment``: its log directory (the parent of its
        partition's) fails."""
        if future.cancelled() or self.on_storage_error is None:
            return
        error = future.exception()
        if isinstance(error, OSError):
            self.on_storage_error(segment.directory.parent, error)

    @staticmethod
    def _reported(future: asyncio.Future[None], what: str) -> asyncio.Future[None]:
        """Log a failure even when nobody awaits the future (a follower's log start
        move, a flush.ms fsync); whoever awaits it gets the error as well."""
        def report(done: asyncio.Future[None]) -> None:
            if not done.cancelled() and done.exception() is not None:
                log.error("%s failed: %s", what, done.exception())

        future.add_done_callback(report)
        return future

    @staticmethod
    def _flushed(owner: Log, segment: LogSegment, next_offset: int,
                 future: asyncio.Future[None]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            # The recovery point stays below the segment: after a crash, recovery checks it.
            log.error("%s: fsync of the segment at offset %d failed: %s",
                      owner.name, segment.base_offset, error)
            return
        owner.segment_flushed(segment, next_offset)


def _flush_rolled(owner: Log, segment: LogSegment, next_offset: int) -> None:
    segment.flush()
    owner.producer_state.fsync_snapshot(next_offset)  # taken as the segment rolled
    owner.leader_epoch_cache.sync()


def _settle(future: asyncio.Future[None], error: Exception | None) -> None:
    if future.done():  # cancelled by whoever waited
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
