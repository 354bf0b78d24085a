"""LogManager: every partition log in the broker's log directories (``log.dirs``, JBOD),
their loading, placement, moves between directories and checkpoints.

Each directory keeps its own checkpoint files and clean-shutdown marker, as Kafka's do,
so that a directory can be lost (a failed disk) or moved without the others. A new
partition goes to the live directory holding the fewest partitions (current and future
ones), unless AlterReplicaLogDirs named one for it first. A replica moving between
directories has a *future* log, ``<topic>-<partition>.<id>-future``, in the destination
until it caught up and replaced the current one (whose directory is renamed
``...-delete`` and removed), as in Kafka. At start a partition found in two directories
is an error: one of them is a leftover the operator must remove (Kafka refuses to start
too).

A clean shutdown leaves a marker file in each directory; without it the next start
recovers each log of that directory from its recovery point (CRC scan, truncation of
torn batches, index rebuild), which is how a ``kill -9`` loses nothing that was
acknowledged.

A directory whose IO fails (a failed or full disk, a directory made unusable) goes
offline (KIP-112): its logs are dropped from memory, never written again, and
``on_dir_failure`` tells the replica manager which partitions it took with it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gregor.config import TopicConfig
from gregor.storage.checkpoint_file import read_checkpoint, write_checkpoint
from gregor.storage.log import ActiveSegmentFlusher, Log, SegmentFlusher, parse_partition_dir

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".gregor_cleanshutdown"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
FUTURE_SUFFIX = "-future"
DELETE_SUFFIX = "-delete"

TopicPartition = tuple[str, int]
# A periodic checkpoint's contents: recovery points and high watermarks.
_Checkpoint = tuple[dict[TopicPartition, int], dict[TopicPartition, int]]


class DuplicateLogError(Exception):
    """A partition is in two log directories: the start stops, as Kafka's does."""


# Told which partitions (current logs, future logs) a failed directory took offline.
DirFailureHandler = Callable[[Path, list[TopicPartition], list[TopicPartition]], None]


@dataclass(slots=True)
class LogDir:
    """One directory of ``log.dirs``, with what its checkpoints said at start."""

    path: Path
    online: bool = True
    had_clean_shutdown: bool = False
    recovery_points: dict[TopicPartition, int] = field(default_factory=dict)
    log_starts: dict[TopicPartition, int] = field(default_factory=dict)


def marked_dir_name(tp: TopicPartition, suffix: str) -> str:
    """Kafka's name for a future or deleted log: ``<topic>-<partition>.<id><suffix>``."""
    return f"{tp[0]}-{tp[1]}.{uuid.uuid4().hex}{suffix}"


def parse_future_dir(name: str) -> TopicPartition | None:
    if not name.endswith(FUTURE_SUFFIX):
        return None
    stem, dot, _ = name[: -len(FUTURE_SUFFIX)].rpartition(".")
    return parse_partition_dir(stem) if dot else None


class LogManager:
    def __init__(self, log_dirs: Path | Iterable[Path]) -> None:
        paths = [log_dirs] if isinstance(log_dirs, Path) else list(log_dirs)
        self.dirs: dict[Path, LogDir] = {}
        for path in paths:
            self.dirs[path.resolve()] = self._open_dir(path.resolve())
        if not any(d.online for d in self.dirs.values()):
            raise OSError(f"no usable log directory among {[str(p) for p in paths]}")
        # The first usable directory holds what is not a partition's (the cleaner's
        # checkpoint).
        self.log_dir = self.online_dirs[0].path
        self.logs: dict[TopicPartition, Log] = {}
        # Replicas moving to another directory (AlterReplicaLogDirs): their copies there.
        self.futures: dict[TopicPartition, Log] = {}
        # Where AlterReplicaLogDirs asked a partition not hosted yet to be created.
        self.preferred_dirs: dict[TopicPartition, Path] = {}
        self.on_dir_failure: DirFailureHandler | None = None
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
        # How many logs (current and future) each directory holds: where a new one goes.
        # Counted as logs come and go: counting them for each new partition made
        # creating 10,000 partitions quadratic (the controller never answered).
        self._placed: collections.Counter[Path] = collections.Counter()
        # The recovery points and high watermarks last written: an idle broker's periodic
        # checkpoint, unchanged, is not formatted and fsynced again.
        self._checkpointed: _Checkpoint | None = None
        self.had_clean_shutdown = all(d.had_clean_shutdown for d in self.online_dirs)
        self.high_watermarks: dict[TopicPartition, int] = {}
        for d in self.online_dirs:
            self.high_watermarks.update(self._read_dir_checkpoint(d, HIGH_WATERMARK_FILE))

    def _open_dir(self, path: Path) -> LogDir:
        """A directory as found at start; one that cannot be made or read is offline
        from the start (Kafka starts without it, unless none is left)."""
        try:
            path.mkdir(parents=True, exist_ok=True)
            marker = path / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            # The marker stays only while the broker is stopped cleanly.
            marker.unlink(missing_ok=True)
            return LogDir(path, True, clean, read_checkpoint(path / RECOVERY_POINT_FILE),
                          read_checkpoint(path / LOG_START_FILE))
        except OSError as exc:
            log.error("log directory %s is unusable and stays offline: %s", path, exc)
            return LogDir(path, online=False)

    @staticmethod
    def _read_dir_checkpoint(d: LogDir, name: str) -> dict[TopicPartition, int]:
        try:
            return read_checkpoint(d.path / name)
        except OSError:
            return {}

    @property
    def online_dirs(self) -> list[LogDir]:
        return [d for d in self.dirs.values() if d.online]

    @property
    def offline_dirs(self) -> list[Path]:
        return [d.path for d in self.dirs.values() if not d.online]

    def dir_of(self, lg: Log) -> Path:
        return lg.directory.parent

    def partition_dirs(self) -> Iterator[tuple[TopicPartition, Path, bool]]:
        """Every partition directory of the live log directories: ``(tp, path,
        is_future)``. Leftovers of a finished move (``-delete``) are removed."""
        for d in self.online_dirs:
            for path in sorted(d.path.iterdir()):
                if not path.is_dir():
                    continue
                if path.name.endswith(DELETE_SUFFIX):
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                future = parse_future_dir(path.name)
                if future is not None:
                    yield future, path, True
                    continue
                parsed = parse_partition_dir(path.name)
                if parsed is not None:
                    yield parsed, path, False

    def load_logs(self, config_for: Callable[[str], TopicConfig | None]) -> None:
        """Open every partition directory whose topic is known; recover after a dirty stop.
        A future log whose current one is gone (a crash in the middle of the swap, after
        the current was renamed away) was caught up: it becomes the current one."""
        started = time.monotonic()
        futures: dict[TopicPartition, Path] = {}
        for tp, path, is_future in self.partition_dirs():
            config = config_for(tp[0])
            if config is None:
                log.warning("ignoring %s: its topic is not in the metadata", path.name)
                continue
            if is_future:
                futures[tp] = path
                continue
            existing = self.logs.get(tp)
            if existing is not None:
                raise DuplicateLogError(
                    f"Duplicate log directories for {tp[0]}-{tp[1]} are found in both "
                    f"{existing.directory} and {path}. It is likely because a log directory "
                    "failed while the broker was replacing a current replica with a future "
                    "one. Remove one of the two directories (the one in the directory that "
                    "failed recently) and start again.")
            self._add(self._open_log(path, tp, config))
        for tp, path in futures.items():
            config = config_for(tp[0])
            assert config is not None
            if tp in self.logs:
                self.futures[tp] = self._setup(self._open_log(path, tp, config))
            else:
                final = path.with_name(f"{tp[0]}-{tp[1]}")
                path.rename(final)
                self._add(self._open_log(final, tp, config))
        previous = ("clean shutdown before" if self.had_clean_shutdown
                    else "unclean shutdown before, recovered" if self.logs else "no logs yet")
        log.info("loaded %d logs in %.2fs (%s)", len(self.logs), time.monotonic() - started,
                 previous)

    def _open_log(self, path: Path, tp: TopicPartition, config: TopicConfig) -> Log:
        d = self.dirs[path.parent]
        return Log(path, tp[0], tp[1], config, recover=not d.had_clean_shutdown,
                   recovery_point=d.recovery_points.get(tp, 0),
                   log_start_offset=d.log_starts.get(tp, 0))

    def next_dir(self, tp: TopicPartition) -> Path:
        """Where a new partition goes: the directory AlterReplicaLogDirs named for it,
        else the live one holding the fewest partitions (current and future)."""
        online = self.online_dirs
        if not online:
            raise OSError("every log directory is offline")
        preferred = self.preferred_dirs.pop(tp, None)
        if preferred is not None and self.dirs[preferred].online:
            return preferred
        return min((d.path for d in online), key=lambda path: self._placed[path])

    def get_or_create(self, topic: str, partition: int, config: TopicConfig) -> Log:
        tp = (topic, partition)
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        path = self.next_dir(tp) / f"{topic}-{partition}"
        try:
            return self._add(Log(path, topic, partition, config))
        except OSError as exc:
            self.dir_failed(path.parent, exc)
            raise

    def _add(self, lg: Log) -> Log:
        self.logs[(lg.topic, lg.partition)] = self._setup(lg)
        return lg

    def _setup(self, lg: Log) -> Log:
        self._placed[self.dir_of(lg)] += 1
        lg.on_log_start_offset_moved = self._log_start_offset_moved
        lg.on_timed_flush_pending = self._timed_flushes.add
        lg.segment_flusher = self.segment_flusher
        lg.active_segment_flusher = self.active_segment_flusher
        lg.leader_epoch_cache.deferred_writer = self.checkpoint_writer
        return lg

    # ------------------------------------------------------------ moving replicas
    def create_future(self, tp: TopicPartition, destination: Path) -> Log:
        """The copy a replica moving to ``destination`` is written into, starting where
        its current log starts."""
        current = self.logs[tp]
        existing = self.futures.get(tp)
        if existing is not None:
            return existing
        current.truncated_to = None  # only truncations from now on concern the copy
        path = destination / marked_dir_name(tp, FUTURE_SUFFIX)
        try:
            future = Log(path, tp[0], tp[1], current.config,
                         log_start_offset=current.log_start_offset)
        except OSError as exc:
            self.dir_failed(destination, exc)
            raise
        self.futures[tp] = self._setup(future)
        log.info("%s: moving from %s to %s", current.name, self.dir_of(current), destination)
        return future

    def abandon_future(self, tp: TopicPartition, delete: bool = True) -> None:
        """Stop a move: the future log is deleted (or only forgotten, when its
        directory failed)."""
        future = self.futures.pop(tp, None)
        if future is None:
            return
        self._placed[self.dir_of(future)] -= 1
        self._timed_flushes.discard(future)
        if delete:
            future.delete()
        else:
            _close_quietly(future)

    def replace_current_with_future(self, tp: TopicPartition) -> Log:
        """The future log caught up (the caller checked, on the loop, with no append in
        between): it becomes the partition's log, as Kafka's replaceCurrentWithFutureLog.
        The current directory is renamed ``-delete`` first, so that a crash in between
        leaves one ``<topic>-<partition>`` at most, and the future is renamed into
        place; the log is opened again there (its files' paths changed), with the
        current log's leader epochs."""
        current, future = self.logs[tp], self.futures.pop(tp)
        self._placed.subtract((self.dir_of(current), self.dir_of(future)))
        self._timed_flushes.difference_update((current, future))
        future.close()
        doomed = current.directory.with_name(marked_dir_name(tp, DELETE_SUFFIX))
        current.directory.rename(doomed)
        final = future.directory.with_name(f"{tp[0]}-{tp[1]}")
        future.directory.rename(final)
        current.leader_epoch_cache.forget()
        for segment in current.segments:
            segment.close()
        shutil.rmtree(doomed, ignore_errors=True)
        moved = Log(final, tp[0], tp[1], current.config, recovery_point=future.recovery_point,
                    log_start_offset=future.log_start_offset)
        # The current log's epochs, with one a leader assigned at its end and has not
        # written in yet (which opening a log drops, and the copy's batches cannot carry).
        moved.leader_epoch_cache.copy_from(current.leader_epoch_cache)
        self._add(moved)
        log.info("%s: now in %s", moved.name, final.parent)
        return moved

    # ------------------------------------------------------------------ failures
    def dir_failed(self, path: Path, exc: BaseException) -> None:
        """An IO error in ``path``: the directory goes offline with every log in it.
        With no directory left the broker cannot serve anything and stops at once, as
        Kafka halts."""
        d = self.dirs.get(path)
        if d is None or not d.online:
            return
        d.online = False
        lost = sorted(tp for tp, lg in self.logs.items() if self.dir_of(lg) == path)
        lost_futures = sorted(tp for tp, lg in self.futures.items() if self.dir_of(lg) == path)
        log.error("log directory %s failed (%s): %d partition(s) and %d move(s) there go "
                  "offline", path, exc, len(lost), len(lost_futures))
        for lg in [*(self.logs.pop(tp) for tp in lost),
                   *(self.futures.pop(tp) for tp in lost_futures)]:
            self._placed[path] -= 1
            self._timed_flushes.discard(lg)
            _close_quietly(lg)
        if not self.online_dirs:
            log.critical("every log directory has failed: stopping")
            os._exit(1)
        if self.on_dir_failure is not None:
            self.on_dir_failure(path, lost, lost_futures)

    def file_failed(self, name: str | bytes | int, exc: BaseException) -> None:
        """An IO error reading a segment file by its name (``<dir>/<topic>-<p>/<file>``,
        the name it was opened with, a later rename notwithstanding): its directory fails."""
        if isinstance(name, str):
            self.dir_failed(Path(name).parent.parent, exc)

    def _report_failure(self, loop: asyncio.AbstractEventLoop | None
                        ) -> Callable[[Path, BaseException], None]:
        """How a write run on a worker thread reports a directory that failed: on the
        loop, where logs are changed."""
        if loop is None:
            return self.dir_failed

        def report(path: Path, exc: BaseException) -> None:
            loop.call_soon_threadsafe(self.dir_failed, path, exc)

        return report

    # --------------------------------------------------------------- checkpoints
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

    def _by_dir(self, values: dict[TopicPartition, int]) -> dict[Path, dict[TopicPartition, int]]:
        """Per live directory, the values of the partitions whose log is there."""
        online = self.online_dirs
        if len(online) == 1 and len(self.dirs) == 1:
            # One directory (most brokers): every log is there, and a checkpoint of
            # thousands of partitions need not make and hash a Path for each.
            return {online[0].path: {tp: v for tp, v in values.items() if tp in self.logs}}
        split: dict[Path, dict[TopicPartition, int]] = {d.path: {} for d in online}
        for tp, value in values.items():
            lg = self.logs.get(tp)
            if lg is not None:
                parent = self.dir_of(lg)
                if parent in split:
                    split[parent][tp] = value
        return split

    def _dir_writer(self, name: str, values: dict[TopicPartition, int]) -> Callable[[], None]:
        split = self._by_dir(values)
        report = self._report_failure(_running_loop())

        def write() -> None:
            for path, part in split.items():
                try:
                    write_checkpoint(path / name, part)
                except OSError as exc:
                    report(path, exc)

        return write

    def _log_start_offsets_writer(self) -> Callable[[], None]:
        return self._dir_writer(LOG_START_FILE,
                                {tp: lg.log_start_offset for tp, lg in self.logs.items()})

    def _write_log_start_offsets(self) -> None:
        self._log_start_offsets_writer()()

    def delete(self, topic: str, partition: int) -> None:
        self.abandon_future((topic, partition))
        doomed = self.logs.pop((topic, partition), None)
        if doomed is not None:
            self._placed[self.dir_of(doomed)] -= 1
            self._timed_flushes.discard(doomed)
            if self.checkpoint_writer is None:
                doomed.delete()
            else:
                self._delete_later(doomed)

    def _delete_later(self, doomed: Log) -> None:
        """Kafka's asyncDelete: the directory is renamed ``-delete`` at once (the
        partition can be created here again, and a restart finishes the removal) and
        removed on the broker's worker thread. Unlinking a segment of a gigabyte waits
        for the disk (this machine's file system discards freed blocks as it goes: about
        a second), and on the event loop every client of the broker waited with it."""
        assert self.checkpoint_writer is not None
        doomed.close_for_removal()
        removed = doomed.directory.with_name(
            marked_dir_name((doomed.topic, doomed.partition), DELETE_SUFFIX))
        try:
            doomed.directory.rename(removed)
        except OSError:  # its directory failed: remove what can be, where it is
            removed = doomed.directory
        self.checkpoint_writer(functools.partial(shutil.rmtree, removed, ignore_errors=True))

    def checkpoint(self, high_watermarks: dict[TopicPartition, int]) -> None:
        """Persist recovery points, log start offsets and high watermarks of every log."""
        self._checkpoint_writer(self._checkpoint_of(high_watermarks))()
        self._write_log_start_offsets()

    def periodic_checkpoint(self, high_watermarks: dict[TopicPartition, int]
                            ) -> Callable[[], None] | None:
        """Recovery points and high watermarks of this moment, to be written (two fsynced
        files per directory) later on a worker thread, off the broker's event loop; None
        when they are those last written. Log start offsets are not among them: the moves
        that matter (DeleteRecords, a follower restarting its log) are written when they
        happen, and retention's show in the segment files. A directory whose write fails
        goes offline."""
        checkpoint = self._checkpoint_of(high_watermarks)
        if checkpoint == self._checkpointed:
            return None
        return self._checkpoint_writer(checkpoint)

    def _checkpoint_of(self, high_watermarks: dict[TopicPartition, int]) -> _Checkpoint:
        return {tp: lg.recovery_point for tp, lg in self.logs.items()}, high_watermarks

    def _checkpoint_writer(self, checkpoint: _Checkpoint) -> Callable[[], None]:
        recovery_points = self._dir_writer(RECOVERY_POINT_FILE, checkpoint[0])
        watermarks = self._dir_writer(HIGH_WATERMARK_FILE, checkpoint[1])

        def write() -> None:
            recovery_points()
            watermarks()
            self._checkpointed = checkpoint

        return write

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
        fsyncs, which the disk serves together), checkpoint, and leave the marker in
        every live directory."""
        with ThreadPoolExecutor(threads, thread_name_prefix="log-close") as pool:
            for _ in pool.map(Log.close, [*self.logs.values(), *self.futures.values()]):
                pass
        self.checkpoint(high_watermarks)
        for d in self.online_dirs:
            with contextlib.suppress(OSError):
                (d.path / CLEAN_SHUTDOWN_FILE).touch()


def _close_quietly(lg: Log) -> None:
    """Close what can be closed of a log whose directory failed: its files may be gone."""
    for segment in lg.segments:
        with contextlib.suppress(OSError):
            segment.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
