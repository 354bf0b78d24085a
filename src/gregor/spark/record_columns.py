"""Record batches of one topic-partition, as fetched, turned into Arrow record batches in
the source schema.

Batches are gathered until a chunk is big enough to amortise Arrow's and the JVM's cost
per RecordBatch; then buffers sized for all of them are allocated once and each batch's
records are scanned into them (:mod:`gregor.spark.record_scan`), without a Python object
per record.  Sizes are bounds taken from the batch headers and decompressed lengths: a
record's key, value and header bytes are part of its batch's bytes, and every header
takes at least two of them.
"""

from __future__ import annotations

import pyarrow as pa

from gregor.protocol.record_batch import BatchHeader
from gregor.spark.record_scan import (
    COL_HEADERS_OFFSETS,
    COL_HEADERS_VALIDITY,
    COL_HKEY_OFFSETS,
    COL_HVALUE_VALIDITY,
    COL_KEY_VALIDITY,
    COL_OFFSET,
    COL_TIMESTAMP,
    COL_TIMESTAMP_TYPE,
    COL_VALUE_VALIDITY,
    CUR_HEADER_ROW,
    CUR_HEADERS_NULLS,
    CUR_HKEY_POS,
    CUR_HVALUE_NULLS,
    CUR_HVALUE_POS,
    CUR_KEY_NULLS,
    CUR_KEY_POS,
    CUR_ROW,
    CUR_VALUE_NULLS,
    CUR_VALUE_POS,
    EMPTY_CURSOR,
    ScanRecords,
    scan_records,
)
from gregor.spark.schema import source_arrow_schema

CHUNK_ROWS = 65_536
"""Rows per RecordBatch: large enough to amortise Arrow and JVM overhead per batch..."""
CHUNK_BYTES = 4 << 20
"""...and small enough in bytes that large records do not pile up in worker memory."""
MIN_HEADER_BYTES = 2
"""A header's key length and value length varints: at least a byte each."""


class ChunkBuilder:
    """Collects the decompressed records sections of one partition's batches, in offset
    order, and builds RecordBatches of their records below ``last``."""

    def __init__(self, topic: str, partition: int, last: int, include_headers: bool,
                 scan: ScanRecords = scan_records) -> None:
        self._topic = topic
        self._partition = partition
        self._last = last
        self._schema = source_arrow_schema(include_headers)
        self._headers = include_headers
        self._scan = scan
        self._pending: list[tuple[bytes | memoryview, BatchHeader, int]] = []
        self._rows = 0
        self._bytes = 0

    def add(self, records: bytes | memoryview, header: BatchHeader, first: int) -> None:
        """One data batch's records section (decompressed) and header; its records below
        ``first`` are left out (a fetch answers with the whole batch holding an offset)."""
        self._pending.append((records, header, first))
        self._rows += header.records_count
        self._bytes += len(records)

    @property
    def full(self) -> bool:
        return self._rows >= CHUNK_ROWS or self._bytes >= CHUNK_BYTES

    def build(self) -> pa.RecordBatch | None:
        """The records gathered so far as one RecordBatch (``None`` if none is in range)."""
        if not self._pending:
            return None
        rows, size = self._rows, self._bytes
        header_rows = size // MIN_HEADER_BYTES if self._headers else 0
        columns = _allocate(rows, size, header_rows, self._headers)
        cursor = EMPTY_CURSOR
        for records, header, first in self._pending:
            cursor = self._scan(records, header, first, self._last, columns, cursor)
        self._pending, self._rows, self._bytes = [], 0, 0
        count = cursor[CUR_ROW]
        if count == 0:
            return None
        return self._record_batch(columns, cursor)

    def _record_batch(self, columns: tuple, cursor: tuple[int, ...]) -> pa.RecordBatch:
        count = cursor[CUR_ROW]
        schema = self._schema
        arrays = [
            _binary(schema.field("key").type, columns, COL_KEY_VALIDITY, count,
                    cursor[CUR_KEY_POS], cursor[CUR_KEY_NULLS]),
            _binary(schema.field("value").type, columns, COL_VALUE_VALIDITY, count,
                    cursor[CUR_VALUE_POS], cursor[CUR_VALUE_NULLS]),
            pa.repeat(pa.scalar(self._topic, schema.field("topic").type), count),
            pa.repeat(pa.scalar(self._partition, schema.field("partition").type), count),
            _fixed(schema.field("offset").type, columns[COL_OFFSET], count, 8),
            _fixed(schema.field("timestamp").type, columns[COL_TIMESTAMP], count, 8),
            _fixed(schema.field("timestampType").type, columns[COL_TIMESTAMP_TYPE], count, 4),
        ]
        if self._headers:
            list_type = schema.field("headers").type
            struct_type = list_type.value_type
            header_rows = cursor[CUR_HEADER_ROW]
            entries = pa.StructArray.from_arrays(
                [
                    _binary(struct_type.field("key").type, columns, None, header_rows,
                            cursor[CUR_HKEY_POS], 0, COL_HKEY_OFFSETS),
                    _binary(struct_type.field("value").type, columns, COL_HVALUE_VALIDITY,
                            header_rows, cursor[CUR_HVALUE_POS], cursor[CUR_HVALUE_NULLS]),
                ],
                fields=list(struct_type),
            )
            nulls = cursor[CUR_HEADERS_NULLS]
            arrays.append(pa.Array.from_buffers(
                list_type, count,
                [_validity(columns[COL_HEADERS_VALIDITY], count, nulls),
                 columns[COL_HEADERS_OFFSETS].slice(0, (count + 1) * 4)],
                null_count=nulls, children=[entries]))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _allocate(rows: int, size: int, header_rows: int, headers: bool) -> tuple:
    def offsets(n: int) -> pa.Buffer:
        buf = pa.allocate_buffer((n + 1) * 4)
        memoryview(buf).cast("i")[0] = 0
        return buf

    def bitmap(n: int) -> pa.Buffer:
        return pa.allocate_buffer((n + 7) // 8)

    columns = [
        pa.allocate_buffer(rows * 8), pa.allocate_buffer(rows * 8), pa.allocate_buffer(rows * 4),
        bitmap(rows), offsets(rows), pa.allocate_buffer(size),
        bitmap(rows), offsets(rows), pa.allocate_buffer(size),
    ]
    if headers:
        columns += [
            bitmap(rows), offsets(rows),
            offsets(header_rows), pa.allocate_buffer(size),
            bitmap(header_rows), offsets(header_rows), pa.allocate_buffer(size),
        ]
    else:
        columns += [None] * 7
    return tuple(columns)


def _validity(bitmap: pa.Buffer, count: int, nulls: int) -> pa.Buffer | None:
    return None if nulls == 0 else bitmap.slice(0, (count + 7) // 8)


def _fixed(kind: pa.DataType, data: pa.Buffer, count: int, width: int) -> pa.Array:
    return pa.Array.from_buffers(kind, count, [None, data.slice(0, count * width)], null_count=0)


def _binary(kind: pa.DataType, columns: tuple, validity: int | None, count: int, size: int,
            nulls: int, offsets: int | None = None) -> pa.Array:
    """A (nullable) binary or string column from its validity, offsets and data buffers,
    which follow each other in ``columns`` from ``validity`` on (or from ``offsets`` for a
    column that is never null)."""
    if validity is not None:
        offsets = validity + 1
    assert offsets is not None
    bitmap = None if validity is None else _validity(columns[validity], count, nulls)
    return pa.Array.from_buffers(
        kind, count,
        [bitmap, columns[offsets].slice(0, (count + 1) * 4), columns[offsets + 1].slice(0, size)],
        null_count=nulls)
