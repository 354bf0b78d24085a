"""Record codec and compression: round trips, and interoperability with real client libraries.

Round trips alone would pass for a codec that is consistently wrong, so every
codec is also checked against independent implementations: kafka-python's
record batch code, kio's (uncompressed only), and librdkafka through
confluent-kafka's built-in mock cluster, which needs no broker process.
"""

from __future__ import annotations

import datetime
import io
import os
import socket
import struct
import types
from collections.abc import Iterator

import cramjam
import kafka.codec
import pytest
import zstandard
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kio.records.readers import read_batch as kio_read_batch
from kio.records.schema import NewRecordBatch as KioNewRecordBatch
from kio.records.schema import Record as KioRecord
from kio.records.schema import RecordHeader as KioRecordHeader
from kio.records.writers import write_new_batch as kio_write_new_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from gregor.protocol.compression import CompressionError, CompressionType, compress, decompress
from gregor.protocol.record_batch import (
    CRC_START,
    HEADER_SIZE,
    NO_TIMESTAMP,
    CorruptRecordBatch,
    InvalidRecordBatch,
    crc32c,
    validate_batch,
)
from gregor.protocol.record_codec import Record, decode_records, encode_batch, iter_batches

CODECS = list(CompressionType)
COMPRESSED = [codec for codec in CompressionType if codec is not CompressionType.NONE]
TS = 1_700_000_000_000


def sample_records(count: int = 5, first_offset: int = 0) -> list[Record]:
    """Records covering null keys and values, empty ones, and null/multiple headers.

    Values repeat so that every codec actually shrinks them: kafka-python sends
    a batch uncompressed when compression does not pay.
    """
    records = []
    for i in range(count):
        key = None if i % 3 == 1 else f"key-{i}".encode()
        value = None if i % 4 == 2 else (b"" if i % 4 == 3 else b"value " * (20 + i))
        headers: list[tuple[str, bytes | None]] = [("trace", b"abc"), ("empty", None)][: i % 3]
        records.append(Record(first_offset + i, TS + 7 * i, key, value, headers))
    return records


def recompute_crc(batch: bytearray) -> None:
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[CRC_START:]))


# -- compression ------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 1000, 100_000, 300_000])
def test_compression_round_trip(codec: CompressionType, size: int) -> None:
    # 100k and 300k span several 32 KiB xerial blocks and 64 KiB lz4 blocks.
    data = (os.urandom(64) + b"abcd" * 200) * (size // 864 + 1)
    data = data[:size]
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(compress(codec, data))) == data


def test_snappy_writes_xerial_framing() -> None:
    framed = compress(CompressionType.SNAPPY, b"x" * 100_000)
    assert framed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    (first_block,) = struct.unpack_from(">i", framed, 16)
    assert bytes(cramjam.snappy.decompress_raw(framed[20 : 20 + first_block])) == b"x" * 32768


def test_snappy_reads_raw_and_misversioned_xerial() -> None:
    data = b"librdkafka writes raw snappy in v2 batches " * 50
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(CompressionType.SNAPPY, raw) == data
    # Redpanda writes the xerial version fields little-endian; only the magic counts.
    little_endian = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1)
    framed = little_endian + struct.pack(">i", len(raw)) + raw
    assert decompress(CompressionType.SNAPPY, framed) == data


def test_lz4_frames_use_independent_blocks() -> None:
    # FLG byte after the 4-byte magic; bit 5 is block independence, which Java requires.
    frame = compress(CompressionType.LZ4, b"abc" * 100_000)
    assert frame[4] & 0x20


def test_zstd_reads_frames_without_content_size_and_concatenated() -> None:
    compressor = zstandard.ZstdCompressor(write_content_size=False)
    data = b"first frame " * 1000
    assert decompress(CompressionType.ZSTD, compressor.compress(data)) == data
    two_frames = compressor.compress(data) + compressor.compress(b"second")
    assert decompress(CompressionType.ZSTD, two_frames) == data + b"second"
    streamed = io.BytesIO()
    with compressor.stream_writer(streamed, closefd=False) as writer:
        writer.write(data)
    assert decompress(CompressionType.ZSTD, streamed.getvalue()) == data


@pytest.mark.parametrize("codec", COMPRESSED)
def test_decompress_rejects_garbage_and_truncation(codec: CompressionType) -> None:
    with pytest.raises(CompressionError):
        decompress(codec, b"definitely not compressed data")
    # Random bytes (not a repeated pattern) so the compressed form has a real tail.
    data = os.urandom(4000)
    with pytest.raises(CompressionError):
        decompress(codec, compress(codec, data)[:-20])


# -- records round trip -----------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(codec: CompressionType) -> None:
    records = sample_records(20, first_offset=100)
    batch = encode_batch(
        records, base_offset=100, compression=codec, producer_id=42, producer_epoch=3,
        base_sequence=7, partition_leader_epoch=5, is_transactional=True,
    )
    header, decoded = decode_records(batch)
    assert decoded == records
    assert header.size == len(batch)
    assert header.compression == codec
    assert (header.base_offset, header.last_offset, header.records_count) == (100, 119, 20)
    assert (header.base_timestamp, header.max_timestamp) == (TS, TS + 7 * 19)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 7)
    assert header.partition_leader_epoch == 5
    assert header.is_transactional
    assert not header.is_control
    assert not header.is_log_append_time


def test_offset_gaps_and_unsorted_timestamps_survive() -> None:
    # What compaction produces: surviving records keep their offsets, and
    # producers may send timestamps out of order.
    records = [
        Record(1000, TS + 50, b"a", b"1"),
        Record(1003, TS, b"b", None, [("h", b"")]),
        Record(1010, TS + 20, b"c", b"3"),
    ]
    header, decoded = decode_records(encode_batch(records, base_offset=1000))
    assert decoded == records
    assert header.last_offset_delta == 10
    assert (header.base_timestamp, header.max_timestamp) == (TS, TS + 50)


def test_base_offset_below_first_record() -> None:
    header, decoded = decode_records(encode_batch([Record(5, TS, None, b"v")], base_offset=2))
    assert (header.base_offset, header.last_offset_delta) == (2, 3)
    assert decoded[0].offset == 5


def test_unicode_and_non_utf8_header_keys_round_trip() -> None:
    records = [Record(0, TS, b"k", b"v", [("ключ-🔑", b"1"), ("raw-\udcff", None)])]
    batch = encode_batch(records)
    assert b"raw-\xff" in batch
    assert decode_records(batch)[1] == records


def test_large_varints() -> None:
    records = [
        Record(0, -(2**40), b"k" * 70_000, b"v" * 300, []),
        Record(2**31 - 1, 2**40, None, b"", [("h" * 200, b"x" * 20_000)]),
    ]
    assert decode_records(encode_batch(records))[1] == records


@pytest.mark.parametrize("codec", CODECS)
def test_empty_batch_is_uncompressed_and_keeps_last_offset(codec: CompressionType) -> None:
    batch = encode_batch([], base_offset=50, compression=codec, producer_id=9,
                         producer_epoch=1, base_sequence=4, last_offset=57)
    assert len(batch) == HEADER_SIZE
    header, decoded = decode_records(batch)
    assert decoded == []
    assert header.compression == CompressionType.NONE
    assert (header.base_offset, header.last_offset, header.records_count) == (50, 57, 0)
    assert (header.base_timestamp, header.max_timestamp) == (NO_TIMESTAMP, NO_TIMESTAMP)
    assert header.last_sequence == 11


def test_empty_batch_without_last_offset() -> None:
    header, decoded = decode_records(encode_batch([]))
    assert decoded == [] and header.last_offset_delta == 0


def test_last_offset_extends_a_compacted_batch() -> None:
    header, _ = decode_records(encode_batch(sample_records(3), last_offset=9))
    assert header.last_offset == 9


def test_log_append_time_batch_reports_max_timestamp() -> None:
    records = sample_records(3)
    header, decoded = decode_records(encode_batch(records, timestamp_type_log_append=True))
    assert header.is_log_append_time
    assert {record.timestamp for record in decoded} == {header.max_timestamp}


def test_control_flag() -> None:
    header, _ = decode_records(encode_batch([Record(0, TS, b"\x00\x00\x00\x01", b"")],
                                            is_control=True, is_transactional=True))
    assert header.is_control and header.is_transactional


@pytest.mark.parametrize(
    ("records", "kwargs"),
    [
        ([Record(1, TS, None, None), Record(1, TS, None, None)], {}),
        ([Record(2, TS, None, None), Record(1, TS, None, None)], {}),
        ([Record(0, TS, None, None)], {"base_offset": 1}),
        ([Record(2**31, TS, None, None)], {}),
        ([Record(3, TS, None, None)], {"last_offset": 2}),
        ([Record(0, 2**63, None, None), Record(1, -(2**63), None, None)], {}),
        ([Record(0, TS, None, None)], {"compression": 5}),
    ],
)
def test_encode_rejects_unrepresentable_batches(records: list[Record], kwargs: dict) -> None:
    with pytest.raises(ValueError):
        encode_batch(records, **kwargs)


# -- framing and corruption -------------------------------------------------------------

def test_iter_batches_stops_at_partial_batch() -> None:
    batches = [encode_batch(sample_records(3, first_offset=3 * i), base_offset=3 * i,
                            compression=CompressionType.LZ4) for i in range(3)]
    buf = b"".join(batches)
    assert [bytes(view) for view in iter_batches(buf)] == batches
    for cut in (1, 11, HEADER_SIZE, len(batches[2]) - 1):
        assert [bytes(view) for view in iter_batches(buf[:-cut])] == batches[:2]
    assert list(iter_batches(b"")) == []
    offsets = [record.offset for view in iter_batches(buf) for record in decode_records(view)[1]]
    assert offsets == list(range(9))


def test_iter_batches_rejects_impossible_size() -> None:
    with pytest.raises(InvalidRecordBatch):
        list(iter_batches(struct.pack(">qi", 0, 3) + bytes(100)))


@pytest.mark.parametrize("codec", CODECS)
def test_flipped_byte_fails_crc(codec: CompressionType) -> None:
    batch = encode_batch(sample_records(4), compression=codec)
    # Attributes, a header field, the record count, and the first and last record bytes.
    for position in (CRC_START, 30, HEADER_SIZE - 1, HEADER_SIZE, len(batch) - 1):
        corrupt = bytearray(batch)
        corrupt[position] ^= 0x01
        with pytest.raises(CorruptRecordBatch):
            validate_batch(corrupt)
        with pytest.raises(CorruptRecordBatch):
            decode_records(corrupt)


def _with_valid_crc(batch: bytes, patch: dict[int, bytes]) -> bytearray:
    patched = bytearray(batch)
    for position, data in patch.items():
        patched[position : position + len(data)] = data
    recompute_crc(patched)
    return patched


@pytest.mark.parametrize("codec", CODECS)
def test_record_count_mismatch_is_invalid(codec: CompressionType) -> None:
    batch = encode_batch(sample_records(4), compression=codec)
    for count in (3, 5):
        with pytest.raises(InvalidRecordBatch):
            decode_records(_with_valid_crc(batch, {57: struct.pack(">i", count)}))


def test_malformed_records_are_invalid_not_crashes() -> None:
    batch = encode_batch([Record(0, TS, b"key", b"value", [("h", b"v")])])
    # The first record's length varint, then its key length varint.
    for position, data in [(HEADER_SIZE, b"\x02"), (HEADER_SIZE, b"\x7e"),
                           (HEADER_SIZE + 4, b"\x7e"), (HEADER_SIZE + 4, b"\x05")]:
        with pytest.raises(InvalidRecordBatch):
            decode_records(_with_valid_crc(batch, {position: data}))
    # An unknown codec id in the attributes.
    with pytest.raises(InvalidRecordBatch):
        decode_records(_with_valid_crc(batch, {22: b"\x06"}))
    # Compressed attribute over uncompressed records.
    with pytest.raises(InvalidRecordBatch):
        decode_records(_with_valid_crc(batch, {22: b"\x03"}))


# -- hypothesis -------------------------------------------------------------------------

_blobs = st.none() | st.binary(max_size=300)
_headers = st.lists(st.tuples(st.text(max_size=20), _blobs), max_size=4)


@st.composite
def _record_lists(draw: st.DrawFn) -> tuple[int, list[Record]]:
    base_offset = draw(st.integers(0, 2**62))
    gaps = draw(st.lists(st.integers(0, 1000), max_size=30))
    first = draw(st.integers(0, 1000))
    timestamps = st.integers(-1, 2**50)
    records = []
    offset = base_offset + first
    for gap in gaps:
        records.append(Record(offset, draw(timestamps), draw(_blobs), draw(_blobs),
                              draw(_headers)))
        offset += gap + 1
    return base_offset, records


@settings(max_examples=300, deadline=None)
@given(_record_lists(), st.sampled_from(CODECS))
def test_round_trip_property(case: tuple[int, list[Record]], codec: CompressionType) -> None:
    base_offset, records = case
    batch = encode_batch(records, base_offset=base_offset, compression=codec)
    header, decoded = decode_records(batch)
    assert decoded == records
    assert header.records_count == len(records)
    assert [bytes(view) for view in iter_batches(batch + batch[:-1])] == [batch]


# -- kafka-python -----------------------------------------------------------------------

@pytest.fixture
def kafka_python_snappy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give kafka-python a snappy module backed by cramjam.

    kafka-python does the xerial framing itself and only needs raw snappy from
    python-snappy, which is not installed; so this still tests its framing code.
    """
    shim = types.SimpleNamespace(
        compress=lambda data: bytes(cramjam.snappy.compress_raw(data)),
        decompress=lambda data: bytes(cramjam.snappy.decompress_raw(data)),
    )
    monkeypatch.setattr(kafka.codec, "snappy", shim)


@pytest.mark.usefixtures("kafka_python_snappy")
@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_our_batches(codec: CompressionType) -> None:
    records = sample_records(10)
    batch = DefaultRecordBatch(encode_batch(records, compression=codec))
    assert batch.validate_crc()
    assert batch.compression_type == codec
    theirs = [Record(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert theirs == records


@pytest.mark.usefixtures("kafka_python_snappy")
@pytest.mark.parametrize("codec", CODECS)
def test_we_read_kafka_python_batches(codec: CompressionType) -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    # kafka-python takes the first record's timestamp as base, so put a later one
    # first to get a negative delta.
    records = sample_records(10)
    records[0].timestamp = TS + 1000
    for r in records:
        builder.append(r.offset, r.timestamp, r.key, r.value, r.headers)
    header, decoded = decode_records(bytes(builder.build()))
    assert header.compression == codec
    assert decoded == records


# -- kio --------------------------------------------------------------------------------

def test_kio_reads_our_batches() -> None:
    # kio rounds timestamps to whole seconds and cannot decompress.
    records = [Record(i, TS + 1000 * i, r.key, r.value, r.headers)
               for i, r in enumerate(sample_records(6))]
    batch, _ = kio_read_batch(encode_batch(records), 0)
    theirs = [
        Record(r.offset, int(r.timestamp.timestamp() * 1000), r.key, r.value,
               [(h.key.decode(), h.value) for h in r.headers])
        for r in batch.records
    ]
    assert theirs == records


def test_we_read_kio_batches() -> None:
    records = [Record(i, TS + 1000 * i, r.key, r.value, r.headers)
               for i, r in enumerate(sample_records(6))]
    kio_records = tuple(
        KioRecord(
            attributes=i8(0),
            timestamp=TZAwareMicros.parse(
                datetime.datetime.fromtimestamp(r.timestamp / 1000, datetime.UTC)),
            offset=i64(r.offset), key=r.key, value=r.value,
            headers=tuple(KioRecordHeader(key=k.encode(), value=v) for k, v in r.headers),
        )
        for r in records
    )
    out = io.BytesIO()
    kio_write_new_batch(out, KioNewRecordBatch(
        producer_id=i64(-1), producer_epoch=i16(-1), base_sequence=i32(-1),
        records=kio_records, attributes=i16(0)))
    assert decode_records(out.getvalue())[1] == records


# -- librdkafka (confluent-kafka's mock cluster) ----------------------------------------

def _kafka_string(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def _kafka_call(address: str, api_key: int, version: int, body: bytes) -> bytes:
    """One request/response on a fresh connection; returns the response body."""
    host, port = address.rsplit(":", 1)
    payload = struct.pack(">hhi", api_key, version, 1) + _kafka_string("gregor-test") + body
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(struct.pack(">i", len(payload)) + payload)
        reader = conn.makefile("rb")
        (size,) = struct.unpack(">i", reader.read(4))
        response = reader.read(size)
    assert len(response) == size
    assert struct.unpack_from(">i", response)[0] == 1
    return response[4:]


def _produce_raw(address: str, topic: str, batch: bytes) -> None:
    """Produce v3 of one batch to partition 0, checking the partition error code."""
    body = (struct.pack(">hhii", -1, 1, 10_000, 1) + _kafka_string(topic)
            + struct.pack(">iii", 1, 0, len(batch)) + batch)
    response = _kafka_call(address, 0, 3, body)
    # topics count, topic name, partitions count, partition index, then error code.
    (name_length,) = struct.unpack_from(">h", response, 4)
    (error,) = struct.unpack_from(">h", response, 4 + 2 + name_length + 8)
    assert error == 0


def _fetch_raw(address: str, topic: str, offset: int = 0) -> bytes:
    """Fetch v4 of partition 0 from ``offset``; returns the raw record set."""
    body = (struct.pack(">iiiibi", -1, 1000, 1, 10_000_000, 0, 1) + _kafka_string(topic)
            + struct.pack(">iiqi", 1, 0, offset, 10_000_000))
    response = _kafka_call(address, 1, 4, body)
    # throttle, topics count, topic name, partitions count, partition index.
    (name_length,) = struct.unpack_from(">h", response, 8)
    pos = 8 + 2 + name_length + 8
    error, _high_watermark, _last_stable, aborted = struct.unpack_from(">hqqi", response, pos)
    assert error == 0
    pos += 22 + 16 * max(aborted, 0)
    (size,) = struct.unpack_from(">i", response, pos)
    return response[pos + 4 : pos + 4 + size]


@pytest.fixture(scope="module")
def mock_cluster() -> Iterator[tuple[Producer, str]]:
    """A librdkafka mock cluster, owned by a producer that also creates topics."""
    owner = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    broker = next(iter(owner.list_topics(timeout=10).brokers.values()))
    yield owner, f"{broker.host}:{broker.port}"
    owner.flush(5)


def _create_topic(owner: Producer, topic: str) -> None:
    # The mock cluster has no controller for CreateTopics; it auto-creates on metadata.
    assert topic in owner.list_topics(topic=topic, timeout=10).topics


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_reads_our_batches(mock_cluster: tuple[Producer, str],
                                      codec: CompressionType) -> None:
    owner, address = mock_cluster
    topic = f"ours-{codec.name.lower()}"
    _create_topic(owner, topic)
    records = sample_records(10)
    _produce_raw(address, topic, encode_batch(records, compression=codec))

    consumer = Consumer({"bootstrap.servers": address, "group.id": topic, "check.crcs": True,
                         "enable.auto.commit": False, "log_level": 3})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        received = []
        while len(received) < len(records):
            message = consumer.poll(10)
            assert message is not None, "librdkafka delivered nothing"
            assert message.error() is None, message.error()
            received.append(Record(message.offset(), message.timestamp()[1], message.key(),
                                   message.value(), message.headers() or []))
    finally:
        consumer.close()
    assert received == records


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_librdkafka_batches(mock_cluster: tuple[Producer, str],
                                    codec: CompressionType) -> None:
    owner, address = mock_cluster
    topic = f"theirs-{codec.name.lower()}"
    _create_topic(owner, topic)
    producer = Producer({"bootstrap.servers": address, "compression.type": codec.name.lower(),
                         "linger.ms": 200, "log_level": 3})
    records = sample_records(10)
    for r in records:
        producer.produce(topic, key=r.key, value=r.value, headers=r.headers or None,
                         partition=0, timestamp=r.timestamp)
    assert producer.flush(10) == 0

    decoded: list[Record] = []
    codecs_seen: set[CompressionType] = set()
    while len(decoded) < len(records):
        # On a loaded machine librdkafka may split the records into several batches,
        # and the mock broker answers a fetch with one of them.
        batches = list(iter_batches(_fetch_raw(address, topic, offset=len(decoded))))
        assert batches, f"no batch at offset {len(decoded)}"
        for view in batches:
            header, batch_records = decode_records(view)
            # librdkafka sends a batch uncompressed when compressing does not shrink it,
            # as a split-off batch holding only a null value does.
            assert header.compression in (codec, CompressionType.NONE)
            codecs_seen.add(header.compression)
            if codec is CompressionType.SNAPPY:
                # librdkafka writes raw snappy in v2 batches, exercising the non-xerial path.
                assert bytes(view[HEADER_SIZE : HEADER_SIZE + 8]) != b"\x82SNAPPY\x00"
            decoded.extend(batch_records)
    assert decoded == records
    # Every batch holding one of the repeated values shrinks, so at least one is compressed.
    assert codec in codecs_seen
