"""The hand-written Produce response encoder says, byte for byte, what kio says, in
every version the broker serves, throttled or not."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import pytest

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, encode_response, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.protocol.produce_response import (
    MAX_VERSION,
    MIN_VERSION,
    RECORD_ERRORS_FROM,
    encode_produce_response,
    with_throttle,
)

_KEY = ApiKey.PRODUCE


@dataclass
class Answer:
    error: int = ErrorCode.none
    message: str | None = None
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: tuple[tuple[int, str], ...] = ()


TOPICS = [
    ("orders", [(0, Answer(base_offset=1234567890123, log_start_offset=17)),
                (5, Answer(base_offset=9, log_append_time_ms=1795932015000, log_start_offset=0)),
                (2, Answer(ErrorCode.invalid_record, "record 3 has no key", record_errors=(
                    (3, "compacted topic: a record needs a key"), (7, "no key too"))))]),
    ("é-topic", [(1, Answer(ErrorCode.not_leader_or_follower))]),
    ("empty", []),
]


def _kio(version: int, throttle_ms: int) -> bytes:
    partition_cls = nested(_KEY, version, "PartitionProduceResponse")
    topic_cls = nested(_KEY, version, "TopicProduceResponse")
    record_error_cls = (nested(_KEY, version, "BatchIndexAndErrorMessage")
                        if version >= RECORD_ERRORS_FROM else None)

    def when(ms: int) -> datetime.datetime | None:
        return None if ms < 0 else datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)

    body = build(response_schema(_KEY, version), throttle_time=datetime.timedelta(
        milliseconds=throttle_ms), responses=tuple(
        build(topic_cls, name=name, partition_responses=tuple(
            build(partition_cls, index=index, error_code=ErrorCode(a.error),
                  base_offset=a.base_offset, log_append_time=when(a.log_append_time_ms),
                  log_start_offset=a.log_start_offset, error_message=a.message,
                  record_errors=() if record_error_cls is None else tuple(
                      build(record_error_cls, batch_index=i, batch_index_error_message=why)
                      for i, why in a.record_errors))
            for index, a in partitions))
        for name, partitions in TOPICS))
    return encode_response(_KEY, version, 42, body)


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_answers_are_kio_s_byte_for_byte(version: int) -> None:
    assert encode_produce_response(version, 42, 0, TOPICS) == _kio(version, 0)


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_a_throttled_answer_is_kio_s_too(version: int) -> None:
    assert with_throttle(encode_produce_response(version, 42, 0, TOPICS), version,
                         2500) == _kio(version, 2500)
