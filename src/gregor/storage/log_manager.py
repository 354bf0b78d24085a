"""LogManager: every partition log in a log directory, their loading and checkpoints.

A clean shutdown leaves a marker file; without it the next start recovers each
log from its recovery point (CRC scan, truncation of torn batches, index
rebuild), which is how a ``kill -9`` loses nothing that was acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gregor.config import TopicConfig
from gregor.storage.checkpoint_file import read_checkpoint, write_checkpoint
from gregor.storage.log import ActiveSegmentFlusher, Log, SegmentFlusher, parse_partition_dir

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".gregor_cleanshutdown"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"

TopicPartition = tuple[str, int]
# A periodic checkpoint's contents: recovery points and high watermarks.
_Checkpoint = tuple[dict[TopicPartition, int], dict[TopicPartition, int]]


class LogManager:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.logs: dict[TopicPartition, Log] = {}
        # Given to every log: a broker fsyncs rolled segments, and the active ones when
        # flush.messages or flush.ms ask, off its event loop.
        self.segment_flusher: SegmentFlusher | None = None
        self.active_segment_flusher: ActiveSegmentFlusher | None = None
        # A broker's: writes a checkpoint file off its event loop, after what it was handed
        # before. Without one, moved log start offsets are written at once.
        self.checkpoint_writer: Callable[[Callable[[], None]], asyncio.Future[None]] | None = None
        self._log_starts_written: asyncio.Future[None] | None = None
        # The logs holding records that flush.ms will fsync: the only ones the periodic
        # flush check visits (with thousands of logs, looking at each every second was
        # most of an idle broker's CPU).
        self._timed_flushes: set[Log] = set()
        # The recovery points and high watermarks last written: an idle broker's periodic
        # checkpoint, unchanged, is not formatted and fsynced again.
        self._checkpointed: _Checkpoint | None = None
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        self.had_clean_shutdown = marker.exists()
        # The marker stays only while the broker is stopped cleanly.
        marker.unlink(missing_ok=True)
        self._recovery_points = read_checkpoint(log_dir / RECOVERY_POINT_FILE)
        self._log_starts = read_checkpoint(log_dir / LOG_START_FILE)
        self.high_watermarks = read_checkpoint(log_dir / HIGH_WATERMARK_FILE)

    def partition_dirs(self) -> Iterator[tuple[TopicPartition, Path]]:
        for path in sorted(self.log_dir.iterdir()):
            if path.is_dir():
                parsed = parse_partition_dir(path.name)
                if parsed is not None:
                    yield parsed, path

    def load_logs(self, config_for: Callable[[str], TopicConfig | None]) -> None:
        """Open every partition directory whose topic is known; recover after a dirty stop."""
        started = time.monotonic()
        for tp, path in self.partition_dirs():
            config = config_for(tp[0])
            if config is None:
                log.warning("ignoring %s: its topic is not in the metadata", path.name)
                continue
            self._add(Log(path, tp[0], tp[1], config,
                          recover=not self.had_clean_shutdown,
                          recovery_point=self._recovery_points.get(tp, 0),
                          log_start_offset=self._log_starts.get(tp, 0)))
        previous = ("clean shutdown before" if self.had_clean_shutdown
                    else "unclean shutdown before, recovered" if self.logs else "no logs yet")
        log.info("loaded %d logs in %.2fs (%s)", len(self.logs), time.monotonic() - started,
                 previous)

    def get_or_create(self, topic: str, partition: int, config: TopicConfig) -> Log:
        tp = (topic, partition)
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        return self._add(Log(self.log_dir / f"{topic}-{partition}", topic, partition, config))

    def _add(self, lg: Log) -> Log:
        self.logs[(lg.topic, lg.partition)] = lg
        lg.on_log_start_offset_moved = self._log_start_offset_moved
        lg.on_timed_flush_pending = self._timed_flushes.add
        lg.segment_flusher = self.segment_flusher
        lg.active_segment_flusher = self.active_segment_flusher
        lg.leader_epoch_cache.deferred_writer = self.checkpoint_writer
        return lg

    def _log_start_offset_moved(self, _: Log) -> None:
        """Persist log start offsets now rather than at the next periodic checkpoint:
        records DeleteRecords removed must not come back after a crash. The offsets are
        taken now; a broker writes them on its checkpoint writer (``log_starts_written``
        says when they are on disk)."""
        if self.checkpoint_writer is None:
            self._write_log_start_offsets()
        else:
            self._log_starts_written = self.checkpoint_writer(self._log_start_offsets_writer())

    async def log_starts_written(self) -> None:
        """Wait until every log start offset moved so far is on disk. The writer keeps
        the order it was handed things in, so the last write covers the earlier ones."""
        if self._log_starts_written is not None:
            await self._log_starts_written

    def _log_start_offsets_writer(self) -> Callable[[], None]:
        starts = {tp: lg.log_start_offset for tp, lg in self.logs.items()}
        return lambda: write_checkpoint(self.log_dir / LOG_START_FILE, starts)

    def _write_log_start_offsets(self) -> None:
        self._log_start_offsets_writer()()

    def delete(self, topic: str, partition: int) -> None:
        doomed = self.logs.pop((topic, partition), None)
        if doomed is not None:
            self._timed_flushes.discard(doomed)
            doomed.delete()

    def checkpoint(self, high_watermarks: dict[TopicPartition, int]) -> None:
        """Persist recovery points, log start offsets and high watermarks of every log."""
        self._write_checkpoints(self._checkpoint_of(high_watermarks))
        self._write_log_start_offsets()

    def periodic_checkpoint(self, high_watermarks: dict[TopicPartition, int]
                            ) -> Callable[[], None] | None:
        """Recovery points and high watermarks of this moment, to be written (two fsynced
        files) later on a worker thread, off the broker's event loop; None when they are
        those last written. Log start offsets are not among them: the moves that matter
        (DeleteRecords, a follower restarting its log) are written when they happen, and
        retention's show in the segment files."""
        checkpoint = self._checkpoint_of(high_watermarks)
        if checkpoint == self._checkpointed:
            return None
        return lambda: self._write_checkpoints(checkpoint)

    def _checkpoint_of(self, high_watermarks: dict[TopicPartition, int]) -> _Checkpoint:
        return {tp: lg.recovery_point for tp, lg in self.logs.items()}, high_watermarks

    def _write_checkpoints(self, checkpoint: _Checkpoint) -> None:
        recovery_points, high_watermarks = checkpoint
        write_checkpoint(self.log_dir / RECOVERY_POINT_FILE, recovery_points)
        write_checkpoint(self.log_dir / HIGH_WATERMARK_FILE, high_watermarks)
        self._checkpointed = checkpoint

    def flush_due(self, now_ms: int) -> None:
        """Fsync the logs whose flush.ms has passed since their last flush."""
        for lg in list(self._timed_flushes):
            if not lg.maybe_flush_on_time(now_ms):
                self._timed_flushes.discard(lg)

    def apply_retention(self, now_ms: int, producer_id_expiration_ms: int) -> int:
        """Delete expired segments (return how many) and forget producers idle for
        ``producer_id_expiration_ms``."""
        deleted = 0
        for lg in list(self.logs.values()):
            deleted += lg.delete_expired_segments(now_ms)
            lg.producer_state.remove_expired(now_ms, producer_id_expiration_ms)
        return deleted

    def shutdown(self, high_watermarks: dict[TopicPartition, int], threads: int = 1) -> None:
        """Flush and close every log (on ``threads`` threads: each close waits on its own
        fsyncs, which the disk serves together), checkpoint, and leave the marker."""
        with ThreadPoolExecutor(threads, thread_name_prefix="log-close") as pool:
            for _ in pool.map(Log.close, self.logs.values()):
                pass
        self.checkpoint(high_watermarks)
        (self.log_dir / CLEAN_SHUTDOWN_FILE).touch()

