"""Log compaction: keep the latest record per key in logs with ``cleanup.policy=compact``.

As in Kafka, a compacted log is a "clean" section (already compacted; where it ends,
the first dirty offset, is kept in ``cleaner-offset-checkpoint``), then a "dirty"
section, then the active segment, which is never touched. A pass over the log whose
dirty share is highest:

1. maps every key of the cleanable dirty segments to its latest offset (OffsetMap);
2. rewrites every non-active segment up to the end of the mapped range, keeping a
   record only if no later record has its key. Offsets are kept, so gaps appear.
   Neighbouring segments are written into one new segment while it stays within
   segment.bytes, so compaction also reduces the segment count;
3. swaps each rewritten group of segments in for its originals (Log.replace_segments:
   ``.cleaned`` -> ``.swap`` -> final name, completed on restart after a crash).

Steps 1 and 2 only read files through descriptors duplicated beforehand and write
new files, on a worker thread, so produce and fetch go on meanwhile. Step 3 runs on
the event loop and gives the pass up if the segments changed in between (truncation,
topic deletion); segments that retention deleted meanwhile are just left out.

Batches keep their base and last offsets, producer id, epoch, base sequence, leader
epoch, timestamp type and codec (records are recompressed with it). A batch whose
records are all gone is still written, empty, when it is the last batch of an
idempotent producer (the producer state is rebuilt from batch headers) or the last
batch of a group (so every cleaned segment still ends where its originals ended,
which is how crash recovery knows which segments a ``.swap`` file replaces).

Tombstones follow KIP-534: the first pass that keeps a tombstone stamps its batch
with a delete horizon, now + delete.retention.ms; passes after the horizon drop it.
A log whose latest horizon has passed gets a pass even if it is not dirty enough.
Records without a key (written before the topic became compacted) are dropped.

Transactions as in Kafka's cleaner: an aborted transaction's records are dropped
(they never enter the offset map either); a marker stays while any batch of its
transaction is left in the log (batches are read from the log start, so a pass sees
them all), then is treated like a tombstone: stamped with a delete horizon by the
first pass that finds its transaction's records gone, dropped by the first pass after
it. An abort's entry in the transaction index goes with its records: it is kept only
in the pass that removes them. A producer's last marker stays when it is the newest
trace of the producer's epoch (fencing needs the epoch after a restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gregor.protocol.control_record import is_commit
from gregor.protocol.record_batch import HEADER_SIZE, BatchHeader, InvalidRecordBatch, read_header
from gregor.protocol.record_codec import Record, decode_records, encode_batch, iter_batches
from gregor.storage.checkpoint_file import read_checkpoint, write_checkpoint
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager, TopicPartition
from gregor.storage.offset_map import OffsetMap
from gregor.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)
from gregor.storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
# Memory for one pass's offset map (Kafka: log.cleaner.dedupe.buffer.size, 128 MiB
# shared by its cleaner threads).
DEFAULT_MAP_MEMORY_BYTES = 64 * 1024 * 1024

_READ_CHUNK = 1024 * 1024
_WRITE_CHUNK = 1024 * 1024
_MAX_RELATIVE_OFFSET = 2**31 - 1


class CleaningAborted(BaseException):
    """The broker is stopping: a pass gives up and removes what it wrote.

    A BaseException, like asyncio.CancelledError, so that it is never taken for a
    failure of the log being cleaned."""


# ---------------------------------------------------------------------- planning
@dataclass(frozen=True, slots=True)
class LogToClean:
    """How dirty a compacted log is, and how far it may be cleaned right now."""

    tp: TopicPartition
    log: Log
    first_dirty_offset: int
    # End of the cleanable dirty section: not beyond the active segment, the high
    # watermark, or the first segment younger than min.compaction.lag.ms.
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    # A dirty record is older than max.compaction.lag.ms: clean whatever the ratio.
    compaction_due: bool

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    @staticmethod
    def of(tp: TopicPartition, lg: Log, checkpoint: int | None, high_watermark: int | None,
           now_ms: int) -> LogToClean:
        first_dirty = checkpoint if checkpoint is not None else lg.log_start_offset
        if not lg.log_start_offset <= first_dirty <= lg.log_end_offset:
            # Retention or truncation moved the log past the checkpoint.
            first_dirty = lg.log_start_offset
        limit = lg.active_segment.base_offset
        if high_watermark is not None:
            limit = min(limit, high_watermark)
        if lg.first_unstable_offset is not None:
            # As in Kafka: an open transaction's records may still be aborted.
            limit = min(limit, lg.first_unstable_offset)
        min_lag = lg.config["min.compaction.lag.ms"]
        due_before = now_ms - lg.config["max.compaction.lag.ms"]
        clean_bytes = dirty_bytes = 0
        uncleanable = first_dirty
        due = False
        for segment, following in zip(lg.segments, lg.segments[1:], strict=False):
            end = following.base_offset
            if end <= first_dirty:
                clean_bytes += segment.size
                continue
            if end > limit or (min_lag > 0 and segment.max_timestamp > now_ms - min_lag):
                break
            dirty_bytes += segment.size
            uncleanable = end
            first_timestamp = segment.first_batch_timestamp
            due = due or (first_timestamp is not None and 0 <= first_timestamp <= due_before)
        return LogToClean(tp, lg, first_dirty, uncleanable, clean_bytes, dirty_bytes, due)


@dataclass(frozen=True, slots=True)
class SourceSegment:
    """A segment to rewrite, as the worker thread sees it: through a descriptor of its own,
    which stays valid even if retention deletes the segment or the topic is deleted."""

    segment: LogSegment
    fd: int
    size: int
    base_offset: int
    # Base offset of the segment after it: the end of its offset range.
    end_offset: int


@dataclass(slots=True)
class CleaningPlan:
    """Everything a pass needs, captured on the event loop so the worker never reads the Log."""

    directory: Path
    name: str
    sources: list[SourceSegment]
    first_dirty_offset: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    index_interval_bytes: int
    max_index_size: int
    # Producer id -> last offset of its last batch: that batch must survive, if empty.
    producer_last_offsets: dict[int, int]
    # Producer id -> the epoch of a producer whose current epoch has no data batch (its
    # newest trace is a marker, which must then survive).
    producer_marker_epochs: dict[int, int] = field(default_factory=dict)
    # Producer id -> its aborted transactions in the range, in marker order: their
    # records are dropped and never enter the offset map.
    aborted: dict[int, list[AbortedTxn]] = field(default_factory=dict)

    def is_aborted(self, header: BatchHeader) -> bool:
        return header.is_transactional and not header.is_control and any(
            txn.first_offset <= header.base_offset < txn.last_offset
            for txn in self.aborted.get(header.producer_id, ()))

    def close(self) -> None:
        for source in self.sources:
            os.close(source.fd)


@dataclass(slots=True)
class CleanedGroup:
    sources: list[SourceSegment]
    # None when a lone segment came out unchanged: nothing to swap.
    cleaned: LogSegment | None


@dataclass(slots=True)
class CleaningResult:
    groups: list[CleanedGroup]
    # The new first dirty offset: the end of the dirty range the offset map covered.
    mapped_end_offset: int
    # Latest delete horizon of a tombstone still in the log, if any.
    latest_delete_horizon: int | None
    records_read: int = 0
    records_kept: int = 0
    bytes_read: int = 0
    bytes_kept: int = 0

    def discard(self) -> None:
        for group in self.groups:
            if group.cleaned is not None:
                _discard(group.cleaned)


def _discard(segment: LogSegment) -> None:
    segment.close()
    segment.delete()


class TransactionsSeen:
    """What a pass has seen of each producer's transactions, read in offset order from
    the log start (Kafka's CleanedTransactionMetadata): whether a marker's transaction
    still has batches in the log, so whether the marker may go."""

    def __init__(self, aborted: dict[int, list[AbortedTxn]]) -> None:
        self._pending = sorted((txn for txns in aborted.values() for txn in txns),
                               key=lambda txn: txn.first_offset, reverse=True)
        # Producer id -> its aborted transaction under way, and whether a batch of it
        # was read.
        self._aborting: dict[int, tuple[AbortedTxn, bool]] = {}
        # Producers whose committed (or not yet ended) transaction had a batch read.
        self._committing: set[int] = set()

    def _start_aborts(self, offset: int) -> None:
        while self._pending and self._pending[-1].first_offset <= offset:
            txn = self._pending.pop()
            self._aborting[txn.producer_id] = (txn, False)

    def data_batch(self, header: BatchHeader) -> None:
        self._start_aborts(header.last_offset)
        if not header.is_transactional:
            return
        aborting = self._aborting.get(header.producer_id)
        if aborting is not None:
            self._aborting[header.producer_id] = (aborting[0], True)
        else:
            self._committing.add(header.producer_id)

    def marker(self, header: BatchHeader, raw: memoryview | bytes
               ) -> tuple[bool, AbortedTxn | None]:
        """Whether the marker ``raw`` may go (no batch of its transaction is left), and
        the abort to keep indexed with it when it stays."""
        self._start_aborts(header.last_offset)
        if is_commit(raw):
            if header.producer_id in self._committing:
                self._committing.discard(header.producer_id)
                return False, None
            return True, None
        aborting = self._aborting.pop(header.producer_id, None)
        if aborting is not None and aborting[1]:
            return False, aborting[0]
        return True, None


# ----------------------------------------------------------------- the worker side
@dataclass
class Cleaner:
    """One pass over one log, run on a worker thread; pure file work, no Log access."""

    plan: CleaningPlan
    map_memory_bytes: int = DEFAULT_MAP_MEMORY_BYTES
    stop: threading.Event = field(default_factory=threading.Event)

    def clean(self) -> CleaningResult:
        """Build the offset map, write the cleaned groups; close the plan's descriptors."""
        try:
            offset_map, mapped_end = self._build_offset_map()
            result = CleaningResult([], mapped_end, None)
            try:
                self._clean_segments(offset_map, result)
            except BaseException:
                result.discard()
                raise
            return result
        finally:
            self.plan.close()

    def _build_offset_map(self) -> tuple[OffsetMap, int]:
        """Map keys of whole dirty segments, as many as the memory budget allows
        (at least one, or no pass could ever make progress)."""
        first_dirty = self.plan.first_dirty_offset
        offset_map = OffsetMap(self.map_memory_bytes)
        mapped_end = first_dirty
        for source in self.plan.sources:
            if source.end_offset <= first_dirty:
                continue
            if offset_map.is_full and mapped_end > first_dirty:
                break
            for _, header, records in self._read_batches(source):
                # A marker's key is its type, not a key of the topic's: it supersedes
                # nothing. Nor does an aborted record.
                if header.is_control or self.plan.is_aborted(header):
                    continue
                for record in records:
                    if record.offset >= first_dirty and record.key is not None:
                        offset_map.put(record.key, record.offset)
            mapped_end = source.end_offset
        return offset_map, mapped_end

    def _clean_segments(self, offset_map: OffsetMap, result: CleaningResult) -> None:
        """Clean every segment up to the mapped end into as few segments as fit.

        Kafka groups segments by their sizes before cleaning, so a pass never merges
        full segments that it shrinks; here a segment joins the group being written
        when the group's cleaned size plus the segment's uncleaned size still fits
        segment.bytes, so one pass already merges what compaction made small.
        """
        group: _GroupWriter | None = None
        seen = TransactionsSeen(self.plan.aborted)
        try:
            for source in self.plan.sources:
                if source.end_offset > result.mapped_end_offset:
                    break
                if group is not None and not group.fits(source, self.plan.segment_bytes):
                    result.groups.append(group.finish(result))
                    group = None
                if group is None:
                    group = _GroupWriter(self.plan, source.base_offset)
                group.sources.append(source)
                result.bytes_read += source.size
                for raw, header, records in self._read_batches(source):
                    result.records_read += len(records)
                    if header.is_control:
                        out = self._filter_marker(raw, header, records, seen, group, result)
                    else:
                        seen.data_batch(header)
                        out = self._filter_batch(raw, header, records, offset_map, result)
                    group.write(raw, header, out)
            if group is not None:
                result.groups.append(group.finish(result))
        except BaseException:
            if group is not None:
                group.abandon()
            raise

    def _filter_batch(self, raw: memoryview, header: BatchHeader, records: list[Record],
                      offset_map: OffsetMap, result: CleaningResult
                      ) -> memoryview | bytes | None:
        """The batch to write in place of ``raw`` (``raw`` itself if unchanged), or None."""
        now_ms = self.plan.now_ms
        horizon = header.delete_horizon_ms
        kept = []
        # An aborted transaction's records go, as in Kafka: no reader may see them.
        for record in () if self.plan.is_aborted(header) else records:
            if record.key is None:
                continue
            latest = offset_map.get(record.key)
            if latest is not None and record.offset < latest:
                continue
            if record.value is None and horizon is not None and now_ms >= horizon:
                continue
            kept.append(record)
        result.records_kept += len(kept)
        if not kept:
            if (header.has_producer_id
                    and self.plan.producer_last_offsets.get(header.producer_id)
                    == header.last_offset):
                return raw if header.records_count == 0 else _empty_batch(header)
            return None
        has_tombstones = any(record.value is None for record in kept)
        if has_tombstones:
            if horizon is None:
                horizon = now_ms + self.plan.delete_retention_ms
            if result.latest_delete_horizon is None or horizon > result.latest_delete_horizon:
                result.latest_delete_horizon = horizon
        if len(kept) == len(records) and horizon == header.delete_horizon_ms:
            return raw
        return encode_batch(
            kept, base_offset=header.base_offset, compression=header.compression,
            producer_id=header.producer_id, producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            partition_leader_epoch=header.partition_leader_epoch,
            timestamp_type_log_append=header.is_log_append_time,
            is_transactional=header.is_transactional, last_offset=header.last_offset,
            delete_horizon_ms=horizon)

    def _filter_marker(self, raw: memoryview, header: BatchHeader, records: list[Record],
                       seen: TransactionsSeen, group: _GroupWriter, result: CleaningResult
                       ) -> memoryview | bytes | None:
        """A marker stays while its transaction has batches in the log; then, like a
        tombstone, until its delete horizon has passed."""
        may_go, abort = seen.marker(header, raw)
        if abort is not None:
            group.aborts.append(abort)
        if not may_go or self.plan.producer_marker_epochs.get(
                header.producer_id) == header.producer_epoch:
            result.records_kept += len(records)
            return raw
        horizon = header.delete_horizon_ms
        if horizon is not None and self.plan.now_ms >= horizon:
            return None
        result.records_kept += len(records)
        stamped = (self.plan.now_ms + self.plan.delete_retention_ms if horizon is None
                   else horizon)
        if result.latest_delete_horizon is None or stamped > result.latest_delete_horizon:
            result.latest_delete_horizon = stamped
        if horizon is not None:
            return raw
        return encode_batch(
            records, base_offset=header.base_offset, producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            partition_leader_epoch=header.partition_leader_epoch,
            timestamp_type_log_append=header.is_log_append_time, is_transactional=True,
            is_control=True, last_offset=header.last_offset, delete_horizon_ms=stamped)

    def _read_batches(self, source: SourceSegment
                      ) -> Iterator[tuple[memoryview, BatchHeader, list[Record]]]:
        """Every batch of ``source``, validated (CRC) and decoded, read in large chunks."""
        position = 0
        while position < source.size:
            if self.stop.is_set():
                raise CleaningAborted(self.plan.name)
            chunk = os.pread(source.fd, min(_READ_CHUNK, source.size - position), position)
            consumed = 0
            for raw in iter_batches(chunk):
                header, records = decode_records(raw)
                yield raw, header, records
                consumed += len(raw)
            if consumed == 0:
                # A batch larger than the chunk: read it whole.
                if len(chunk) < HEADER_SIZE:
                    raise InvalidRecordBatch(f"{self.plan.name}: torn batch at {position}")
                size = read_header(chunk).size
                if position + size > source.size:
                    raise InvalidRecordBatch(f"{self.plan.name}: torn batch at {position}")
                raw = memoryview(os.pread(source.fd, size, position))
                header, records = decode_records(raw)
                yield raw, header, records
                consumed = size
            position += consumed


def _empty_batch(header: BatchHeader) -> bytes:
    """Header-only stand-in for a batch whose records are all gone (Kafka's RETAIN_EMPTY).

    A dropped marker's stand-in (the last batch of a group) names no producer: replayed
    on recovery, a transactional one would open a transaction that nothing ends."""
    if header.is_control:
        return encode_batch([], base_offset=header.base_offset, last_offset=header.last_offset,
                            partition_leader_epoch=header.partition_leader_epoch,
                            timestamp_type_log_append=header.is_log_append_time,
                            empty_max_timestamp=header.max_timestamp)
    return encode_batch(
        [], base_offset=header.base_offset, last_offset=header.last_offset,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, partition_leader_epoch=header.partition_leader_epoch,
        timestamp_type_log_append=header.is_log_append_time,
        is_transactional=header.is_transactional, empty_max_timestamp=header.max_timestamp)


class _GroupWriter:
    """Writes the cleaned batches of a run of segments into one new ``.cleaned`` segment,
    in large appends, indexing them as it goes."""

    def __init__(self, plan: CleaningPlan, base_offset: int) -> None:
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            leftover = segment_file_name(base_offset, suffix) + CLEANED_SUFFIX
            (plan.directory / leftover).unlink(missing_ok=True)
        self.segment = LogSegment(plan.directory, base_offset,
                                  index_interval_bytes=plan.index_interval_bytes,
                                  max_index_size=plan.max_index_size, suffix=CLEANED_SUFFIX)
        self.sources: list[SourceSegment] = []
        self._changed = False
        # The last batch read, if it was dropped: the group must still end with it.
        self._dropped: BatchHeader | None = None
        self._buffer = bytearray()
        self._placed: list[tuple[int, int, int, int, int]] = []
        # The aborts to index in the cleaned segment: those whose records it still holds.
        self.aborts: list[AbortedTxn] = []

    def fits(self, source: SourceSegment, max_bytes: int) -> bool:
        """Whether ``source`` may join: its uncleaned size bounds what it adds (an empty
        batch standing in for its last batch is no larger than that batch), give or
        take a few bytes where recompression frames records differently (snappy)."""
        size = self.segment.size + len(self._buffer) + source.size
        span = source.end_offset - 1 - self.segment.base_offset
        return size <= max_bytes and span <= _MAX_RELATIVE_OFFSET

    def write(self, raw: memoryview, header: BatchHeader,
              out: memoryview | bytes | None) -> None:
        """Write ``out``, what cleaning made of the batch ``raw``; None drops it."""
        if out is None:
            self._dropped = header
            self._changed = True
            return
        self._dropped = None
        self._changed = self._changed or out is not raw
        self._append(out)

    def _append(self, batch: memoryview | bytes) -> None:
        header = read_header(batch)
        self._placed.append((len(self._buffer), header.size, header.base_offset,
                             header.last_offset, header.max_timestamp))
        self._buffer += batch
        if len(self._buffer) >= _WRITE_CHUNK:
            self._flush_buffer()

    def _flush_buffer(self) -> None:
        if self._buffer:
            self.segment.append(self._buffer, self._placed)
            self._buffer = bytearray()
            self._placed = []

    def finish(self, result: CleaningResult) -> CleanedGroup:
        """Make the cleaned segment durable (it must be, before the swap); a lone segment
        that came out unchanged is not worth a swap and is dropped."""
        if self._dropped is not None:
            self._append(_empty_batch(self._dropped))
        self._flush_buffer()
        for txn in self.aborts:
            self.segment.txn_index.append(txn)
        if self.aborts != [txn for source in self.sources
                           for txn in source.segment.txn_index.entries]:
            self._changed = True
        if not self._changed and len(self.sources) == 1:
            self.abandon()
            result.bytes_kept += self.sources[0].size
            return CleanedGroup(self.sources, None)
        self.segment.flush()
        result.bytes_kept += self.segment.size
        return CleanedGroup(self.sources, self.segment)

    def abandon(self) -> None:
        _discard(self.segment)


# ------------------------------------------------------------- the event loop side
class LogCleaner:
    """Compacts the broker's compacted logs in the background, one pass at a time.

    Kafka's LogCleaner with a single cleaner thread, plus its LogCleanerManager's
    bookkeeping: the first dirty offset of each log, persisted in
    ``cleaner-offset-checkpoint``, and the logs that failed and are left alone.
    """

    def __init__(self, log_manager: LogManager,
                 high_watermark: Callable[[TopicPartition], int | None] = lambda tp: None,
                 map_memory_bytes: int = DEFAULT_MAP_MEMORY_BYTES) -> None:
        self.log_manager = log_manager
        self.high_watermark = high_watermark
        self.map_memory_bytes = map_memory_bytes
        self._checkpoint_path = log_manager.log_dir / CLEANER_CHECKPOINT_FILE
        self.first_dirty_offsets: dict[TopicPartition, int] = read_checkpoint(
            self._checkpoint_path)
        self._delete_horizons: dict[TopicPartition, int] = {}
        self._uncleanable: set[TopicPartition] = set()
        # The Log object last seen per partition: a different one means the topic was
        # deleted and created again, and nothing known about the old one applies.
        self._seen: dict[TopicPartition, Log] = {}
        self._stop = threading.Event()

    async def run(self, backoff_ms: int) -> None:
        """Clean the dirtiest log again and again; sleep ``backoff_ms`` when none qualifies."""
        try:
            while True:
                if not await self.clean_dirtiest_log(_now_ms()):
                    await asyncio.sleep(backoff_ms / 1000)
        finally:
            self._stop.set()

    def logs_to_clean(self, now_ms: int) -> list[LogToClean]:
        """Compacted logs due for a pass, dirtiest first."""
        due = []
        for tp, lg in list(self.log_manager.logs.items()):
            if not lg.config.compacted:
                continue
            self._forget_if_recreated(tp, lg)
            if tp in self._uncleanable:
                continue
            candidate = LogToClean.of(tp, lg, self.first_dirty_offsets.get(tp),
                                      self.high_watermark(tp), now_ms)
            horizon = self._delete_horizons.get(tp)
            dirty_enough = candidate.dirty_bytes > 0 and (
                candidate.compaction_due
                or candidate.dirty_ratio >= lg.config["min.cleanable.dirty.ratio"])
            if dirty_enough or (horizon is not None and horizon <= now_ms):
                due.append(candidate)
        due.sort(key=lambda c: c.dirty_ratio, reverse=True)
        return due

    async def clean_dirtiest_log(self, now_ms: int) -> bool:
        """One pass over the dirtiest log; True if a pass completed."""
        for candidate in self.logs_to_clean(now_ms):
            try:
                return await self.clean(candidate, now_ms)
            except Exception:
                if self._abandon_if_deleted(candidate, None):
                    log.info("%s: deleted while being cleaned", candidate.log.name)
                    return False
                # Kafka marks such a partition uncleanable rather than retrying forever.
                log.exception("%s: compaction failed; not cleaning this log again",
                              candidate.log.name)
                self._uncleanable.add(candidate.tp)
        return False

    async def clean(self, candidate: LogToClean, now_ms: int) -> bool:
        """Plan on the loop, clean on a worker thread, swap on the loop; True if complete."""
        started = time.monotonic()
        plan = self.plan(candidate, now_ms)
        cleaner = Cleaner(plan, self.map_memory_bytes, self._stop)
        result = await asyncio.to_thread(cleaner.clean)
        if self._stop.is_set():
            result.discard()
            return False
        complete = self.swap(candidate, result)
        lg = candidate.log
        log.info("%s: cleaned offsets up to %d in %.2fs: kept %d of %d records, %d of %d bytes"
                 "%s", lg.name, result.mapped_end_offset, time.monotonic() - started,
                 result.records_kept, result.records_read, result.bytes_kept,
                 result.bytes_read, "" if complete else " (log changed meanwhile; will retry)")
        return complete

    def plan(self, candidate: LogToClean, now_ms: int) -> CleaningPlan:
        """Snapshot what the worker needs: each segment to rewrite through a dup'ed descriptor."""
        lg = candidate.log
        sources = [SourceSegment(segment, os.dup(segment.fd), segment.size, segment.base_offset,
                                 following.base_offset)
                   for segment, following in zip(lg.segments, lg.segments[1:], strict=False)
                   if following.base_offset <= candidate.first_uncleanable_offset]
        producers = lg.producer_state.producers
        aborted: dict[int, list[AbortedTxn]] = {}
        for txn in lg.aborted_transactions(lg.log_start_offset,
                                           candidate.first_uncleanable_offset):
            aborted.setdefault(txn.producer_id, []).append(txn)
        return CleaningPlan(
            directory=lg.directory, name=lg.name, sources=sources,
            first_dirty_offset=candidate.first_dirty_offset, now_ms=now_ms,
            delete_retention_ms=lg.config["delete.retention.ms"],
            segment_bytes=lg.config["segment.bytes"],
            index_interval_bytes=lg.config["index.interval.bytes"],
            max_index_size=lg.config["segment.index.bytes"],
            producer_last_offsets={pid: entry.batches[-1].last_offset
                                   for pid, entry in producers.items() if entry.batches},
            producer_marker_epochs={pid: entry.epoch for pid, entry in producers.items()
                                    if not entry.batches},
            aborted=aborted)

    def swap(self, candidate: LogToClean, result: CleaningResult) -> bool:
        """Swap every cleaned group in for its originals, or none if any original changed.

        All or nothing: a tombstone dropped in one group may be all that hid an older
        value of its key in another, so a pass is never half applied. The exception is
        a group that retention deleted meanwhile: its data is gone either way.
        """
        tp, lg = candidate.tp, candidate.log
        if self._abandon_if_deleted(candidate, result):
            return False
        present = {id(segment): segment for segment in lg.segments}
        swappable = set()
        for group in result.groups:
            if all(present.get(id(s.segment)) is s.segment and s.segment.size == s.size
                   for s in group.sources):
                swappable.add(id(group))
            elif group.sources[-1].end_offset > lg.log_start_offset:
                result.discard()
                return False
        for group in result.groups:
            if group.cleaned is None:
                continue
            if id(group) in swappable:
                lg.replace_segments([s.segment for s in group.sources], [group.cleaned])
            else:
                _discard(group.cleaned)
        self.first_dirty_offsets[tp] = result.mapped_end_offset
        if result.latest_delete_horizon is None:
            self._delete_horizons.pop(tp, None)
        else:
            self._delete_horizons[tp] = result.latest_delete_horizon
        self._write_checkpoint()
        return True

    def _abandon_if_deleted(self, candidate: LogToClean, result: CleaningResult | None) -> bool:
        """If the topic was deleted during the pass, remove what the pass wrote and True.

        Files the worker created just as the directory was being removed can keep it
        from going; it goes now (rmdir: only if empty, so never a recreated topic's).
        """
        if self.log_manager.logs.get(candidate.tp) is candidate.log:
            return False
        if result is not None:
            result.discard()
        with contextlib.suppress(OSError):
            candidate.log.directory.rmdir()
        return True

    def _forget_if_recreated(self, tp: TopicPartition, lg: Log) -> None:
        seen = self._seen.get(tp)
        if seen is not lg:
            if seen is not None:
                self.first_dirty_offsets.pop(tp, None)
                self._delete_horizons.pop(tp, None)
                self._uncleanable.discard(tp)
            self._seen[tp] = lg

    def _write_checkpoint(self) -> None:
        live = {tp: offset for tp, offset in self.first_dirty_offsets.items()
                if tp in self.log_manager.logs}
        self.first_dirty_offsets = live
        write_checkpoint(self._checkpoint_path, live)


def _now_ms() -> int:
    return int(time.time() * 1000)
