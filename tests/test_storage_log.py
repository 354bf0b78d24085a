"""Log on its own: offsets, reads across segments, rolling, time lookups, truncation,
reopening, and idempotent-producer state that survives restarts."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest
from storage_helpers import (
    BASE_TS,
    batch,
    batch_offsets,
    decode_region,
    open_log,
    read_all,
    topic_config,
)

from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_batch import CRC_START, crc32c
from gregor.protocol.record_codec import Record, encode_batch
from gregor.storage.log import Log, LogAppendError, OffsetOutOfRange
from gregor.storage.producer_state import SNAPSHOT_SUFFIX

SMALL = {"segment_bytes": 2000, "index_interval_bytes": 150}


def fill(log: Log, batches: int, tag: str = "v", **kwargs: object) -> list[tuple[int, int]]:
    """Append ``batches`` batches of 1..4 records; the offset span of each."""
    spans = []
    for i in range(batches):
        result = log.append_as_leader(batch(1 + i % 4, tag=f"{tag}{i}", **kwargs), 0)
        spans.append((result.first_offset, result.last_offset))
    return spans


def test_offsets_are_contiguous_and_every_offset_reads_its_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(**SMALL))
    spans = fill(log, 120, value_size=20)
    assert spans[0][0] == 0
    assert all(b[0] == a[1] + 1 for a, b in zip(spans, spans[1:], strict=False))
    assert len(log.segments) > 5
    assert [s.base_offset for s in log.segments[1:]] == [
        s.next_offset for s in log.segments[:-1]]
    for first, last in spans:
        for offset in range(first, last + 1):
            assert batch_offsets(log.read(offset, 1))[0] == (first, last)
    records = read_all(log)
    assert [r.offset for r in records] == list(range(log.log_end_offset))
    assert records[0].value == b"v0-0".ljust(20, b".")


def test_reads_stop_at_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(**SMALL))
    spans = fill(log, 60)
    high_watermark = spans[40][0]
    got = []
    offset = 0
    while True:
        region = log.read(offset, 500, max_offset=high_watermark)
        if region is None:
            break
        got.extend(batch_offsets(region))
        offset = got[-1][1] + 1
    assert got == spans[:40]
    assert log.read(high_watermark, 1 << 20, max_offset=high_watermark) is None


def test_max_bytes_and_the_first_batch_rule(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    big = log.append_as_leader(batch(3, value_size=3000), 0)
    log.append_as_leader(batch(1, value_size=10), 0)
    # KIP-74: the first batch comes whole even though it is larger than max_bytes ...
    assert batch_offsets(log.read(1, 100)) == [(big.first_offset, big.last_offset)]
    # ... unless another partition of the fetch already returned data.
    region = log.read(1, 100, min_one_batch=False)
    assert region is not None and region.length == 100
    assert batch_offsets(region) == []
    assert batch_offsets(log.read(0, 1 << 20)) == [(0, 2), (3, 3)]


def test_reads_outside_the_log_are_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    assert log.read(log.log_end_offset, 1000) is None
    with pytest.raises(OffsetOutOfRange):
        log.read(log.log_end_offset + 1, 1000)
    log.advance_log_start_offset(2)
    with pytest.raises(OffsetOutOfRange):
        log.read(1, 1000)
    assert batch_offsets(log.read(2, 1000))[0][0] <= 2


def test_segments_roll_at_segment_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(segment_bytes=1500))
    fill(log, 50, value_size=30)
    assert len(log.segments) > 3
    assert all(s.size <= 1500 for s in log.segments)
    # Every closed segment was full: the next batch would not have fitted.
    assert all(s.size > 1500 - 300 for s in log.segments[:-1])


def test_segments_roll_at_segment_ms_of_record_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(segment_ms=1000))
    log.append_as_leader(batch(1, timestamp=BASE_TS), 0)
    log.append_as_leader(batch(1, timestamp=BASE_TS + 1000), 0)
    assert len(log.segments) == 1
    log.append_as_leader(batch(1, timestamp=BASE_TS + 1001), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_replaying_old_timestamps_does_not_roll_every_batch(tmp_path: Path) -> None:
    """segment.ms is measured in the records' own time, as in Kafka, so importing data
    from years ago does not give each batch its own segment."""
    log = open_log(tmp_path, topic_config(segment_ms=60_000))
    for i in range(20):
        log.append_as_leader(batch(2, timestamp=1_262_304_000_000 + i), 0)
    assert len(log.segments) == 1


def test_segments_without_timestamps_roll_on_wall_clock(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(segment_ms=1000))
    now = int(time.time() * 1000)
    log.append_as_leader(batch(1, timestamp=-1), 0, now_ms=now)
    log.append_as_leader(batch(1, timestamp=-1), 0, now_ms=now + 500)
    assert len(log.segments) == 1
    log.append_as_leader(batch(1, timestamp=-1), 0, now_ms=now + 5000)
    assert len(log.segments) == 2


def test_segments_roll_when_the_index_is_full(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(segment_index_bytes=32, index_interval_bytes=0))
    fill(log, 20)
    # Four 8-byte entries fill the index; the first batch of a segment is not indexed.
    assert all(len(s.offset_index) <= 4 for s in log.segments)
    assert len(log.segments) == 4
    assert [r.offset for r in read_all(log)] == list(range(log.log_end_offset))


def test_offset_for_timestamp_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(**SMALL))
    for i in range(100):
        # Timestamps rise overall but jitter inside a batch.
        log.append_as_leader(batch(3, timestamps=[BASE_TS + 30 * i + 20, BASE_TS + 30 * i,
                                                  BASE_TS + 30 * i + 10]), 0)
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(0) == (0, BASE_TS + 20)
    assert log.offset_for_timestamp(BASE_TS + 1500) == (150, BASE_TS + 1520)
    assert log.offset_for_timestamp(BASE_TS + 1501) == (150, BASE_TS + 1520)
    assert log.offset_for_timestamp(BASE_TS + 1511) == (150, BASE_TS + 1520)
    assert log.offset_for_timestamp(BASE_TS + 1521) == (153, BASE_TS + 1550)
    assert log.offset_for_timestamp(BASE_TS + 3000) is None
    assert log.max_timestamp_offset() == (297, BASE_TS + 2990)
    log.advance_log_start_offset(151)
    assert log.offset_for_timestamp(0) == (151, BASE_TS + 1500)


def test_offset_for_timestamp_looks_past_batches_below_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(3, timestamps=[BASE_TS + 50, BASE_TS, BASE_TS]), 0)
    log.append_as_leader(batch(1, timestamp=BASE_TS + 10), 0)
    log.advance_log_start_offset(1)
    assert log.offset_for_timestamp(BASE_TS + 5) == (3, BASE_TS + 10)


def test_truncate_to_across_segments_then_append(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(**SMALL))
    spans = [log.append_as_leader(batch(2, producer_id=7, producer_epoch=0, base_sequence=2 * i),
                                  0).first_offset for i in range(80)]
    cut = spans[30]
    log.truncate_to(cut)
    assert log.log_end_offset == cut
    assert log.active_segment.base_offset <= cut
    assert [r.offset for r in read_all(log)] == list(range(cut))
    result = log.append_as_leader(batch(2, tag="after"), 0)
    assert (result.first_offset, result.last_offset) == (cut, cut + 1)
    assert [r.value for r in read_all(log, cut)] == [b"after-0", b"after-1"]
    # The producer state went back with the log: batch 30 is new again, 29 a duplicate.
    assert log.append_as_leader(
        batch(2, producer_id=7, producer_epoch=0, base_sequence=58), 0).duplicate
    assert not log.append_as_leader(
        batch(2, producer_id=7, producer_epoch=0, base_sequence=60), 0).duplicate


def test_truncate_below_the_log_start_restarts_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(**SMALL))
    fill(log, 40)
    log.advance_log_start_offset(50)
    log.truncate_to(20)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (20, 20, 1)
    assert log.append_as_leader(batch(1), 0).first_offset == 20


def test_clean_reopen_restores_state_without_rescanning(tmp_path: Path) -> None:
    config = topic_config(**SMALL)
    log = open_log(tmp_path, config)
    spans = fill(log, 60, value_size=10)
    before = [(s.base_offset, s.size, s.next_offset, s.max_timestamp) for s in log.segments]
    records = read_all(log)
    log.close()
    # Flip a byte inside an early batch's records: only a rescan would notice.
    victim = log.segments[1].log_path
    with open(victim, "r+b") as handle:
        handle.seek(CRC_START + 50)
        byte = handle.read(1)
        handle.seek(CRC_START + 50)
        handle.write(bytes([byte[0] ^ 0xFF]))
    reopened = open_log(tmp_path, config)
    assert [(s.base_offset, s.size, s.next_offset, s.max_timestamp)
            for s in reopened.segments] == before
    assert [r.offset for r in read_all(reopened, spans[-1][0])] == list(
        range(spans[-1][0], spans[-1][1] + 1))
    assert len(read_all(reopened, log.segments[2].base_offset)) == len(
        [r for r in records if r.offset >= log.segments[2].base_offset])
    reopened.close()
    # An unclean open from recovery point 0 checks every CRC and cuts at the damage.
    recovered = open_log(tmp_path, config, recover=True, recovery_point=0)
    assert recovered.log_end_offset == before[1][0]
    assert len(recovered.segments) == 2


def test_idempotent_duplicates_and_sequence_errors(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append_as_leader(batch(3, producer_id=5, producer_epoch=0, base_sequence=0), 0)
    log.append_as_leader(batch(2, producer_id=5, producer_epoch=0, base_sequence=3), 0)
    retry = log.append_as_leader(batch(3, producer_id=5, producer_epoch=0, base_sequence=0), 0)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, 2)
    assert log.log_end_offset == 5 and first.first_offset == 0
    with pytest.raises(LogAppendError) as gap:
        log.append_as_leader(batch(1, producer_id=5, producer_epoch=0, base_sequence=7), 0)
    assert gap.value.error == ErrorCode.out_of_order_sequence_number
    with pytest.raises(LogAppendError) as fenced:
        log.append_as_leader(batch(1, producer_id=5, producer_epoch=-1, base_sequence=5), 0)
    assert fenced.value.error == ErrorCode.invalid_producer_epoch
    with pytest.raises(LogAppendError) as new_epoch:
        log.append_as_leader(batch(1, producer_id=5, producer_epoch=1, base_sequence=4), 0)
    assert new_epoch.value.error == ErrorCode.out_of_order_sequence_number
    assert not log.append_as_leader(
        batch(1, producer_id=5, producer_epoch=1, base_sequence=0), 0).duplicate
    assert log.log_end_offset == 6


def test_batches_of_one_append_continue_each_others_sequences(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    data = (batch(2, producer_id=9, producer_epoch=0, base_sequence=0)
            + batch(3, producer_id=9, producer_epoch=0, base_sequence=2))
    result = log.append_as_leader(data, 0)
    assert (result.first_offset, result.last_offset) == (0, 4)
    bad = (batch(1, producer_id=9, producer_epoch=0, base_sequence=5)
           + batch(1, producer_id=9, producer_epoch=0, base_sequence=9))
    with pytest.raises(LogAppendError) as error:
        log.append_as_leader(bad, 0)
    assert error.value.error == ErrorCode.out_of_order_sequence_number
    assert log.log_end_offset == 5


@pytest.mark.parametrize("how", ["clean", "unclean", "unclean without snapshots"])
def test_duplicates_are_still_detected_after_a_restart(tmp_path: Path, how: str) -> None:
    config = topic_config(**SMALL)
    log = open_log(tmp_path, config)
    spans = []
    for i in range(40):
        result = log.append_as_leader(
            batch(2, tag=f"p{i}", producer_id=11, producer_epoch=3, base_sequence=2 * i), 0)
        spans.append((result.first_offset, result.last_offset))
        fill(log, 1, tag=f"other{i}")
    assert len(log.segments) > 2
    assert list(tmp_path.glob("*" + SNAPSHOT_SUFFIX))
    if how == "clean":
        log.close()
    if how == "unclean without snapshots":
        for snapshot in tmp_path.glob("*" + SNAPSHOT_SUFFIX):
            snapshot.unlink()
    reopened = open_log(tmp_path, config, recover=how != "clean")
    end = reopened.log_end_offset
    # The last five batches of a producer are remembered, as librdkafka may retry them.
    for i in range(35, 40):
        retry = reopened.append_as_leader(
            batch(2, tag=f"p{i}", producer_id=11, producer_epoch=3, base_sequence=2 * i), 0)
        assert retry.duplicate and (retry.first_offset, retry.last_offset) == spans[i]
    assert reopened.log_end_offset == end
    with pytest.raises(LogAppendError):
        reopened.append_as_leader(
            batch(1, producer_id=11, producer_epoch=3, base_sequence=81), 0)
    assert not reopened.append_as_leader(
        batch(1, producer_id=11, producer_epoch=3, base_sequence=80), 0).duplicate


def test_a_snapshot_at_clean_close_means_no_replay(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(2, producer_id=1, producer_epoch=0, base_sequence=0), 0)
    log.close()
    snapshots = sorted(tmp_path.glob("*" + SNAPSHOT_SUFFIX))
    assert snapshots[-1].name == f"{2:020d}{SNAPSHOT_SUFFIX}"
    # With the log's only batch gone, the producer can only be known from the snapshot.
    reopened = open_log(tmp_path)
    assert reopened.producer_state.last_sequence(1) == (0, 1)


@pytest.mark.parametrize("damage", ["count above delta", "count below delta", "no records"])
def test_batches_whose_count_and_offsets_disagree_are_rejected(tmp_path: Path,
                                                               damage: str) -> None:
    if damage == "no records":
        data = encode_batch([])
    else:
        records = [Record(i, BASE_TS, b"k", b"v") for i in range(3)]
        data = encode_batch(records, last_offset=5 if damage == "count below delta" else None)
        if damage == "count above delta":
            data = encode_batch(records[:1] + [Record(1, BASE_TS, b"k", b"v")])
            data = _with_count(data, 5)
    log = open_log(tmp_path)
    with pytest.raises(LogAppendError) as error:
        log.append_as_leader(data, 0)
    assert error.value.error == ErrorCode.invalid_record
    assert log.log_end_offset == 0 and log.size == 0


def _with_count(data: bytes, count: int) -> bytes:
    """Rewrite recordsCount and fix the CRC, as a buggy client could send it."""
    buf = bytearray(data)
    struct.pack_into(">i", buf, 57, count)
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[CRC_START:]))
    return bytes(buf)


def test_corrupt_oversized_and_empty_appends_are_rejected(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(max_message_bytes=500))
    corrupt = bytearray(batch(2))
    corrupt[-1] ^= 1
    cases = [(bytes(corrupt), ErrorCode.corrupt_message),
             (batch(1, value_size=600), ErrorCode.message_too_large),
             (b"", ErrorCode.invalid_record),
             (batch(1)[:-3], ErrorCode.corrupt_message)]
    for data, error in cases:
        with pytest.raises(LogAppendError) as raised:
            log.append_as_leader(data, 0)
        assert raised.value.error == error
    assert log.size == 0


def test_compacted_topics_refuse_keyless_records(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(cleanup_policy="compact"))
    with pytest.raises(LogAppendError) as error:
        log.append_as_leader(batch(2, keyed=False), 0)
    assert error.value.error == ErrorCode.invalid_record
    assert log.append_as_leader(batch(2), 0).last_offset == 1


def test_leader_epochs_follow_appends_and_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(3), 0)
    log.append_as_leader(batch(2), 4)
    log.append_as_leader(batch(2), 4)
    log.append_as_leader(batch(1), 6)
    cache = log.leader_epoch_cache
    assert list(zip(cache.epochs, cache.start_offsets, strict=True)) == [(0, 0), (4, 3), (6, 7)]
    assert cache.end_offset_for(4, log.log_end_offset) == (4, 7)
    log.truncate_to(5)
    assert cache.epochs == [0, 4]
    assert decode_region(log.read(0, 1 << 20))[0].offset == 0
    reopened = open_log(tmp_path)
    assert reopened.leader_epoch_cache.epochs == [0, 4]


def test_flush_messages_moves_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(flush_messages=5))
    log.append_as_leader(batch(4), 0)
    assert log.recovery_point == 0
    log.append_as_leader(batch(1), 0)
    assert log.recovery_point == log.log_end_offset == 5


def test_orphan_index_files_are_removed_on_open(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(**SMALL))
    fill(log, 40)
    log.close()
    orphan = log.segments[0].log_path
    os.unlink(orphan)
    reopened = open_log(tmp_path, topic_config(**SMALL))
    assert not orphan.with_suffix(".index").exists()
    assert not orphan.with_suffix(".timeindex").exists()
    assert reopened.log_start_offset == log.segments[1].base_offset


def test_clean_reopen_trusts_segments_too_coarse_for_index_entries(tmp_path: Path) -> None:
    """Batches larger than the segment get a segment each and no index entry; their
    empty index files still spare a clean restart from rechecking them."""
    config = topic_config(segment_bytes=1000)
    log = open_log(tmp_path, config)
    for _ in range(3):
        log.append_as_leader(batch(2, value_size=2000), 0)
    assert [len(s.offset_index) for s in log.segments] == [0, 0, 0]
    log.close()
    flip = log.segments[0].log_path
    with open(flip, "r+b") as handle:
        handle.seek(200)
        handle.write(b"?")
    reopened = open_log(tmp_path, config)
    assert reopened.segments[0].size == log.segments[0].size
    assert reopened.log_end_offset == 6
