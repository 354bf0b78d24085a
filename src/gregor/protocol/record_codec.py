"""Individual records inside a v2 record batch: decode, and encode whole batches.

The broker's produce and fetch paths treat batches as opaque (see
:mod:`gregor.protocol.record_batch`); this module is for the code that has to see
keys and values -- log compaction, key validation on compacted topics, tools and
tests -- so it favours plain, checkable code over speed, while keeping the varint
parsing free of per-byte function calls.

Record layout (all variable-length ints are zigzag varints)::

    length varint, attributes int8 (unused), timestampDelta varlong, offsetDelta varint,
    keyLength varint (-1: null), key, valueLength varint (-1: null), value,
    headerCount varint, then per header:
        keyLength varint, key (UTF-8), valueLength varint (-1: null), value
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gregor.protocol.compression import CompressionError, CompressionType, compress, decompress
from gregor.protocol.record_batch import (
    _CRC,
    _HEADER,
    CONTROL_MASK,
    CRC_START,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    OFFSET_PREFIX_SIZE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    InvalidRecordBatch,
    crc32c,
    read_offset_prefix,
    validate_batch,
)

_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
# A varlong holds 64 bits in at most ten 7-bit groups; anything longer is corrupt.
_MAX_VARINT_SHIFT = 63

# Zigzag encodings of -64..63 are single bytes; precomputing them makes the common
# case (small deltas, short keys) a list lookup instead of a loop.
_ONE_BYTE = [bytes((n,)) for n in range(0x80)]

# Header keys are Java Strings, which Java decodes leniently. surrogateescape lets
# a key that is not valid UTF-8 survive decode and re-encode byte for byte, so
# compaction never alters or rejects a record Java clients accepted.
_HEADER_KEY_ERRORS = "surrogateescape"


@dataclass(slots=True)
class Record:
    """One record with its absolute offset and timestamp (milliseconds since the epoch)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


class RecordLike(Protocol):
    """Anything :func:`encode_batch` can write; :class:`Record` is the canonical one."""

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[memoryview]:
    """Yield each whole batch in ``buf``, without copying, and stop at a partial one.

    Unlike :func:`record_batch.split_batches` (for produce requests, which must hold
    whole batches), a trailing partial batch is normal here: fetch responses and
    log segments being read with a byte limit end wherever the limit fell.
    """
    view = memoryview(buf)
    total = len(view)
    pos = 0
    while total - pos >= OFFSET_PREFIX_SIZE:
        _, size = read_offset_prefix(view, pos)
        if size < HEADER_SIZE:
            raise InvalidRecordBatch(f"record batch at byte {pos} claims size {size}")
        if pos + size > total:
            return
        yield view[pos : pos + size]
        pos += size


def decode_records(batch: bytes | bytearray | memoryview) -> tuple[BatchHeader, list[Record]]:
    """Validate the batch at the start of ``batch`` and decode its records.

    Any malformation -- CRC, framing, compression, a record overrunning its length
    -- raises :class:`InvalidRecordBatch`, so callers handling untrusted data need
    a single except clause.

    In a LogAppendTime batch every record's timestamp is the batch's maxTimestamp,
    as Kafka clients report it: the broker stamps only the header, leaving the
    producer's per-record deltas in place.
    """
    header = validate_batch(batch)
    if header.records_count == 0:
        # Empty batches (kept by compaction to preserve producer state) carry no
        # record bytes even when their attributes name a codec: nothing to decompress.
        return header, []
    try:
        codec = CompressionType(header.compression)
    except ValueError as exc:
        raise InvalidRecordBatch(f"unknown compression codec {header.compression}") from exc
    try:
        data = decompress(codec, memoryview(batch)[HEADER_SIZE : header.size])
    except CompressionError as exc:
        raise InvalidRecordBatch(str(exc)) from exc
    try:
        records = _decode_records(data, header)
    except IndexError as exc:
        raise InvalidRecordBatch("record data ends inside a record") from exc
    if header.is_log_append_time:
        for record in records:
            record.timestamp = header.max_timestamp
    return header, records


def encode_batch(
    records: Sequence[RecordLike],
    *,
    base_offset: int = 0,
    compression: int = CompressionType.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_type_log_append: bool = False,
    is_transactional: bool = False,
    is_control: bool = False,
    last_offset: int | None = None,
    delete_horizon_ms: int | None = None,
    empty_max_timestamp: int = NO_TIMESTAMP,
) -> bytes:
    """Build one v2 batch holding ``records`` at their own offsets.

    Offset deltas come from each record's offset rather than its position, so
    compaction can rewrite a batch with gaps where removed records were. Offsets
    must be strictly increasing and not below ``base_offset``.

    ``last_offset`` overrides the batch's last offset (it may only extend it), as
    Kafka's cleaner does for idempotent batches whose trailing records were
    removed: the producer's last sequence number is derived from it.

    ``delete_horizon_ms`` (KIP-534) is stored in baseTimestamp of a non-empty
    batch, flagged in the attributes, and record timestamps are written relative
    to it, so every reader still computes the same timestamps.

    A batch with no records is written uncompressed with ``empty_max_timestamp`` as
    both timestamps: Kafka's cleaner keeps the original batch's maxTimestamp there
    so that time-based retention still sees how old the data was.
    """
    compression = CompressionType(compression)
    attributes = 0
    if timestamp_type_log_append:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK

    if records:
        base_timestamp = min(record.timestamp for record in records)
        max_timestamp = max(record.timestamp for record in records)
        if delete_horizon_ms is not None:
            attributes |= DELETE_HORIZON_MASK
            base_timestamp = delete_horizon_ms
        body = _encode_records(records, base_offset, base_timestamp)
        last_offset_delta = records[-1].offset - base_offset
        payload = compress(compression, body)
        attributes |= compression
    else:
        base_timestamp = max_timestamp = empty_max_timestamp
        last_offset_delta = 0
        payload = b""
    if last_offset is not None:
        if last_offset < base_offset + last_offset_delta:
            raise ValueError(f"last_offset {last_offset} is before the last record's offset")
        last_offset_delta = last_offset - base_offset
    if last_offset_delta > _INT32_MAX:
        raise ValueError("batch spans more offsets than an int32 delta can hold")

    buf = bytearray(HEADER_SIZE + len(payload))
    _HEADER.pack_into(
        buf, 0, base_offset, len(buf) - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2, 0,
        attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
        producer_epoch, base_sequence, len(records),
    )
    buf[HEADER_SIZE:] = payload
    _CRC.pack_into(buf, 17, crc32c(memoryview(buf)[CRC_START:]))
    return bytes(buf)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint at ``pos``: ``(value, position after it)``; IndexError if cut off."""
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > _MAX_VARINT_SHIFT:
            raise InvalidRecordBatch("varint longer than 10 bytes")


def _read_nullable_bytes(data: bytes, pos: int, limit: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(data, pos)
    if length < 0:
        if length != -1:
            raise InvalidRecordBatch(f"negative length {length}")
        return None, pos
    end = pos + length
    if end > limit:
        raise InvalidRecordBatch("field runs past the end of its record")
    return data[pos:end], end


def _decode_records(data: bytes, header: BatchHeader) -> list[Record]:
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    records = []
    pos = 0
    end = len(data)
    for _ in range(header.records_count):
        length, pos = _read_varint(data, pos)
        record_end = pos + length
        if length <= 0 or record_end > end:
            raise InvalidRecordBatch(f"record length {length} does not fit the batch")
        # pos + 1 skips the record attributes byte, which v2 defines but never uses.
        timestamp_delta, pos = _read_varint(data, pos + 1)
        offset_delta, pos = _read_varint(data, pos)
        key, pos = _read_nullable_bytes(data, pos, record_end)
        value, pos = _read_nullable_bytes(data, pos, record_end)
        header_count, pos = _read_varint(data, pos)
        if header_count < 0:
            raise InvalidRecordBatch(f"negative header count {header_count}")
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(header_count):
            key_length, pos = _read_varint(data, pos)
            key_end = pos + key_length
            if key_length < 0 or key_end > record_end:
                raise InvalidRecordBatch(f"header key length {key_length} does not fit")
            header_key = data[pos:key_end].decode("utf-8", _HEADER_KEY_ERRORS)
            header_value, pos = _read_nullable_bytes(data, key_end, record_end)
            headers.append((header_key, header_value))
        if pos != record_end:
            raise InvalidRecordBatch("record length disagrees with its fields")
        records.append(
            Record(base_offset + offset_delta, base_timestamp + timestamp_delta, key, value,
                   headers)
        )
    if pos != end:
        raise InvalidRecordBatch(f"{end - pos} bytes after the last record")
    return records


def encode_varint(value: int) -> bytes:
    """Zigzag varint encoding of a signed 64-bit ``value``."""
    if -64 <= value < 64:
        return _ONE_BYTE[(value << 1) ^ (value >> 63)]
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong")
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_NULL = encode_varint(-1)


def _encode_records(
    records: Sequence[RecordLike], base_offset: int, base_timestamp: int
) -> bytearray:
    body = bytearray()
    previous_offset = base_offset - 1
    for record in records:
        offset = record.offset
        if offset <= previous_offset:
            raise ValueError(
                f"record offset {offset} is not above {previous_offset}: offsets must be "
                "strictly increasing from base_offset"
            )
        if offset - base_offset > _INT32_MAX:
            raise ValueError(f"record offset {offset} is too far from base_offset {base_offset}")
        previous_offset = offset
        # Starts with the attributes byte, always 0 in v2.
        fields = bytearray(b"\x00")
        fields += encode_varint(record.timestamp - base_timestamp)
        fields += encode_varint(offset - base_offset)
        for blob in (record.key, record.value):
            if blob is None:
                fields += _NULL
            else:
                fields += encode_varint(len(blob))
                fields += blob
        fields += encode_varint(len(record.headers))
        for header_key, header_value in record.headers:
            encoded_key = header_key.encode("utf-8", _HEADER_KEY_ERRORS)
            fields += encode_varint(len(encoded_key))
            fields += encoded_key
            if header_value is None:
                fields += _NULL
            else:
                fields += encode_varint(len(header_value))
                fields += header_value
        body += encode_varint(len(fields))
        body += fields
    return body
