"""Record batch v2 as opaque bytes: the header view the broker's hot path needs.

The broker never decodes individual records to produce or fetch. It reads the
fixed 61-byte batch header, checks the CRC32C (which covers everything from
``attributes`` to the end of the batch), and patches ``baseOffset`` and
``partitionLeaderEpoch`` -- both lie before the CRC'd region, so patching them
never requires recomputing the checksum.

Layout (big-endian)::

    0  baseOffset            int64
    8  batchLength           int32   (bytes after this field)
    12 partitionLeaderEpoch  int32
    16 magic                 int8    (2)
    17 crc                   uint32  (CRC32C of bytes 21..end)
    21 attributes            int16
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records...
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c as _crc32c

HEADER_SIZE = 61
# Bytes needed to learn a batch's offsets and size without reading the rest.
OFFSET_PREFIX_SIZE = 12
LOG_OVERHEAD = 12  # baseOffset + batchLength precede the length-counted part
MAGIC_V2 = 2
CRC_START = 21

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
# KIP-534: the log cleaner stores a tombstone batch's delete horizon in baseTimestamp.
DELETE_HORIZON_MASK = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_MAX_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")


class InvalidRecordBatch(ValueError):
    """A batch whose framing, magic or size is wrong (Kafka: INVALID_RECORD / CORRUPT_MESSAGE)."""


class CorruptRecordBatch(InvalidRecordBatch):
    """A batch whose CRC32C does not match its contents (Kafka: CORRUPT_MESSAGE)."""


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC32C (Castagnoli) over any buffer, without copying it.

    Uses the ``crc32c`` package (hardware-accelerated, already required by kio),
    which unlike google-crc32c accepts memoryviews.
    """
    return _crc32c(data)


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The decoded fixed header of one record batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch on disk and on the wire."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When the cleaner may drop this batch's tombstones (set on first cleaning)."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header of the batch starting at ``pos`` (no CRC check)."""
    if len(buf) - pos < HEADER_SIZE:
        raise InvalidRecordBatch("record batch shorter than its header")
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def read_offset_prefix(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Return ``(base_offset, batch_size)`` of the batch at ``pos``."""
    base_offset, batch_length = _PREFIX.unpack_from(buf, pos)
    return base_offset, batch_length + LOG_OVERHEAD


def validate_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Check framing, magic and CRC32C of the batch at ``pos``; return its header.

    The caller must make sure ``buf`` holds the whole batch (``header.size`` bytes).
    """
    header = read_header(buf, pos)
    if header.magic != MAGIC_V2:
        raise InvalidRecordBatch(f"unsupported record batch magic {header.magic}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidRecordBatch(f"record batch length {header.batch_length} is too small")
    end = pos + header.size
    if end > len(buf):
        raise InvalidRecordBatch("record batch truncated")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise InvalidRecordBatch("negative record count or offset delta")
    view = memoryview(buf)[pos + CRC_START : end]
    if _crc32c(view) != header.crc:
        raise CorruptRecordBatch("record batch CRC32C mismatch")
    return header


def split_batches(buf: bytes | bytearray | memoryview,
                  cut_tail: bool = False) -> list[tuple[int, int]]:
    """Return ``(position, size)`` of each whole batch in ``buf``.

    Raises :class:`InvalidRecordBatch` if the buffer does not end on a batch boundary:
    a produce request's record set must consist of whole batches only. A fetch answer's
    may end inside a batch (a leader's byte budget cut it, as Kafka's does): with
    ``cut_tail`` that last partial batch is left out instead.
    """
    spans = []
    pos = 0
    total = len(buf)
    while pos < total:
        if total - pos < HEADER_SIZE:
            if cut_tail:
                break
            raise InvalidRecordBatch("trailing bytes after the last record batch")
        _, size = read_offset_prefix(buf, pos)
        if cut_tail and size >= HEADER_SIZE and pos + size > total:
            break
        if size < HEADER_SIZE or pos + size > total:
            raise InvalidRecordBatch("record batch length runs past the record set")
        spans.append((pos, size))
        pos += size
    return spans


def patch_offsets(buf: bytearray | memoryview, pos: int, base_offset: int,
                  leader_epoch: int) -> None:
    """Stamp the broker-assigned base offset and leader epoch into a batch in place."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)
    _LEADER_EPOCH.pack_into(buf, pos + 12, leader_epoch)


def patch_log_append_time(buf: bytearray | memoryview, pos: int, size: int, timestamp: int) -> None:
    """Rewrite a batch for ``message.timestamp.type=LogAppendTime``.

    Sets the timestamp-type bit and maxTimestamp, then recomputes the CRC because
    both lie inside the checksummed region.
    """
    attributes = struct.unpack_from(">h", buf, pos + 21)[0] | TIMESTAMP_TYPE_MASK
    struct.pack_into(">h", buf, pos + 21, attributes)
    _MAX_TIMESTAMP.pack_into(buf, pos + 35, timestamp)
    crc = _crc32c(memoryview(buf)[pos + CRC_START : pos + size])
    _CRC.pack_into(buf, pos + 17, crc)
