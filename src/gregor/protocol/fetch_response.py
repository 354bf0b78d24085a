"""Fetch response encoder that leaves record bytes in the segment files.

kio would need every record set as an in-memory ``bytes``; the fetch path
instead hands back file regions so the connection can ``sendfile`` them. It is
checked against kio's decoder in the tests.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Protocol

from gregor.protocol.primitives import Encoding
from gregor.protocol.varint import encode_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_I64 = struct.Struct(">q")
_EPOCH_END = struct.Struct(">iq")  # EpochEndOffset: epoch, end offset
_ABORTED = struct.Struct(">qq")  # AbortedTransaction: producer id, first offset

FLEXIBLE_FROM = 12
MIN_VERSION = 4
MAX_VERSION = 12


class Region(Protocol):
    """A byte range the connection writes without loading it into memory."""

    @property
    def length(self) -> int: ...

    def read(self) -> bytes:
        """The bytes themselves, for regions too small to be worth a ``sendfile``."""
        ...


@dataclass(slots=True)
class FetchedPartition:
    index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: Region | bytes | None
    # (epoch, end offset) where the fetcher's log parts from this one (v12+, tag 0).
    diverging_epoch: tuple[int, int] | None = None
    # (producer id, first offset) of the transactions aborted in the range sent, for a
    # read_committed fetch.
    aborted_transactions: list[tuple[int, int]] | None = None


Chunk = bytes | Region


def encode_fetch_response(version: int, correlation_id: int, throttle_ms: int, error_code: int,
                          session_id: int,
                          topics: list[tuple[str, list[FetchedPartition]]]) -> list[Chunk]:
    """A whole size-prefixed Fetch v4-v12 response as bytes chunks and file regions."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"fetch v{version} is not supported by this encoder")
    flexible = version >= FLEXIBLE_FROM
    encoding = Encoding(flexible)
    array_len, string = encoding.array_length, encoding.string
    chunks: list[Chunk] = []
    buf = bytearray()

    buf += _I32.pack(correlation_id)
    if flexible:
        buf += b"\x00"  # response header tag section
    buf += _I32.pack(throttle_ms)
    if version >= 7:
        buf += _I16.pack(error_code) + _I32.pack(session_id)
    buf += array_len(len(topics))
    for name, partitions in topics:
        buf += string(name)
        buf += array_len(len(partitions))
        for p in partitions:
            buf += _PARTITION_V4.pack(p.index, p.error_code, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                buf += _I64.pack(p.log_start_offset)
            aborted = p.aborted_transactions or ()
            buf += array_len(len(aborted))
            for producer_id, first_offset in aborted:
                buf += _ABORTED.pack(producer_id, first_offset)
                if flexible:
                    buf += b"\x00"
            if version >= 11:
                buf += _I32.pack(-1)  # preferred_read_replica
            records = p.records
            if records is None:
                buf += b"\x01" if flexible else _I32.pack(0)
            else:
                length = len(records) if isinstance(records, bytes) else records.length
                buf += encode_uvarint(length + 1) if flexible else _I32.pack(length)
                if isinstance(records, bytes):
                    buf += records
                else:
                    chunks.append(bytes(buf))
                    chunks.append(records)
                    buf = bytearray()
            if flexible:
                if p.diverging_epoch is None:
                    buf += b"\x00"  # partition tags
                else:
                    # One tagged field: tag 0, its size, then EpochEndOffset with its own
                    # (empty) tag section.
                    buf += b"\x01\x00" + encode_uvarint(_EPOCH_END.size + 1)
                    buf += _EPOCH_END.pack(*p.diverging_epoch) + b"\x00"
        if flexible:
            buf += b"\x00"  # topic tags
    if flexible:
        buf += b"\x00"  # response tags
    chunks.append(bytes(buf))
    total = sum(len(c) if isinstance(c, bytes) else c.length for c in chunks)
    head = chunks[0]
    assert isinstance(head, bytes)  # every response starts with its header bytes
    chunks[0] = _I32.pack(total) + head
    return chunks


def with_throttle(chunks: list[Chunk], version: int, throttle_ms: int) -> list[Chunk]:
    """The same response with its ``throttle_time_ms`` set: it follows the size prefix,
    the correlation id and, when flexible, the header's tag section."""
    head = chunks[0]
    assert isinstance(head, bytes)
    patched = bytearray(head)
    _I32.pack_into(patched, 8 + (version >= FLEXIBLE_FROM), throttle_ms)
    return [bytes(patched), *chunks[1:]]
