"""The hand-written Produce request decoder reads what kio reads, field for field, in
every version the broker serves; refuses every frame cut short; and hands the record
sets out as views of the frame, writable when the frame is, which the log stamps in
place."""

from __future__ import annotations

import datetime
import struct

import pytest
from kio.index import load_request_schema
from kio.serial import entity_reader

from gregor.protocol import produce_request, record_batch
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import MalformedRequest, build, decode_request, encode_request
from tests.storage_helpers import batch, open_log, read_all

_SIZE = struct.Struct(">i")


def _request(version: int, transactional_id: str | None,
             topics: dict[str, list[tuple[int, bytes | None]]], acks: int = -1,
             timeout_ms: int = 30000) -> bytes:
    """A request frame (without its size prefix) as kio writes it."""
    schema = load_request_schema(ApiKey.PRODUCE, version)
    module = __import__(schema.__module__, fromlist=["TopicProduceData"])
    body = build(schema, transactional_id=transactional_id, acks=acks,
                 timeout=datetime.timedelta(milliseconds=timeout_ms),
                 topic_data=tuple(build(module.TopicProduceData, name=name, partition_data=tuple(
                     build(module.PartitionProduceData, index=index, records=records)
                     for index, records in partitions)) for name, partitions in topics.items()))
    return encode_request(ApiKey.PRODUCE, version, 7, "client-é", body)[_SIZE.size:]


def _kio(frame: bytes, version: int):
    schema = load_request_schema(ApiKey.PRODUCE, version)
    header, size = entity_reader(schema.__header_schema__)(frame, 0)
    return header, entity_reader(schema)(frame, size)[0]


_TOPICS = {
    "orders": [(0, batch(2)), (5, None), (9, b"")],
    "é-events": [(2, batch(1, value_size=3000) + batch(1, tag="w"))],
}


@pytest.mark.parametrize("version", produce_request.VERSIONS)
@pytest.mark.parametrize("transactional_id", [None, "", "tx-é"])
def test_every_field_is_kio_s(version: int, transactional_id: str | None) -> None:
    frame = _request(version, transactional_id, _TOPICS, acks=1, timeout_ms=1234)
    header, ours = decode_request(frame)
    kio_header, theirs = _kio(frame, version)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        ApiKey.PRODUCE, version, kio_header.correlation_id, kio_header.client_id)
    assert isinstance(ours, produce_request.ProduceRequest)
    assert (ours.transactional_id, ours.acks, ours.timeout) == (
        theirs.transactional_id, theirs.acks, theirs.timeout)
    assert [(t.name, [(p.index, None if p.records is None else bytes(p.records))
                      for p in t.partition_data]) for t in ours.topic_data] == [
        (t.name, [(p.index, p.records) for p in t.partition_data]) for t in theirs.topic_data]


def test_unknown_tagged_fields_are_skipped_at_every_level() -> None:
    """Flexible versions may carry tags a newer client adds; Kafka skips those it does
    not know, in the header, the body, each topic and each partition."""
    plain = _request(9, None, {"t": [(1, b"abc")]})
    tag = b"\x01\x05\x02zz"  # one tagged field, tag 5, two bytes
    # The header's tags follow the client id; the others are the frame's last three
    # empty tag sections (partition, topic, body), in that order.
    client_end = 8 + 2 + len("client-é".encode())
    assert plain[client_end] == 0 and plain[-3:] == b"\x00\x00\x00"
    tagged = (plain[:client_end] + tag + plain[client_end + 1:-3] + tag * 3)
    _, ours = decode_request(tagged)
    assert [(t.name, [(p.index, bytes(p.records or b"")) for p in t.partition_data])
            for t in ours.topic_data] == [("t", [(1, b"abc")])]


@pytest.mark.parametrize("version", [3, 8, 9])
def test_a_frame_cut_anywhere_is_refused(version: int) -> None:
    frame = _request(version, "tx", _TOPICS)
    for end in range(len(frame)):
        with pytest.raises(MalformedRequest):
            decode_request(frame[:end])


@pytest.mark.parametrize(("version", "count"), [(8, b"\x7f\xff\xff\xff"), (9, b"\xff\xff\xff\x07")])
def test_a_made_up_count_fails_at_the_frame_s_end(version: int, count: bytes) -> None:
    """Two billion topics claimed in a few bytes: refused at the first one missing,
    without allocating for them (kio needed the array guard for this)."""
    frame = _request(version, None, {})
    empty_array = b"\x00\x00\x00\x00" if version < 9 else b"\x01"
    body_end = len(frame) - (1 if version >= 9 else 0)
    cut = body_end - len(empty_array)
    assert frame[cut:body_end] == empty_array
    with pytest.raises(MalformedRequest):
        decode_request(frame[:cut] + count + frame[body_end:])


@pytest.mark.parametrize("version", [8, 9])
def test_a_null_topic_array_is_refused(version: int) -> None:
    frame = _request(version, None, {})
    null = b"\xff\xff\xff\xff" if version < 9 else b"\x00"
    body_end = len(frame) - (1 if version >= 9 else 0)
    cut = body_end - (4 if version < 9 else 1)
    with pytest.raises(MalformedRequest):
        decode_request(frame[:cut] + null + frame[body_end:])


def test_record_sets_are_views_of_the_frame_and_writable_only_when_it_is() -> None:
    frame = _request(9, None, {"t": [(0, batch(1))]})
    _, from_bytes = decode_request(frame)
    records = from_bytes.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.readonly
    buffer = bytearray(frame)
    _, from_buffer = decode_request(memoryview(buffer))
    records = from_buffer.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and not records.readonly
    records[0] = 0xAB
    assert buffer[len(frame) - len(records) - 3] == 0xAB  # before partition, topic, body tags


def test_the_log_stamps_offsets_into_a_writable_record_set_in_place(tmp_path) -> None:
    """What the broker writes is the received buffer itself, stamped; a read-only set
    (a small request received as bytes) is copied and its source left as it was."""
    log = open_log(tmp_path / "t-0")
    try:
        log.append_as_leader(batch(1, tag="first"), leader_epoch=3)
        received = bytearray(batch(2, tag="second"))
        log.append_as_leader(memoryview(received), leader_epoch=3)
        header = record_batch.read_header(received)
        assert (header.base_offset, header.partition_leader_epoch) == (1, 3)
        untouched = batch(1, tag="third")
        log.append_as_leader(memoryview(untouched), leader_epoch=3)
        assert record_batch.read_header(untouched).base_offset == 0
        assert [(r.offset, r.value) for r in read_all(log)] == [
            (0, b"first-0"), (1, b"second-0"), (2, b"second-1"), (3, b"third-0")]
    finally:
        log.close()
