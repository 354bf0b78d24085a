"""The source's record scanner, compiled and pure Python, against the protocol package's
record codec; no Spark session needed."""

from __future__ import annotations

import pyarrow as pa
import pytest
from record_samples import random_batches

from gregor.protocol.compression import CompressionType, decompress
from gregor.protocol.record_batch import HEADER_SIZE, InvalidRecordBatch
from gregor.protocol.record_codec import Record, decode_records, encode_batch
from gregor.spark.record_columns import ChunkBuilder
from gregor.spark.record_scan import NATIVE, ScanRecords, scan_records_py

SCANNERS: dict[str, ScanRecords] = {"python": scan_records_py}
if NATIVE is not None:
    SCANNERS["native"] = NATIVE


def test_the_extension_is_built() -> None:
    """scripts/setup.sh builds it (gcc and Python headers are part of the set-up); the
    fallback exists for machines without them, not to hide a broken build."""
    assert NATIVE is not None


def expected_rows(batches: list[bytes], first: int, last: int) -> list[dict]:
    rows = []
    for batch in batches:
        header, records = decode_records(batch)
        for r in records:
            if first <= r.offset < last:
                rows.append({
                    "key": r.key, "value": r.value, "topic": "t", "partition": 3,
                    "offset": r.offset, "timestamp": r.timestamp * 1000,
                    "timestampType": int(header.is_log_append_time),
                    "headers": [{"key": k, "value": v} for k, v in r.headers] or None,
                })
    return rows


def scanned_rows(batches: list[bytes], first: int, last: int, scan: ScanRecords,
                 headers: bool = True) -> list[dict]:
    builder = ChunkBuilder("t", 3, last, headers, scan)
    for batch in batches:
        header, _ = decode_records(batch)
        builder.add(decompress(header.compression, memoryview(batch)[HEADER_SIZE:]), header,
                    first)
    built = builder.build()
    if built is None:
        return []
    built.validate(full=True)
    columns = built.to_pydict()
    columns["timestamp"] = built.column("timestamp").cast(pa.int64()).to_pylist()
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(),
                                                                        strict=True)]


@pytest.mark.parametrize("scanner", SCANNERS)
@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
def test_scanned_columns_equal_the_decoded_records(scanner: str, codec: CompressionType) -> None:
    batches, base = random_batches(codec)
    everything = expected_rows(batches, 0, 1 << 62)
    assert scanned_rows(batches, 0, 1 << 62, SCANNERS[scanner]) == everything
    # A range that starts and ends inside batches.
    first, last = everything[10]["offset"], everything[-10]["offset"]
    assert scanned_rows(batches, first, last, SCANNERS[scanner]) == expected_rows(
        batches, first, last)
    without = [{k: v for k, v in row.items() if k != "headers"} for row in everything]
    assert scanned_rows(batches, 0, 1 << 62, SCANNERS[scanner], headers=False) == without


@pytest.mark.parametrize("scanner", SCANNERS)
def test_log_append_time_gives_every_record_the_batch_max_timestamp(scanner: str) -> None:
    records = [Record(5, 100, b"k", b"v"), Record(6, 300, None, None)]
    batch = bytearray(encode_batch(records, base_offset=5, timestamp_type_log_append=True))
    rows = scanned_rows([bytes(batch)], 0, 100, SCANNERS[scanner])
    assert [(r["timestamp"], r["timestampType"]) for r in rows] == [(300_000, 1), (300_000, 1)]
    assert [(r["key"], r["value"]) for r in rows] == [(b"k", b"v"), (None, None)]


@pytest.mark.parametrize("scanner", SCANNERS)
def test_a_record_cut_short_is_refused(scanner: str) -> None:
    batch = encode_batch([Record(0, 1, b"key", b"value")])
    header, _ = decode_records(batch)
    builder = ChunkBuilder("t", 0, 10, True, SCANNERS[scanner])
    builder.add(batch[HEADER_SIZE:-3], header, 0)
    with pytest.raises(ValueError):
        builder.build()


def test_the_python_scanner_reports_what_the_codec_reports() -> None:
    batch = encode_batch([Record(0, 1, b"key", b"value")])
    header, _ = decode_records(batch)
    builder = ChunkBuilder("t", 0, 10, False, scan_records_py)
    builder.add(batch[HEADER_SIZE:] + b"\x00", header, 0)
    with pytest.raises(InvalidRecordBatch):
        builder.build()
