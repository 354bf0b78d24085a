"""Records of a decompressed v2 batch appended straight to Arrow column buffers.

The source's cost used to be one Python object per record.  ``scan_records`` walks a
batch's record bytes and writes offsets, timestamps, validity bits and the bytes of keys,
values and headers into pre-allocated buffers that become Arrow arrays without another
copy (``pyarrow.Array.from_buffers``).  It is compiled (``_record_scan.c``, built by the
package's set-up); where the extension could not be built, the pure-Python version below
does the same, slowly, as aiokafka does with its own extension.  The tests hold the two to
each other.

``columns`` is a tuple of writable buffers, indexed by the ``COL_*`` constants; the
header columns are ``None`` when headers are not wanted.  Offsets buffers start with a
0 written by the caller.  ``cursor`` says where the next row, byte and header go, and how
many nulls each nullable column has; ``scan_records`` returns the advanced cursor.
Records below ``first`` are skipped and scanning stops at the first record at or beyond
``last``.  Timestamps are microseconds (Spark's), and a LogAppendTime batch gives every
record the batch's max timestamp, as Kafka clients report it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from gregor.protocol.record_batch import BatchHeader, InvalidRecordBatch
from gregor.protocol.record_codec import _decode_records

(
    COL_OFFSET, COL_TIMESTAMP, COL_TIMESTAMP_TYPE,
    COL_KEY_VALIDITY, COL_KEY_OFFSETS, COL_KEY_DATA,
    COL_VALUE_VALIDITY, COL_VALUE_OFFSETS, COL_VALUE_DATA,
    COL_HEADERS_VALIDITY, COL_HEADERS_OFFSETS,
    COL_HKEY_OFFSETS, COL_HKEY_DATA,
    COL_HVALUE_VALIDITY, COL_HVALUE_OFFSETS, COL_HVALUE_DATA,
) = range(16)
N_COLUMNS = 16

(
    CUR_ROW, CUR_KEY_POS, CUR_VALUE_POS, CUR_HEADER_ROW, CUR_HKEY_POS, CUR_HVALUE_POS,
    CUR_KEY_NULLS, CUR_VALUE_NULLS, CUR_HEADERS_NULLS, CUR_HVALUE_NULLS,
) = range(10)
Columns = tuple[Any, ...]
Cursor = tuple[int, ...]
EMPTY_CURSOR: Cursor = (0,) * 10
ScanRecords = Callable[[Any, BatchHeader, int, int, Columns, Cursor], Cursor]


def scan_records_py(
    records: Any, header: BatchHeader, first: int, last: int, columns: Columns, cursor: Cursor
) -> Cursor:
    """The pure-Python ``scan_records``: decodes with the protocol package's record codec,
    then writes what the extension writes."""
    try:
        decoded = _decode_records(bytes(records), header)
    except IndexError as exc:
        raise InvalidRecordBatch("record data ends inside a record") from exc
    cur = list(cursor)
    log_append_time = int(header.is_log_append_time)
    views = [None if c is None else memoryview(c).cast("B") for c in columns]
    offsets = _cast(views[COL_OFFSET], "q")
    stamps = _cast(views[COL_TIMESTAMP], "q")
    kinds = _cast(views[COL_TIMESTAMP_TYPE], "i")
    headers = views[COL_HEADERS_VALIDITY] is not None
    for record in decoded:
        if record.offset >= last:
            break
        if record.offset < first:
            continue
        row = cur[CUR_ROW]
        offsets[row] = record.offset
        stamps[row] = (header.max_timestamp if log_append_time else record.timestamp) * 1000
        kinds[row] = log_append_time
        _append(views, COL_KEY_VALIDITY, row, cur, CUR_KEY_POS, CUR_KEY_NULLS, record.key)
        _append(views, COL_VALUE_VALIDITY, row, cur, CUR_VALUE_POS, CUR_VALUE_NULLS,
                record.value)
        if headers:
            _set_bit(views[COL_HEADERS_VALIDITY], row, bool(record.headers))
            if not record.headers:
                cur[CUR_HEADERS_NULLS] += 1
            for key, value in record.headers:
                hrow = cur[CUR_HEADER_ROW]
                raw = key.encode("utf-8", "surrogateescape")
                _put(views[COL_HKEY_DATA], cur[CUR_HKEY_POS], raw)
                cur[CUR_HKEY_POS] += len(raw)
                _cast(views[COL_HKEY_OFFSETS], "i")[hrow + 1] = cur[CUR_HKEY_POS]
                _append(views, COL_HVALUE_VALIDITY, hrow, cur, CUR_HVALUE_POS, CUR_HVALUE_NULLS,
                        value)
                cur[CUR_HEADER_ROW] = hrow + 1
            _cast(views[COL_HEADERS_OFFSETS], "i")[row + 1] = cur[CUR_HEADER_ROW]
        cur[CUR_ROW] = row + 1
    return tuple(cur)


def _cast(view: memoryview | None, fmt: Literal["i", "q"]) -> memoryview:
    assert view is not None
    return view.cast(fmt)


def _set_bit(bitmap: memoryview | None, index: int, valid: bool) -> None:
    assert bitmap is not None
    if valid:
        bitmap[index >> 3] |= 1 << (index & 7)
    else:
        bitmap[index >> 3] &= ~(1 << (index & 7)) & 0xFF


def _put(data: memoryview | None, pos: int, raw: bytes) -> None:
    assert data is not None
    if pos + len(raw) > len(data):
        raise ValueError("column buffers too small for the batch")
    data[pos : pos + len(raw)] = raw


def _append(views: list[memoryview | None], validity: int, row: int, cur: list[int],
            pos_field: int, nulls_field: int, value: bytes | None) -> None:
    """One nullable value into the (validity, offsets, data) columns starting at ``validity``."""
    _set_bit(views[validity], row, value is not None)
    if value is None:
        cur[nulls_field] += 1
    else:
        _put(views[validity + 2], cur[pos_field], value)
        cur[pos_field] += len(value)
    _cast(views[validity + 1], "i")[row + 1] = cur[pos_field]


def _native() -> ScanRecords | None:
    try:
        from gregor.spark._record_scan import scan_records as native
    except ImportError:
        return None
    return native


NATIVE: ScanRecords | None = _native()
"""The compiled ``scan_records``, or ``None`` where the extension was not built."""

scan_records: ScanRecords = NATIVE or scan_records_py
