"""The follower's hand-written Fetch v12 codec says what kio says: its requests byte
for byte, and every field a follower reads from an answer, whether kio or the
leader's own encoder wrote it."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.fetch.v12 import request as kio_request
from kio.schema.fetch.v12 import response as kio_response

from gregor.cluster.broker_channel import CLIENT_ID
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, encode_request, encode_response
from gregor.protocol.errors import ErrorCode
from gregor.protocol.fetch_response import FetchedPartition, encode_fetch_response
from gregor.protocol.replica_fetch import (
    VERSION,
    EpochEnd,
    Position,
    decode_response,
)
from gregor.protocol.replica_fetch import encode_request as encode_fetch_request


def _kio_request(correlation_id: int, topics: dict[str, list[Position]],
                 forgotten: dict[str, list[int]], session_id: int, epoch: int) -> bytes:
    body = build(
        kio_request.FetchRequest, replica_id=2, max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1, max_bytes=10 << 20, session_id=session_id, session_epoch=epoch,
        topics=tuple(build(kio_request.FetchTopic, topic=name, partitions=tuple(
            build(kio_request.FetchPartition, partition=p.partition,
                  current_leader_epoch=p.current_leader_epoch, fetch_offset=p.fetch_offset,
                  last_fetched_epoch=p.last_fetched_epoch, log_start_offset=p.log_start_offset,
                  partition_max_bytes=p.partition_max_bytes) for p in positions))
            for name, positions in topics.items()),
        forgotten_topics_data=tuple(build(kio_request.ForgottenTopic, topic=name,
                                          partitions=tuple(indexes))
                                    for name, indexes in forgotten.items()))
    return encode_request(ApiKey.FETCH, VERSION, correlation_id, CLIENT_ID, body)


@pytest.mark.parametrize(("topics", "forgotten", "session_id", "epoch"), [
    ({}, {}, 0, -1),  # a full fetch naming nothing
    ({"orders": [Position(0, 3, 1234567890123, 2, 17, 1 << 20),
                 Position(7, 0, 0, -1, 0, 1 << 20)],
      "é-topic": [Position(2, 9, 5, 9, -1, 65536)]}, {}, 0, 0),
    ({"orders": [Position(1, 3, 10, 3, 0, 1 << 20)]},
     {"gone": [0, 1, 2], "orders": [5]}, 1938476, 41),
])
def test_requests_are_kio_s_byte_for_byte(topics: dict[str, list[Position]],
                                          forgotten: dict[str, list[int]], session_id: int,
                                          epoch: int) -> None:
    ours = encode_fetch_request(77, CLIENT_ID, 2, 500, 1, 10 << 20, session_id, epoch,
                                topics, forgotten)
    assert ours == _kio_request(77, topics, forgotten, session_id, epoch)


def _kio_answer(correlation_id: int) -> bytes:
    """An answer with what kio can put in one: two topics, a diverging epoch, aborted
    transactions, a null record set, the other tagged fields a follower skips."""
    partition = kio_response.PartitionData
    body = build(kio_response.FetchResponse, throttle_time=datetime.timedelta(milliseconds=25),
                 error_code=ErrorCode.none, session_id=99, responses=(
        build(kio_response.FetchableTopicResponse, topic="orders", partitions=(
            build(partition, partition_index=0, error_code=ErrorCode.none, high_watermark=40,
                  last_stable_offset=38, log_start_offset=3, aborted_transactions=(
                      build(kio_response.AbortedTransaction, producer_id=5, first_offset=7),),
                  preferred_read_replica=-1, records=b"\x01\x02\x03batch bytes"),
            build(partition, partition_index=4, error_code=ErrorCode.none, high_watermark=9,
                  last_stable_offset=9, log_start_offset=0, aborted_transactions=None,
                  diverging_epoch=build(kio_response.EpochEndOffset, epoch=6,
                                        end_offset=1234567890123),
                  current_leader=build(kio_response.LeaderIdAndEpoch, leader_id=3,
                                       leader_epoch=7),
                  preferred_read_replica=2, records=None))),
        build(kio_response.FetchableTopicResponse, topic="second", partitions=(
            build(partition, partition_index=1, error_code=ErrorCode.not_leader_or_follower,
                  high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                  aborted_transactions=(), preferred_read_replica=-1, records=b""),))))
    frame = encode_response(ApiKey.FETCH, VERSION, correlation_id, body)
    return frame[4:]  # the channel hands over frames without their size prefix


def test_answers_read_as_kio_writes_them() -> None:
    correlation_id, answer = decode_response(_kio_answer(31))
    assert (correlation_id, answer.throttle_time_ms, answer.error_code, answer.session_id) == (
        31, 25, 0, 99)
    assert [t.topic for t in answer.responses] == ["orders", "second"]
    first, second = answer.responses[0].partitions
    assert (first.partition_index, first.error_code, first.high_watermark,
            first.last_stable_offset, first.log_start_offset) == (0, 0, 40, 38, 3)
    assert first.records is not None and bytes(first.records) == b"\x01\x02\x03batch bytes"
    assert first.diverging_epoch == EpochEnd()
    assert (second.partition_index, second.high_watermark, second.records) == (4, 9, None)
    assert second.diverging_epoch == EpochEnd(6, 1234567890123)
    (refused,) = answer.responses[1].partitions
    assert (refused.partition_index, refused.error_code) == (
        1, ErrorCode.not_leader_or_follower)
    assert refused.records is not None and bytes(refused.records) == b""


def test_answers_read_as_the_leader_writes_them() -> None:
    """The leader's own encoder (records as chunks it sends with sendfile)."""
    records = bytes(range(256)) * 40
    chunks = encode_fetch_response(VERSION, 8, 0, ErrorCode.none, 12, [
        ("t", [FetchedPartition(0, ErrorCode.none, 100, 100, 0, records),
               FetchedPartition(1, ErrorCode.none, 5, 5, 0, None, diverging_epoch=(2, 4))])])
    frame = b"".join(c if isinstance(c, bytes) else c.read() for c in chunks)[4:]
    correlation_id, answer = decode_response(frame)
    assert (correlation_id, answer.session_id) == (8, 12)
    (topic,) = answer.responses
    full, diverging = topic.partitions
    assert full.records is not None and bytes(full.records) == records
    assert not diverging.records and diverging.diverging_epoch == EpochEnd(2, 4)


@pytest.mark.parametrize("cut", [1, 6, 20, 45, -3])
def test_a_truncated_answer_is_a_value_error(cut: int) -> None:
    """A frame that ends inside a field is refused (the channel closes on ValueError),
    never read past its end."""
    frame = _kio_answer(5)
    with pytest.raises(ValueError):
        decode_response(frame[:cut])
