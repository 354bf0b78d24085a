"""Log: one partition's ordered segments, offsets, appends, reads and truncation.

Appends and reads work on whole record batches: a batch's header is validated
and its CRC32C checked, offsets are assigned by patching the header, and the
bytes are written as they came. Individual records are only decoded when a
compacted topic must check for keys.

Transactions are followed from batch headers too: a transactional batch opens
its producer's transaction (which holds back the last stable offset), a control
batch (a marker, written by the transaction coordinator) ends it, and an abort
marker adds the transaction to its segment's aborted-transaction index.
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gregor.config import TopicConfig
from gregor.protocol import control_record, record_batch
from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_batch import InvalidRecordBatch
from gregor.protocol.record_codec import decode_records
from gregor.storage.leader_epoch_cache import LeaderEpochFileCache
from gregor.storage.producer_state import (
    BatchMetadata,
    ProducerStateError,
    ProducerStateManager,
    in_sequence,
)
from gregor.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    FileRegion,
    LogSegment,
)
from gregor.storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn

log = logging.getLogger(__name__)

_MAX_RELATIVE_OFFSET = 2**31 - 1


SegmentFlusher = Callable[["Log", LogSegment, int], None]
"""Takes a rolled segment (and the offset after it) to fsync off the caller's thread; it
calls the log's ``segment_flushed`` back on the log's own thread once the data is on disk."""

ActiveSegmentFlusher = Callable[[LogSegment], "asyncio.Future[None]"]
"""Takes the active segment, due for an fsync (flush.messages, flush.ms), to fsync off
the caller's thread after the segments and checkpoints handed over before it; the
future completes once the data is on disk."""


class LogAppendError(Exception):
    """An append rejected with a Kafka error code; nothing of it was written.

    ``record_errors`` names the records at fault, when some are (Produce v8's
    ``record_errors``, KIP-467): each one's index in its batch and why, so that a client
    fails those records and retries or fails the rest apart."""

    def __init__(self, error: ErrorCode, message: str,
                 record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.error = error
        self.record_errors = record_errors


class OffsetOutOfRange(Exception):
    def __init__(self, offset: int, log_start: int, log_end: int) -> None:
        super().__init__(f"offset {offset} is outside [{log_start}, {log_end}]")
        self.offset = offset


class AppendOrigin(enum.Enum):
    """Who appends, which decides the batches allowed (Kafka's AppendOrigin)."""

    CLIENT = enum.auto()  # a producer without a transactional id
    TRANSACTIONAL_CLIENT = enum.auto()  # a produce request naming a transactional id
    COORDINATOR = enum.auto()  # the transaction coordinator writing markers


@dataclass(frozen=True, slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time: int
    record_count: int
    duplicate: bool = False


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``<topic>-<partition>`` to ``(topic, partition)``; None for other directories."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


class Log:
    def __init__(self, directory: Path, topic: str, partition: int, config: TopicConfig,
                 *, recover: bool = False, recovery_point: int = 0,
                 log_start_offset: int = 0) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        try:
            directory.mkdir(parents=True)
            fresh = True
        except FileExistsError:
            fresh = False
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.producer_state = ProducerStateManager(directory)
        self.leader_epoch_cache = LeaderEpochFileCache(directory)
        self.recovery_point = recovery_point
        # Set by the LogManager to persist a moved log start offset at once.
        self.on_log_start_offset_moved: Callable[[Log], None] | None = None
        # Set by the LogManager when a broker fsyncs rolled segments in the background;
        # without one a roll fsyncs the segment it closes before returning.
        self.segment_flusher: SegmentFlusher | None = None
        # Likewise for the active segment's fsyncs that flush.messages and flush.ms ask
        # for; the last one handed over is what an append that made it due must wait for.
        self.active_segment_flusher: ActiveSegmentFlusher | None = None
        self.pending_flush: asyncio.Future[None] | None = None
        # The lowest log end a truncation left since a replica mover last looked (its
        # copy in another directory must drop what this log dropped); None if none.
        self.truncated_to: int | None = None
        self._last_flush_ms = int(time.time() * 1000)
        # Set by the LogManager: told whenever records that flush.ms will have to fsync
        # are appended, so that its periodic check visits only logs holding such records
        # rather than every log of the broker.
        self.on_timed_flush_pending: Callable[[Log], None] | None = None
        if fresh:
            # A directory made just now holds nothing to load, repair or replay: a
            # broker given thousands of new partitions at once (a topic created, a
            # follower added) opens each in a fraction of a full load's cost.
            self.segments.append(self._new_segment(log_start_offset))
            self._bases = [log_start_offset]
            self.log_start_offset = log_start_offset
            return
        self._load_segments(recover, log_start_offset)
        # The checkpoint may lag segment deletions (retention) or, after losing an
        # unsynced tail, lead the log end.
        self.log_start_offset = min(max(log_start_offset, self.segments[0].base_offset),
                                    self.log_end_offset)
        # Its checkpoint may lag a moved log start (written after the move, off the loop).
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self._rebuild_producer_state()

    # ------------------------------------------------------------------ loading
    def _new_segment(self, base_offset: int, suffix: str = "") -> LogSegment:
        return LogSegment(self.directory, base_offset,
                          index_interval_bytes=self.config["index.interval.bytes"],
                          max_index_size=self.config["segment.index.bytes"], suffix=suffix)

    def _load_segments(self, recover: bool, log_start_offset: int) -> None:
        # One listing of the directory serves every check below: a broker restarting
        # with 10,000 logs spent a quarter of its load in nine globs a log.
        names = os.listdir(self.directory)
        for name in names:
            if name.endswith((CLEANED_SUFFIX, ".tmp")):
                (self.directory / name).unlink()
        if any(name.endswith(SWAP_SUFFIX) for name in names):
            self._complete_swaps()
            names = os.listdir(self.directory)
        self._delete_orphan_indexes(names)
        bases = sorted(int(name[: -len(LOG_SUFFIX)]) for name in names
                       if name.endswith(LOG_SUFFIX) and name[: -len(LOG_SUFFIX)].isdigit())
        for base in bases:
            segment = self._new_segment(base)
            # Segments below the recovery point were fsynced before a clean point was
            # recorded; anything after it may hold a torn write.
            must_recover = recover and segment_may_be_dirty(base, bases, self.recovery_point)
            truncated = segment.load(recover=must_recover)
            if truncated:
                log.warning("%s-%d: removed %d bytes of torn or corrupt data from %s",
                            self.topic, self.partition, truncated, segment.log_path.name)
            if self.segments and segment.base_offset < self.segments[-1].next_offset:
                raise InvalidRecordBatch(f"segment {segment.log_path} overlaps its predecessor")
            self.segments.append(segment)
            # After a torn batch, later segments cannot be trusted to follow on.
            if truncated and base != bases[-1]:
                for later in bases[bases.index(base) + 1:]:
                    log.warning("%s-%d: deleting segment %d after a truncated one",
                                self.topic, self.partition, later)
                    orphan = self._new_segment(later)
                    orphan.delete()
                    orphan.close()
                break
        if not self.segments:
            self.segments.append(self._new_segment(log_start_offset))
        self._bases = [s.base_offset for s in self.segments]
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self._restore_leader_epochs(recover)

    def _restore_leader_epochs(self, recovered: bool) -> None:
        """Add epochs the checkpoint missed from the batch headers, as Kafka's recovery does.

        The checkpoint is written after the batch that starts an epoch, so a crash in
        between leaves an epoch only the log knows; without the checkpoint (lost, or
        a log older than it) every segment is read. Followers and OffsetForLeaderEpoch
        trust this cache to truncate by epoch, never by high watermark (KIP-101).
        """
        cache = self.leader_epoch_cache
        if cache.path.exists():
            if not recovered:
                return
            start = self._segment_index(self.recovery_point)
        else:
            start = 0
        try:
            for segment in self.segments[start:]:
                for _, header in segment.iter_batches():
                    if header.partition_leader_epoch > cache.latest_epoch:
                        cache.assign(header.partition_leader_epoch, header.base_offset)
        except InvalidRecordBatch as exc:
            log.warning("%s: leader epochs read up to a bad batch header: %s", self.name, exc)

    def _delete_orphan_indexes(self, names: list[str]) -> None:
        """Remove index files whose log is gone (a crash while deleting a segment);
        ``names`` lists the directory."""
        logs = {name for name in names if name.endswith(LOG_SUFFIX)}
        for name in names:
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                if name.endswith(suffix) and name[: -len(suffix)] + LOG_SUFFIX not in logs:
                    (self.directory / name).unlink()

    def _complete_swaps(self) -> None:
        """Finish a compaction swap interrupted by a crash.

        A ``.log.swap`` file is the swap's commit point (the cleaned data was fsynced
        before it got that name). The segments it replaces are those whose base offset
        falls in its offset range -- the cleaner keeps the last offset of every group
        it rewrites -- so whatever is left of them is deleted. Its indexes are rebuilt
        from the log, as the crash may have come before they were renamed.
        """
        for swap in sorted(self.directory.glob("*" + LOG_SUFFIX + SWAP_SUFFIX)):
            segment = self._new_segment(int(swap.name.split(".")[0]), SWAP_SUFFIX)
            segment.recover()
            segment.flush()
            for path in self.directory.iterdir():
                stem, dot, suffix = path.name.partition(".")
                if (stem.isdigit() and "." + suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX,
                                                        TXN_INDEX_SUFFIX)
                        and segment.base_offset <= int(stem) < segment.next_offset):
                    path.unlink()
            segment.rename_suffix(SWAP_SUFFIX, "")
            segment.close()
        # Index files whose log already lost its .swap suffix: rebuilt on load instead.
        for leftover in self.directory.glob("*" + SWAP_SUFFIX):
            leftover.unlink()

    def _rebuild_producer_state(self) -> None:
        """Load the newest snapshot and replay batch headers written after it."""
        start = self.producer_state.load_snapshot(self.log_end_offset)
        start = max(start, self.log_start_offset)
        for segment in self.segments[self._segment_index(start):]:
            for position, header in segment.iter_batches():
                if header.last_offset < start:
                    continue
                if header.producer_id >= 0:
                    control = (os.pread(segment.fd, header.size, position)
                               if header.is_control else None)
                    self._update_producer(segment, header, header.base_offset,
                                          header.last_offset, control)
        # A snapshot may predate a log start offset that has moved since.
        self.producer_state.remove_before(self.log_start_offset)

    # --------------------------------------------------------------- properties
    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.next_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    # ---------------------------------------------------------------- appending
    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int,
                         now_ms: int | None = None,
                         origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:
        """Validate, stamp offsets on and append the batches of a produce request.

        Offsets are stamped into ``records`` itself when it is writable (the request's
        own receive buffer): a copy of a megabyte costs fresh pages on every request."""
        data: bytearray | memoryview
        if isinstance(records, bytearray) or (isinstance(records, memoryview)
                                              and not records.readonly):
            data = records
        else:
            data = bytearray(records)
        try:
            spans = record_batch.split_batches(data)
        except InvalidRecordBatch as exc:
            raise LogAppendError(ErrorCode.corrupt_message, str(exc)) from None
        if not spans:
            raise LogAppendError(ErrorCode.invalid_record, "empty record set")
        max_batch = self.config["max.message.bytes"]
        headers = []
        for pos, size in spans:
            if size > max_batch:
                raise LogAppendError(ErrorCode.message_too_large,
                                     f"batch of {size} bytes exceeds max.message.bytes {max_batch}")
            try:
                header = record_batch.validate_batch(data, pos)
            except record_batch.CorruptRecordBatch as exc:
                raise LogAppendError(ErrorCode.corrupt_message, str(exc)) from None
            except InvalidRecordBatch as exc:
                raise LogAppendError(ErrorCode.invalid_record, str(exc)) from None
            if header.is_control != (origin is AppendOrigin.COORDINATOR):
                # Only the transaction coordinator ends transactions, with one marker.
                raise LogAppendError(ErrorCode.invalid_record,
                                     "control batches are written by the broker only")
            if header.is_transactional and origin is AppendOrigin.CLIENT:
                raise LogAppendError(ErrorCode.invalid_record,
                                     "a transactional batch needs a produce request "
                                     "naming its transactional id")
            if header.records_count <= 0 or header.records_count != header.last_offset_delta + 1:
                # Offsets are assigned from lastOffsetDelta without reading the records,
                # so a batch must cover exactly as many offsets as it holds records.
                raise LogAppendError(ErrorCode.invalid_record,
                                     f"batch holds {header.records_count} records but spans "
                                     f"{header.last_offset_delta + 1} offsets")
            headers.append(header)
        if self.config.compacted:
            self._check_keys(data, spans)
        duplicate = self._check_producers(headers)
        if duplicate is not None:
            return AppendResult(duplicate.first_offset, duplicate.last_offset, -1,
                                duplicate.last_offset - duplicate.first_offset + 1, duplicate=True)

        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        log_append_time = now_ms if self.config.log_append_time else -1
        first_offset = next_offset = self.log_end_offset
        placed = []
        for (pos, size), header in zip(spans, headers, strict=True):
            record_batch.patch_offsets(data, pos, next_offset, leader_epoch)
            max_timestamp = header.max_timestamp
            if log_append_time >= 0:
                record_batch.patch_log_append_time(data, pos, size, log_append_time)
                max_timestamp = log_append_time
            last = next_offset + header.last_offset_delta
            placed.append((pos, size, next_offset, last, max_timestamp))
            next_offset = last + 1

        incoming_max_timestamp = max(batch[4] for batch in placed)
        segment = self._maybe_roll(len(data), next_offset - 1, incoming_max_timestamp, now_ms)
        segment.append(data, placed)
        for header, (pos, size, base, last, _) in zip(headers, placed, strict=True):
            if header.producer_id >= 0:
                self._update_producer(segment, header, base, last,
                                      _control_batch(data, header, pos, size))
        self.leader_epoch_cache.assign(leader_epoch, first_offset)
        self._appended(segment)
        return AppendResult(first_offset, next_offset - 1, log_append_time,
                            next_offset - first_offset)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> int:
        """Append batches fetched from the leader exactly as the leader stored them.

        Offsets and leader epochs are the leader's; each batch's CRC is checked (a
        replica never stores what it cannot serve) and the batches must continue
        this log without a gap. A last batch the leader's byte budget cut is left for
        the next fetch, as Kafka's follower leaves it. Returns the number of bytes
        appended. ``records`` may view a buffer its caller reuses afterwards: nothing
        of it is kept.
        """
        try:
            spans = record_batch.split_batches(records, cut_tail=True)
        except InvalidRecordBatch as exc:
            raise LogAppendError(ErrorCode.corrupt_message, str(exc)) from None
        data = records
        if spans and sum(spans[-1]) < len(records):
            data = memoryview(records)[: sum(spans[-1])]
        placed: list[tuple[int, int, int, int, int]] = []
        headers = []
        expected = self.log_end_offset
        for pos, size in spans:
            try:
                header = record_batch.validate_batch(data, pos)
            except InvalidRecordBatch as exc:
                raise LogAppendError(ErrorCode.corrupt_message, str(exc)) from None
            if (not placed and header.base_offset < expected <= header.last_offset
                    and expected == self.log_start_offset == self.active_segment.base_offset
                    and self.active_segment.size == 0):
                # The leader's log start (DeleteRecords) falls inside its first batch,
                # and this log, empty, starts there: start it at the batch instead, as
                # Kafka does; the leader's log start offset is applied afterwards.
                self.truncate_fully_and_start_at(header.base_offset)
                expected = header.base_offset
            if header.base_offset < expected:
                # Compaction leaves offset gaps but never goes backwards.
                raise LogAppendError(ErrorCode.offset_out_of_range,
                                     f"{self.name}: fetched batch at {header.base_offset} is "
                                     f"below the log end {expected}")
            placed.append((pos, size, header.base_offset, header.last_offset,
                           header.max_timestamp))
            headers.append(header)
            expected = header.next_offset
        if not placed:
            return 0
        now_ms = int(time.time() * 1000)
        segment = self._maybe_roll(len(data), placed[-1][3],
                                   max(batch[4] for batch in placed), now_ms)
        if segment.size == 0 and segment.base_offset != placed[0][2]:
            # A new segment is named by its first offset, which a gap may have moved.
            segment = self._restart_active_segment_at(placed[0][2])
        segment.append(data, placed)
        for header, (pos, size, _, _, _) in zip(headers, placed, strict=True):
            if header.producer_id >= 0:
                self._update_producer(segment, header, header.base_offset, header.last_offset,
                                      _control_batch(data, header, pos, size))
            self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        self._appended(segment)
        return len(data)

    def _update_producer(self, segment: LogSegment, header: record_batch.BatchHeader,
                         base: int, last: int,
                         batch: bytes | bytearray | memoryview | None) -> None:
        """Record an appended (or replayed) batch of a producer; ``batch`` is read for
        markers only, to tell a commit from an abort."""
        transactions = self.producer_state.transactions
        if header.is_control:
            assert batch is not None
            commit, coordinator_epoch = control_record.read_marker(batch)
            self.producer_state.update(header, base, last, coordinator_epoch)
            ended = transactions.complete(header.producer_id, base)
            if ended is not None and not commit:
                segment.txn_index.append(ended)
            return
        self.producer_state.update(header, base, last)
        if header.is_transactional:
            transactions.begin(header.producer_id, base)

    def _restart_active_segment_at(self, offset: int) -> LogSegment:
        """Replace the empty active segment by one that starts at ``offset``."""
        self._drop_segment(self.segments.pop())
        self._bases.pop()
        segment = self._new_segment(offset)
        self.segments.append(segment)
        self._bases.append(offset)
        return segment

    def _check_keys(self, data: bytearray | memoryview, spans: list[tuple[int, int]]) -> None:
        """Compacted topics keep the latest record per key, so a keyless record is refused,
        named by its index in its batch, in Kafka's words."""
        keyless: list[tuple[int, str]] = []
        for pos, size in spans:
            try:
                _, records = decode_records(memoryview(data)[pos : pos + size])
            except InvalidRecordBatch as exc:  # records that do not parse under a valid CRC
                raise LogAppendError(ErrorCode.corrupt_message, str(exc)) from None
            keyless += [(index, "Compacted topic cannot accept message without key in topic "
                         f"partition {self.topic}-{self.partition}.")
                        for index, record in enumerate(records) if record.key is None]
        if keyless:
            raise LogAppendError(
                ErrorCode.invalid_record,
                f"One or more records have been rejected due to {len(keyless)} record errors "
                f"in total: compacted topic {self.topic} requires a key on every record",
                tuple(keyless))

    def _check_producers(self, headers: list[record_batch.BatchHeader]) -> BatchMetadata | None:
        """Validate producer epochs and sequences; the earlier batch if this is a retry.

        A producer's later batches in the same append continue from its earlier ones,
        which are not in the producer state yet.
        """
        duplicate = None
        pending: dict[int, record_batch.BatchHeader] = {}
        for header in headers:
            if header.producer_id < 0:
                continue
            earlier = pending.get(header.producer_id)
            pending[header.producer_id] = header
            if earlier is not None:
                if (header.producer_epoch != earlier.producer_epoch
                        or not in_sequence(earlier.last_sequence, header.base_sequence)):
                    raise LogAppendError(ErrorCode.out_of_order_sequence_number,
                                         f"producer {header.producer_id} batches of one append "
                                         "are not in sequence")
                continue
            try:
                found = self.producer_state.check(header)
            except ProducerStateError as exc:
                raise LogAppendError(exc.error, str(exc)) from None
            if found is not None:
                if len(headers) > 1:
                    raise LogAppendError(ErrorCode.duplicate_sequence_number,
                                         "duplicate batch inside a multi-batch append")
                duplicate = found
        return duplicate

    def _maybe_roll(self, incoming: int, last_offset: int, incoming_max_timestamp: int,
                    now_ms: int) -> LogSegment:
        """The segment to append to: a new one if the active one is full or old (Kafka's
        shouldRoll: segment.bytes, segment.ms, a full index, or offsets beyond what a
        relative offset can hold)."""
        segment = self.active_segment
        if segment.size == 0:
            return segment
        if (segment.size + incoming > self.config["segment.bytes"]
                or segment.offset_index.is_full or segment.time_index.is_full
                or last_offset - segment.base_offset > _MAX_RELATIVE_OFFSET
                or segment.should_roll_on_time(incoming_max_timestamp, now_ms,
                                               self.config["segment.ms"])):
            return self.roll()
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end; fsync the one being closed."""
        old = self.active_segment
        if old.size == 0:
            return old
        new = self._new_segment(self.log_end_offset)
        self.segments.append(new)
        self._bases.append(new.base_offset)
        if self.segment_flusher is None:
            old.on_become_inactive()
            self.leader_epoch_cache.sync()
            self.recovery_point = new.base_offset
            self.producer_state.take_snapshot(new.base_offset)
        else:
            # Kafka's roll: the snapshot's fsync is left to the old segment's background
            # flush, which does it before the recovery point passes. On this thread it
            # waited for the device's whole cache flush (0.5 s with gigabytes dirty).
            self.producer_state.take_snapshot(new.base_offset, durable=False)
            self.segment_flusher(self, old, new.base_offset)
        log.info("%s: rolled new segment at offset %d", self.name, new.base_offset)
        return new

    def segment_flushed(self, segment: LogSegment, next_offset: int) -> None:
        """A rolled segment is on disk (fsynced in the background): release its index
        writers, and let the recovery point pass it unless the log changed under it
        meanwhile (a truncation into it made it active again or removed it). Flushes
        complete in the order the segments rolled, so every segment below is on disk."""
        segment.release_index_writers()
        if (any(s is segment for s in self.segments) and segment is not self.active_segment
                and next_offset <= self.log_end_offset):
            self.recovery_point = max(self.recovery_point, next_offset)

    def flush(self) -> None:
        self.active_segment.flush()
        self.leader_epoch_cache.sync()
        self.recovery_point = self.log_end_offset
        self._last_flush_ms = int(time.time() * 1000)

    def _appended(self, segment: LogSegment) -> None:
        """What an append may make due: an fsync now (flush.messages), or one when
        flush.ms has passed, which the LogManager is told about."""
        if segment.unflushed_messages >= self.config["flush.messages"]:
            self._flush_due()
        else:
            self._timed_flush_pending()

    def _timed_flush_pending(self) -> None:
        if (self.on_timed_flush_pending is not None and self.config.flushes_on_time
                and self.active_segment.unflushed_messages):
            self.on_timed_flush_pending(self)

    def maybe_flush_on_time(self, now_ms: int) -> bool:
        """Fsync the active segment if flush.ms has passed since the last flush; whether
        records are still waiting for a timed flush."""
        if not self.config.flushes_on_time:
            return False
        if (self.active_segment.unflushed_messages
                and now_ms - self._last_flush_ms >= self.config["flush.ms"]):
            self._flush_due()
        return bool(self.active_segment.unflushed_messages)

    def _flush_due(self) -> None:
        """flush.messages or flush.ms asks for an fsync of the active segment: handed to
        the broker's flusher when there is one (whoever must answer after it waits for
        ``pending_flush``), else done here. The recovery point stays then: after a crash
        the active segment is recovered whatever it says, and the roll that ends the
        segment moves it once the segment is on disk."""
        if self.active_segment_flusher is None:
            self.flush()
            return
        segment = self.active_segment
        segment.unflushed_messages = 0
        self._last_flush_ms = int(time.time() * 1000)
        self.pending_flush = self.active_segment_flusher(segment)

    # ------------------------------------------------------------------ reading
    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> FileRegion | None:
        """Bytes of whole batches from the one holding ``offset``, below ``max_offset``.

        ``max_offset`` is the high watermark for consumers; data beyond it is not
        yet committed and is never returned to them.
        """
        end_offset = self.log_end_offset
        if offset < self.log_start_offset or offset > end_offset:
            raise OffsetOutOfRange(offset, self.log_start_offset, end_offset)
        limit = end_offset if max_offset is None else min(max_offset, end_offset)
        if offset >= limit:
            return None
        i = self._segment_index(offset)
        while i < len(self.segments):
            segment = self.segments[i]
            if segment.base_offset >= limit:
                return None
            max_position = None
            if limit < segment.next_offset:
                max_position = segment.position_of(limit)
            region = segment.read(offset, max_bytes, max_position, min_one_batch)
            if region is not None:
                return region
            i += 1
            if i < len(self.segments):
                offset = self.segments[i].base_offset
        return None

    @property
    def first_unstable_offset(self) -> int | None:
        """Where the oldest open transaction begins, None when none is open; never below
        the log start offset (retention or DeleteRecords may have passed it), as in
        Kafka, or read_committed readers would wait below what they can read."""
        first = self.producer_state.transactions.first_unstable_offset
        return None if first is None else max(first, self.log_start_offset)

    def last_stable_offset(self, high_watermark: int) -> int:
        """What read_committed consumers may read up to: the high watermark, held back
        to the first offset of the oldest open transaction."""
        first_unstable = self.first_unstable_offset
        return high_watermark if first_unstable is None else min(first_unstable, high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Transactions aborted in ``[fetch_offset, upper_bound)``: sent with a
        read_committed fetch so the consumer drops their records itself.

        Each abort is indexed in the segment of its marker, which is never before the
        segment of the fetch offset; the search stops at the first entry whose last
        stable offset shows every earlier transaction ended by the upper bound.
        """
        found: list[AbortedTxn] = []
        for segment in self.segments[self._segment_index(fetch_offset):]:
            if segment.txn_index.collect(fetch_offset, upper_bound, found):
                break
        return found

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``timestamp`` (ListOffsets).

        Every segment whose max timestamp qualifies is searched in turn: one may hold
        no qualifying record at or above the log start offset.
        """
        for segment in self.segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= self.log_start_offset:
                continue
            found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return found
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the record with the largest timestamp (ListOffsets -3)."""
        largest = max(segment.max_timestamp for segment in self.segments)
        return None if largest < 0 else self.offset_for_timestamp(largest)

    # ------------------------------------------------------- truncation/retention
    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after ``offset`` (a follower diverging from its leader).

        Whole batches only: a batch holding ``offset`` goes entirely. Even when no
        record goes, an epoch starting at the log end goes, as in Kafka: one this
        broker assigned when it became leader and never wrote in, which its new
        leader may not know (else the follower would keep sending it as its last
        fetched epoch).
        """
        if offset >= self.log_end_offset:
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        while len(self.segments) > 1 and self.active_segment.base_offset >= offset:
            self._drop_segment(self.segments.pop())
            self._bases.pop()
        self.active_segment.truncate_to(offset)
        self._after_tail_removed()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log, empty, at ``offset``.

        What a follower does when its leader's log starts beyond its own end.
        """
        for segment in self.segments:
            self._drop_segment(segment)
        self.segments = [self._new_segment(offset)]
        self._bases = [offset]
        self.log_start_offset = offset
        # Nothing of the old log remains to describe: no epochs, no producer snapshots.
        self.leader_epoch_cache.truncate_from_end(0)
        self.producer_state.truncate_snapshots_after(-1)
        self._after_tail_removed()
        self._log_start_offset_moved()

    def _after_tail_removed(self) -> None:
        end = self.log_end_offset
        self.truncated_to = end if self.truncated_to is None else min(self.truncated_to, end)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.producer_state.truncate_snapshots_after(self.log_end_offset)
        self._rebuild_producer_state()
        self.recovery_point = min(self.recovery_point, self.log_end_offset)

    @staticmethod
    def _drop_segment(segment: LogSegment) -> None:
        segment.delete()
        segment.close()

    def advance_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset forward (DeleteRecords); segments below it are dropped.

        The new log start offset is persisted before this returns, so records a
        client was told are deleted stay deleted across a crash.
        """
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = min(offset, self.log_end_offset)

        def below_log_start(segment: LogSegment, following: LogSegment | None) -> bool:
            end = segment.next_offset if following is None else following.base_offset
            return end <= self.log_start_offset

        self._delete_old_segments(below_log_start)
        self._after_head_removed()
        self._log_start_offset_moved()
        return True

    def delete_expired_segments(self, now_ms: int) -> int:
        """Apply retention.ms and retention.bytes; return how many segments were deleted.

        As in Kafka, only whole segments go, oldest first: by retention.ms those whose
        largest timestamp is older, then by retention.bytes as many as keep the log
        within it. The active segment counts too (a new empty one is rolled first),
        so an idle topic still ages out.
        """
        if not self.config.deletes:
            return 0
        deleted = 0
        retention_ms = self.config["retention.ms"]
        if retention_ms >= 0:
            deleted += self._delete_old_segments(
                lambda segment, _: now_ms - segment.largest_timestamp > retention_ms)
        retention_bytes = self.config["retention.bytes"]
        if retention_bytes >= 0 and self.size > retention_bytes:
            excess = self.size - retention_bytes

            def beyond_size(segment: LogSegment, _: LogSegment | None) -> bool:
                nonlocal excess
                if excess < segment.size:
                    return False
                excess -= segment.size
                return True

            deleted += self._delete_old_segments(beyond_size)
        if deleted:
            # No checkpoint needed: the segment files are gone, and a reopened log
            # starts at least at its first segment.
            self._after_head_removed()
            log.info("%s: retention deleted %d segment(s); log start offset now %d",
                     self.name, deleted, self.log_start_offset)
        return deleted

    def _delete_old_segments(
            self, should_delete: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """Delete segments from the oldest while ``should_delete(segment, next_segment)``."""
        deleted = 0
        while self.segments[-1].size > 0 or len(self.segments) > 1:
            segment = self.segments[0]
            following = self.segments[1] if len(self.segments) > 1 else None
            if not should_delete(segment, following):
                break
            if following is None:
                # A log always has an active segment: start the next one first.
                self.roll()
            self.segments.pop(0)
            self._bases.pop(0)
            # Not closed: reads in flight keep the file object, which closes with them.
            segment.delete()
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            deleted += 1
        return deleted

    def _after_head_removed(self) -> None:
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.producer_state.remove_before(self.log_start_offset)

    def _log_start_offset_moved(self) -> None:
        if self.on_log_start_offset_moved is not None:
            self.on_log_start_offset_moved(self)

    def replace_segments(self, old: list[LogSegment], new: list[LogSegment]) -> None:
        """Swap cleaned segments in for the ones they were built from (compaction).

        The new segments arrive with the ``.cleaned`` suffix; they are renamed to
        ``.swap`` (the point after which a crash completes the swap on restart),
        the originals are deleted, then ``.swap`` is dropped.
        """
        for segment in new:
            segment.rename_suffix(".cleaned", ".swap")
        first = self.segments.index(old[0])
        self.segments[first : first + len(old)] = new
        self._bases = [s.base_offset for s in self.segments]
        for segment in old:
            segment.delete()
        for segment in new:
            segment.rename_suffix(".swap", "")

    def config_changed(self, config: TopicConfig) -> None:
        self.config = config
        for segment in self.segments:
            segment.index_interval_bytes = config["index.interval.bytes"]
        self._timed_flush_pending()  # flush.ms set on records already here

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Flush and snapshot so the next start needs no recovery."""
        self.flush()
        self.producer_state.take_snapshot(self.log_end_offset)
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        """Remove the partition's directory (DeleteTopics)."""
        self.close_for_removal()
        shutil.rmtree(self.directory, ignore_errors=True)

    def close_for_removal(self) -> None:
        """Close the files of a log whose directory is about to go; no deferred write
        (its leader epochs) puts one back."""
        self.leader_epoch_cache.forget()
        for segment in self.segments:
            segment.close()


def _control_batch(data: bytes | bytearray | memoryview, header: record_batch.BatchHeader, pos: int,
                   size: int) -> memoryview | None:
    """A marker's bytes (read to tell commit from abort); None for any other batch."""
    return memoryview(data)[pos : pos + size] if header.is_control else None


def segment_may_be_dirty(base: int, bases: list[int], recovery_point: int) -> bool:
    """Whether a segment holds offsets at or beyond the recovery point."""
    i = bases.index(base)
    next_base = bases[i + 1] if i + 1 < len(bases) else None
    return next_base is None or next_base > recovery_point
