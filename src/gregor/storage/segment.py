"""LogSegment: one ``.log`` file of record batches with its offset and time indexes."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

from gregor.protocol import record_batch
from gregor.protocol.record_batch import (
    HEADER_SIZE,
    NO_TIMESTAMP,
    BatchHeader,
    InvalidRecordBatch,
    read_header,
)
from gregor.protocol.record_codec import decode_records
from gregor.storage.index_file import CorruptIndexError
from gregor.storage.offset_index import OffsetIndex
from gregor.storage.time_index import TimeIndex
from gregor.storage.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"

# Read this much at a time when scanning batch headers, so that a scan over the
# few batches between two index entries costs one or two syscalls.
_SCAN_CHUNK = 16 * 1024
# Batches whose start a segment remembers (LogSegment._recent): a follower's fetch asks
# for the batch after the last one it was sent, a few appends back at most.
_RECENT_BATCHES = 64


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's file naming: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class FileRegion:
    """A byte range of a segment file, sent to the client with ``sendfile``.

    It holds the open file object itself, so a segment deleted by retention while
    a fetch is in flight stays readable until the response is written.
    """

    file: BinaryIO
    position: int
    length: int

    def read(self) -> bytes:
        return os.pread(self.file.fileno(), self.length, self.position)


class BatchLocation(NamedTuple):
    """A batch's header and where it starts in its segment file."""

    position: int
    header: BatchHeader

    @property
    def size(self) -> int:
        return self.header.size

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def max_timestamp(self) -> int:
        return self.header.max_timestamp


class LogSegment:
    """Append-only batch file plus sparse indexes; knows nothing of topics or replicas."""

    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int,
                 max_index_size: int, suffix: str = "") -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / (segment_file_name(base_offset, LOG_SUFFIX) + suffix)
        self.offset_index = OffsetIndex(
            directory / (segment_file_name(base_offset, INDEX_SUFFIX) + suffix),
            base_offset, max_index_size)
        self.time_index = TimeIndex(
            directory / (segment_file_name(base_offset, TIME_INDEX_SUFFIX) + suffix),
            base_offset, max_index_size)
        # Created on the first abort, as in Kafka: most segments never hold one.
        self.txn_index = TransactionIndex(
            directory / (segment_file_name(base_offset, TXN_INDEX_SUFFIX) + suffix))
        is_new = not self.log_path.exists()
        self.file = open(self.log_path, "a+b", buffering=0)  # noqa: SIM115 - lives with the segment
        if is_new:
            # Index files exist from the start, even while they have no entries (a
            # segment of few large batches may never get one), so that a missing
            # index file always means damage to repair, never a segment to rescan.
            self.offset_index.create()
            self.time_index.create()
        self.fd = self.file.fileno()
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.first_batch_timestamp: int | None = None
        self.created_ms = int(time.time() * 1000)
        self.unflushed_messages = 0
        self._bytes_since_index = 0
        # Where the batches appended last start, by base offset: a follower (or a
        # consumer keeping up) fetches from the batch after the one it was sent, and
        # found here it is read without an index lookup and a header read from the file.
        self._recent: dict[int, tuple[int, int]] = {}

    # ----------------------------------------------------------------- opening
    def load(self, recover: bool) -> int:
        """Load the indexes and learn where the segment ends; return bytes truncated.

        ``recover`` re-checks every batch's CRC, rebuilds both indexes and truncates
        a torn or corrupt tail: what an unclean shutdown calls for. Otherwise the
        indexes are trusted once they pass their sanity check, and only the batch
        headers after the last offset index entry are read; an index failing the
        check, or a tail that does not parse, falls back to a full recovery.
        """
        if recover:
            return self.recover()
        self.txn_index.load()
        try:
            self.offset_index.load(self.size)
            self.time_index.load()
            self._load_tail()
            last_time_offset = self.time_index.last_offset
            if last_time_offset is not None and last_time_offset >= self.next_offset:
                raise CorruptIndexError(f"{self.time_index.path.name} points past the log end")
        except (CorruptIndexError, InvalidRecordBatch) as exc:
            log.warning("rebuilding indexes of %s: %s", self.log_path, exc)
            return self.recover()
        return 0

    def _load_tail(self) -> None:
        """Derive next offset, max timestamp and first timestamp from the last index entry on.

        Everything before the last offset index entry is summarised by the indexes
        (the time index's last entry covers every batch before it), so this reads
        at most ``index.interval.bytes`` of headers plus the first one.
        """
        indexed_offset, position = self.offset_index.last_entry
        self.next_offset = self.base_offset
        self.max_timestamp = self.time_index.last_timestamp
        for batch in self.iter_batches(position):
            if batch.position + batch.size > self.size:
                raise InvalidRecordBatch(f"torn batch at byte {batch.position}")
            if batch.position == position > 0 and batch.base_offset != indexed_offset:
                raise CorruptIndexError(f"{self.offset_index.path.name} entry for offset "
                                        f"{indexed_offset} points at offset {batch.base_offset}")
            self.next_offset = batch.last_offset + 1
            self.max_timestamp = max(self.max_timestamp, batch.max_timestamp)
        self._bytes_since_index = self.size - position
        self.first_batch_timestamp = (self.read_batch_header(0).max_timestamp if self.size
                                      else None)

    def recover(self) -> int:
        """Validate every batch's CRC, rebuild both indexes, truncate a torn or corrupt tail.

        The tail is cut at the first batch that is incomplete, fails its CRC, has a
        malformed header or goes backwards in offsets: bytes after it cannot be
        trusted to be batches at all.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.load()
        self._recent.clear()
        self._bytes_since_index = 0
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.first_batch_timestamp = None
        position = 0
        while position < self.size:
            try:
                header = self._read_valid_batch(position)
            except InvalidRecordBatch as exc:
                log.warning("truncating %s at byte %d of %d: %s",
                            self.log_path, position, self.size, exc)
                break
            self._index_batch(position, header.base_offset, header.last_offset,
                              header.max_timestamp, header.size)
            position += header.size
        truncated = self.size - position
        if truncated:
            os.ftruncate(self.fd, position)
            self.size = position
        # Aborts whose markers were lost with the tail go too; the log's producer state
        # replay indexes again any abort whose marker survived but whose entry did not.
        self.txn_index.truncate_to(self.next_offset)
        return truncated

    def _read_valid_batch(self, position: int) -> BatchHeader:
        """Header of the batch at ``position`` after checking it is whole, in order and intact."""
        header = self.read_batch_header(position)
        if header.batch_length < HEADER_SIZE - record_batch.LOG_OVERHEAD:
            raise InvalidRecordBatch(f"batch length {header.batch_length} is too small")
        if position + header.size > self.size:
            raise InvalidRecordBatch(f"batch of {header.size} bytes runs past the end")
        if header.base_offset < self.next_offset:
            raise InvalidRecordBatch(f"batch offset {header.base_offset} is below "
                                     f"{self.next_offset}")
        record_batch.validate_batch(os.pread(self.fd, header.size, position))
        return header

    # --------------------------------------------------------------- appending
    def append(self, data: bytes | bytearray | memoryview,
               batches: list[tuple[int, int, int, int, int]]) -> None:
        """Write already-validated, offset-stamped batches.

        ``batches`` holds ``(position_in_data, size, base_offset, last_offset, max_timestamp)``
        for each batch in ``data``, so indexing needs no re-parsing.
        """
        start = self.size
        written = os.write(self.fd, data)
        if written != len(data):
            # A short write to a regular file means the disk is full; undo it so the
            # log never holds a partial batch.
            os.ftruncate(self.fd, start)
            raise OSError(f"short write to {self.log_path}: {written} of {len(data)} bytes")
        self.size += written
        recent = self._recent
        for pos, size, base_offset, last_offset, max_timestamp in batches:
            self._index_batch(start + pos, base_offset, last_offset, max_timestamp, size)
            self.unflushed_messages += last_offset - base_offset + 1
            recent[base_offset] = (start + pos, size)
        while len(recent) > _RECENT_BATCHES:
            del recent[next(iter(recent))]

    def _index_batch(self, position: int, base_offset: int, last_offset: int,
                     max_timestamp: int, size: int) -> None:
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = max_timestamp
        if self._bytes_since_index >= self.index_interval_bytes and position > 0:
            self.offset_index.append(base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.next_offset - 1)
            self._bytes_since_index = 0
        self._bytes_since_index += size
        self.next_offset = last_offset + 1
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp

    # ----------------------------------------------------------------- reading
    def read_batch_header(self, position: int) -> record_batch.BatchHeader:
        data = os.pread(self.fd, HEADER_SIZE, position)
        return read_header(data)

    def iter_batches(self, position: int = 0) -> Iterator[BatchLocation]:
        """Yield :class:`BatchLocation` for each batch header from ``position``.

        Reads headers in chunks; a batch that claims to run past the segment end is
        still yielded so callers can detect a torn tail.
        """
        end = self.size
        while position < end:
            chunk = os.pread(self.fd, min(_SCAN_CHUNK, end - position), position)
            offset_in_chunk = 0
            while len(chunk) - offset_in_chunk >= HEADER_SIZE:
                header = read_header(chunk, offset_in_chunk)
                if header.batch_length < HEADER_SIZE - record_batch.LOG_OVERHEAD:
                    raise InvalidRecordBatch(f"bad batch length at {position + offset_in_chunk}")
                yield BatchLocation(position + offset_in_chunk, header)
                offset_in_chunk += header.size
            if offset_in_chunk == 0:
                raise InvalidRecordBatch(f"partial batch header at {position}")
            position += offset_in_chunk

    def find_batch(self, offset: int) -> BatchLocation | None:
        """The batch holding ``offset``, or the first one after it (compaction leaves gaps)."""
        _, position = self.offset_index.lookup(offset)
        for batch in self.iter_batches(position):
            if batch.last_offset >= offset:
                return batch
        return None

    def read(self, offset: int, max_bytes: int, max_position: int | None = None,
             min_one_batch: bool = True) -> FileRegion | None:
        """File range starting at the batch that holds ``offset``.

        The whole first batch is returned even if it exceeds ``max_bytes`` (KIP-74)
        when ``min_one_batch`` is set. A range cut by ``max_bytes`` ends at the last
        indexed batch start before the cut: Kafka sends the cut batch's head too, which
        clients drop and fetch again, costing a partial batch of transfer and parsing
        per partition per fetch. Only without such an index entry (a ``max_bytes``
        below ``index.interval.bytes``) is the cut batch sent partially.
        """
        end = self.size if max_position is None else max_position
        known = self._recent.get(offset)
        if known is not None:
            position, size = known
        else:
            batch = self.find_batch(offset)
            if batch is None:
                return None
            position, size = batch.position, batch.size
        if position >= end:
            return None
        available = end - position
        length = min(available, max_bytes)
        if length < available:
            boundary = self.offset_index.batch_start_at_or_before(position + length)
            if boundary is not None and boundary > position:
                length = boundary - position
        if min_one_batch:
            length = max(length, min(size, available))
        if length <= 0:
            return None
        return FileRegion(self.file, position, length)

    def position_of(self, offset: int) -> int:
        """Byte position where the batch holding ``offset`` starts, or the segment end."""
        known = self._recent.get(offset)
        if known is not None:
            return known[0]
        batch = self.find_batch(offset)
        return self.size if batch is None else batch.position

    def find_offset_by_timestamp(self, timestamp: int,
                                 starting_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``starting_offset`` whose
        timestamp is at least ``timestamp`` (ListOffsets by time).

        The indexes narrow the search to batches whose max timestamp qualifies; only
        those are decoded, since record timestamps need not be monotonic.
        """
        start = max(self.time_index.lookup(timestamp), starting_offset)
        _, position = self.offset_index.lookup(start)
        for batch in self.iter_batches(position):
            if batch.max_timestamp < timestamp or batch.last_offset < starting_offset:
                continue
            _, records = decode_records(os.pread(self.fd, batch.size, batch.position))
            for record in records:
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return record.offset, record.timestamp
        return None

    @property
    def largest_timestamp(self) -> int:
        """What retention.ms ages a segment by: its max timestamp, or (for batches without
        timestamps) the file's modification time, as Kafka does."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self.fd).st_mtime * 1000)

    # -------------------------------------------------------------- lifecycle
    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding ``offset`` and every later one; return bytes removed.

        Batches are never split, so the segment then ends at the base offset of the
        batch that held ``offset`` (the caller truncates at batch boundaries anyway).
        """
        if offset >= self.next_offset:
            return 0
        batch = self.find_batch(offset)
        if batch is None:
            return 0
        # Entries for the removed batches go; the index entry of the first removed
        # batch is keyed by its base offset, which may lie below ``offset``.
        self.offset_index.truncate_to(batch.base_offset)
        self.time_index.truncate_to(batch.base_offset)
        self.txn_index.truncate_to(batch.base_offset)
        removed = self.size - batch.position
        self._recent.clear()  # the offsets may come back as other batches
        os.ftruncate(self.fd, batch.position)
        self.size = batch.position
        self._load_tail()
        if self.size == 0:
            self.created_ms = int(time.time() * 1000)
        return removed

    def should_roll_on_time(self, incoming_max_timestamp: int, now_ms: int,
                            segment_ms: int) -> bool:
        """Whether segment.ms has passed, measured as Kafka does.

        With record timestamps the span runs from the first batch's max timestamp to
        the incoming batches' max timestamp, so replaying old data rolls by the
        data's own time instead of rolling on every append; without timestamps it
        is wall-clock time since the segment was created or loaded.
        """
        if self.size == 0:
            return False
        first = self.first_batch_timestamp
        if first is not None and first >= 0:
            return incoming_max_timestamp - first > segment_ms
        return now_ms - self.created_ms > segment_ms

    def flush(self) -> None:
        self.fsync()
        self.unflushed_messages = 0

    def fsync(self) -> None:
        """The data and indexes on disk. Leaves the count of unflushed messages alone, so
        a worker thread may run it while the log's thread appends and counts on."""
        os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def on_become_inactive(self) -> None:
        """Fsync a segment that stops being the active one and release its index writers."""
        self.flush()
        self.release_index_writers()

    def release_index_writers(self) -> None:
        """A log may hold thousands of segments, and only the active one is appended to."""
        self.offset_index.close()
        self.time_index.close()

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self.file.close()

    def delete(self) -> None:
        """Unlink the files; the open file object lives on for fetches in flight."""
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def rename_suffix(self, old: str, new: str) -> None:
        """Move the segment's files from one suffix to another (compaction swaps)."""
        def renamed(path: Path) -> Path:
            name = path.name[: -len(old)] if old and path.name.endswith(old) else path.name
            return path.with_name(name + new)

        new_log = renamed(self.log_path)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        self.offset_index.rename(renamed(self.offset_index.path))
        self.time_index.rename(renamed(self.time_index.path))
        self.txn_index.rename(renamed(self.txn_index.path))

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path.name}, size={self.size}, next={self.next_offset})"
