"""Transactions in one partition's log: what the broker learns from batch headers alone.

Transactional batches hold back the last stable offset (LSO) until their producer's
marker is written; an abort marker indexes the transaction in its segment's
``.txnindex``, which read_committed fetches are answered from. Both survive a
restart, a ``kill -9`` (rebuilt by replaying headers) and a truncation.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from storage_helpers import BASE_TS, open_log, topic_config

from gregor.protocol.control_record import encode_marker
from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_codec import Record, decode_records, encode_batch, iter_batches
from gregor.storage.cleaner import LogCleaner
from gregor.storage.log import AppendOrigin, Log, LogAppendError
from gregor.storage.log_manager import LogManager
from gregor.storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn

TXN = AppendOrigin.TRANSACTIONAL_CLIENT
COORDINATOR = AppendOrigin.COORDINATOR


def txn_batch(pid: int, seq: int, count: int = 2, epoch: int = 0) -> bytes:
    records = [Record(offset=i, timestamp=BASE_TS, key=b"k", value=b"p%d-%d" % (pid, seq + i))
               for i in range(count)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=True)


def end(log: Log, pid: int, commit: bool, epoch: int = 0) -> int:
    marker = encode_marker(pid, epoch, commit, coordinator_epoch=0, timestamp=BASE_TS)
    return log.append_as_leader(marker, 0, origin=COORDINATOR).first_offset


def produce(log: Log, pid: int, seq: int, count: int = 2) -> int:
    return log.append_as_leader(txn_batch(pid, seq, count), 0, origin=TXN).first_offset


def test_transactional_batches_need_a_transactional_request(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(LogAppendError) as refused:
        log.append_as_leader(txn_batch(7, 0), 0)
    assert refused.value.error == ErrorCode.invalid_record
    marker = encode_marker(7, 0, True, 0, BASE_TS)
    for origin in (AppendOrigin.CLIENT, TXN):
        with pytest.raises(LogAppendError, match="broker only"):
            log.append_as_leader(marker, 0, origin=origin)
    assert log.log_end_offset == 0


def test_open_transactions_hold_the_last_stable_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.last_stable_offset(0) == 0
    first_a = produce(log, 1, 0)  # 0-1
    first_b = produce(log, 2, 0)  # 2-3
    produce(log, 1, 2)  # 4-5
    assert log.first_unstable_offset == first_a == 0
    assert log.last_stable_offset(6) == 0
    assert end(log, 1, commit=True) == 6
    assert log.last_stable_offset(7) == first_b == 2
    abort_at = end(log, 2, commit=False)
    assert log.first_unstable_offset is None
    assert log.last_stable_offset(8) == 8
    # The commit was not indexed; the abort was, with the LSO it left behind.
    assert log.aborted_transactions(0, 8) == [AbortedTxn(2, first_b, abort_at, abort_at + 1)]
    assert log.aborted_transactions(4, 8) == [AbortedTxn(2, 2, 7, 8)]
    assert log.aborted_transactions(8, 9) == []
    assert log.aborted_transactions(0, 2) == []


def test_a_verification_guard_lasts_until_the_producer_writes(tmp_path: Path) -> None:
    """KIP-890's guard: a leader asks the coordinator, then appends only if no batch or
    marker of the producer came in meanwhile (which would end the transaction the answer
    was about), unless the producer's transaction is open in the partition anyway."""
    log = open_log(tmp_path)
    ongoing = log.producer_state.transactions
    guard = ongoing.guard(1)
    assert ongoing.guard(1) is guard  # a retry asks under the same guard
    assert ongoing.guarded(1, guard) and not ongoing.guarded(1, object())
    produce(log, 1, 0)  # a verification that came back first: open now
    assert ongoing.guarded(1, guard)
    end(log, 1, commit=False)
    # Asked, then the abort's marker came in before the answer: refused.
    guard = ongoing.guard(1)
    end(log, 1, commit=False)
    assert not ongoing.guarded(1, guard)
    guard = ongoing.guard(1)
    ongoing.drop_guard(1, guard)  # refused by the coordinator
    assert not ongoing.guarded(1, guard)
    assert ongoing.guard(2) is not ongoing.guard(1)


def test_a_marker_of_an_older_epoch_is_fenced(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(3, 0, epoch=2), 0, origin=TXN)
    with pytest.raises(LogAppendError) as fenced:
        end(log, 3, commit=True, epoch=1)
    assert fenced.value.error == ErrorCode.invalid_producer_epoch
    assert log.first_unstable_offset == 0


def test_aborts_are_found_across_segments_and_stop_at_the_upper_bound(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(segment_bytes=200))
    aborted = []
    for seq in range(0, 12, 2):
        first = produce(log, 5, seq)
        marker = end(log, 5, commit=seq % 4 != 0)
        if seq % 4 == 0:
            aborted.append(AbortedTxn(5, first, marker, marker + 1))
    assert len(log.segments) > 3
    assert log.aborted_transactions(0, log.log_end_offset) == aborted
    assert log.aborted_transactions(4, log.log_end_offset) == aborted[1:]
    # An abort whose LSO reaches the upper bound ends the search.
    assert log.aborted_transactions(0, aborted[0].last_offset + 1) == aborted[:1]


def test_a_clean_restart_keeps_open_transactions_and_aborts(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 1, 0)
    end(log, 1, commit=False)
    produce(log, 2, 0)
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.first_unstable_offset == 3
    assert reopened.aborted_transactions(0, 3) == [AbortedTxn(1, 0, 2, 3)]
    assert end(reopened, 2, commit=True) == 5
    assert reopened.first_unstable_offset is None


def test_a_crash_rebuilds_the_index_and_open_transactions_from_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 1, 0)
    produce(log, 2, 0)
    end(log, 1, commit=False)
    log.flush()
    # kill -9 before the index reached the disk, after a torn write of another entry.
    index = next(tmp_path.glob("*" + TXN_INDEX_SUFFIX))
    index.write_bytes(b"\x00\x00\x00")
    reopened = open_log(tmp_path, recover=True, recovery_point=0)
    assert reopened.aborted_transactions(0, 10) == [AbortedTxn(1, 0, 4, 2)]
    assert reopened.first_unstable_offset == 2
    assert index.stat().st_size == 34


def test_truncation_drops_aborts_and_transactions_beyond_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 1, 0)  # 0-1
    end(log, 1, commit=False)  # 2
    produce(log, 2, 0)  # 3-4
    end(log, 2, commit=False)  # 5
    log.truncate_to(5)
    assert log.aborted_transactions(0, 10) == [AbortedTxn(1, 0, 2, 3)]
    assert log.first_unstable_offset == 3
    log.truncate_to(3)
    assert log.first_unstable_offset is None


def keyed_txn_batch(pid: int, seq: int, pairs: list[tuple[bytes, bytes]]) -> bytes:
    records = [Record(offset=i, timestamp=BASE_TS, key=key, value=value)
               for i, (key, value) in enumerate(pairs)]
    return encode_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq,
                        is_transactional=True)


def every_record(log: Log) -> list[Record]:
    """Records of every batch but markers to the log end, past empty batches too."""
    records: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        region = log.read(offset, 1 << 20)
        assert region is not None
        for raw in iter_batches(region.read()):
            header, batch = decode_records(raw)
            if not header.is_control:
                records.extend(batch)
            offset = header.last_offset + 1
    return records


def test_compaction_keeps_committed_records_over_aborted_ones(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    config = topic_config(cleanup_policy="compact", segment_bytes=250,
                          min_cleanable_dirty_ratio=0.01)
    log = manager.get_or_create("t", 0, config)
    log.append_as_leader(keyed_txn_batch(1, 0, [(b"a", b"a1"), (b"b", b"b1")]), 0, origin=TXN)
    end(log, 1, commit=True)  # 2
    log.append_as_leader(keyed_txn_batch(1, 2, [(b"b", b"b2")]), 0, origin=TXN)  # 3
    log.append_as_leader(keyed_txn_batch(2, 0, [(b"a", b"a-aborted")]), 0, origin=TXN)  # 4
    end(log, 2, commit=False)  # 5, in the segment of the aborted record
    end(log, 1, commit=True)  # 6
    log.append_as_leader(keyed_txn_batch(3, 0, [(b"c", b"open")]), 0, origin=TXN)  # 7
    log.roll()
    cleaner = LogCleaner(manager)
    (candidate,) = cleaner.logs_to_clean(BASE_TS)
    # An open transaction's records may still be aborted: nothing from it on is cleaned.
    assert candidate.first_uncleanable_offset <= 7
    assert asyncio.run(cleaner.clean_dirtiest_log(BASE_TS))
    kept = {r.offset: (r.key, r.value) for r in every_record(log) if r.key is not None}
    # The aborted a-aborted neither survives nor hides a1; b1 gave way to b2.
    assert {offset: kv for offset, kv in kept.items() if offset < 7} == {
        0: (b"a", b"a1"), 3: (b"b", b"b2")}
    assert kept[7] == (b"c", b"open")
    markers = [location.base_offset for segment in log.segments
               for location in segment.iter_batches() if location.header.is_control]
    assert markers == [2, 5, 6]
    # Both segments were rewritten; the abort's entry moved to the cleaned one.
    assert [segment.base_offset for segment in log.segments] == [0, 4, 7, 8]
    assert log.aborted_transactions(0, log.log_end_offset) == [AbortedTxn(2, 4, 5, 3)]
    reopened_dir = log.directory
    manager.shutdown({})
    assert open_log(reopened_dir).aborted_transactions(0, 10) == [AbortedTxn(2, 4, 5, 3)]


def test_an_abort_whose_marker_was_torn_off_is_forgotten(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 1, 0)
    end(log, 1, commit=False)
    segment = log.active_segment
    # kill -9 after the index entry was written but before the marker's bytes were.
    marker_position = segment.find_batch(2).position
    os.truncate(segment.log_path, marker_position + 10)
    reopened = open_log(tmp_path, recover=True, recovery_point=0)
    assert reopened.log_end_offset == 2
    assert reopened.aborted_transactions(0, 10) == []
    assert reopened.first_unstable_offset == 0


def test_the_last_stable_offset_never_falls_below_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 1, 0)  # 0-1, left open
    produce(log, 2, 0)  # 2-3
    end(log, 2, commit=True)  # 4
    log.advance_log_start_offset(3)
    assert log.last_stable_offset(5) == 3


def test_a_fenced_producers_epoch_outlives_the_retention_pass(tmp_path: Path) -> None:
    """A producer fenced (or timed out) leaves only the abort its coordinator wrote at
    the bumped epoch: the partition keeps that epoch, which refuses the old producer's
    batches, for producer.id.expiration.ms from the marker, as Kafka does, and not
    only until the next retention pass because no batch of the new epoch came."""
    day = 24 * 3600_000
    manager = LogManager(tmp_path)
    log = manager.get_or_create("t", 0, topic_config())
    log.append_as_leader(txn_batch(3, 0), 0, origin=TXN)
    fenced_at = BASE_TS + 3600_000
    log.append_as_leader(encode_marker(3, 1, False, coordinator_epoch=0, timestamp=fenced_at),
                         0, origin=COORDINATOR)
    manager.apply_retention(fenced_at + day - 1, day)
    assert log.producer_state.last_sequence(3) == (1, -1)
    with pytest.raises(LogAppendError) as refused:
        log.append_as_leader(txn_batch(3, 2), 0, origin=TXN)
    assert refused.value.error == ErrorCode.invalid_producer_epoch
    manager.apply_retention(fenced_at + day, day)
    assert log.producer_state.last_sequence(3) is None
