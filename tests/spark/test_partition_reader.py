"""What the reader makes of a Fetch answer, for the cases a gregor broker cannot produce
on demand (control batches: it has no transactions yet) or only by luck (a batch that
starts before the requested offset, an answer with no batch at all).  The answers are
kio's own FetchResponse partitions; nothing is sent, because the ranges end where the
answers do."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.fetch.v12 import response as fetch_response

from gregor.protocol.codec import build
from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_codec import Record, encode_batch
from gregor.spark.partition_leader import FetchSettings, PartitionLeader
from gregor.spark.partition_range import DataLossError, PartitionRange, ReadSettings
from gregor.spark.partition_reader import _RangeReader
from gregor.spark.record_columns import ChunkBuilder

FETCH = FetchSettings(bootstrap=(("127.0.0.1", 1),))


def answer(records: bytes, high_watermark: int) -> Any:
    return build(fetch_response.PartitionData, partition_index=0, error_code=ErrorCode.none,
                 high_watermark=high_watermark, last_stable_offset=high_watermark,
                 log_start_offset=0, aborted_transactions=(), preferred_read_replica=-1,
                 records=records)


def reader(start: int, end: int, fail_on_data_loss: bool = True) -> _RangeReader:
    part = PartitionRange("t", 0, start, end, ReadSettings(FETCH, False, fail_on_data_loss, 1000))
    return _RangeReader(PartitionLeader("t", 0, FETCH), part)


def offsets(taken: list, start: int, end: int) -> list[int]:
    builder = ChunkBuilder("t", 0, end, False)
    for records, header in taken:
        builder.add(records, header, start)
    built = builder.build()
    return [] if built is None else built.column("offset").to_pylist()


def test_control_batches_and_records_before_the_fetch_offset_are_skipped() -> None:
    data = [Record(o, 1000 + o, b"k", b"v%d" % o) for o in range(5)]
    marker = [Record(5, 2000, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")]
    later = [Record(o, 1000 + o, None, b"v%d" % o) for o in range(6, 9)]
    records = (encode_batch(data, compression=1)
               + encode_batch(marker, base_offset=5, is_control=True, is_transactional=True)
               + encode_batch(later, base_offset=6, compression=4))
    read = reader(3, 9)
    taken = read._take(answer(records, 9))
    assert offsets(taken, 3, 9) == [3, 4, 6, 7, 8]
    assert read.position == 9


def test_a_batch_wholly_before_the_position_and_a_partial_last_batch_are_left_out() -> None:
    first = encode_batch([Record(o, 1, None, b"x") for o in range(4)])
    second = encode_batch([Record(o, 1, None, b"y") for o in range(4, 6)], base_offset=4)
    read = reader(4, 6)
    taken = read._take(answer(first + second + second[:20], 6))
    assert offsets(taken, 4, 6) == [4, 5]


def test_no_batch_below_a_high_watermark_past_the_end_means_the_rest_are_gaps() -> None:
    read = reader(10, 20)
    assert read._take(answer(b"", 25)) == []
    assert read.position == 20


def test_a_log_ending_below_the_range_is_waited_for_then_data_loss() -> None:
    waiting = reader(10, 20)
    waiting._take(answer(b"", 10))  # a new leader's high watermark may still move on
    assert waiting.position == 10
    waiting.deadline = 0.0  # kafkaConsumer.pollTimeoutMs passed without progress
    with pytest.raises(DataLossError, match="t-0: expected records up to offset 20, but the "
                                            "log now ends at offset 10"):
        waiting._take(answer(b"", 10))
    tolerant = reader(10, 20, fail_on_data_loss=False)
    tolerant.deadline = 0.0
    tolerant._take(answer(b"", 10))
    assert tolerant.position == 20
