"""Opening a log after a crash: torn tails are cut at the last intact batch, damaged
indexes are rebuilt, and offsets go on without a gap or a duplicate.

A crash is simulated the way ``kill -9`` leaves things: the Log object is dropped
without ``close()`` (no flush, no snapshot), the files are damaged as a torn write
or a bad disk would, and the log is reopened with ``recover=True`` from the
recovery point the LogManager would have checkpointed.
"""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from storage_helpers import BASE_TS, batch, batch_offsets, open_log, read_all, topic_config

from gregor.protocol.record_codec import Record, encode_batch
from gregor.storage.log import Log
from gregor.storage.producer_state import SNAPSHOT_SUFFIX

CONFIG = topic_config(segment_bytes=3000, index_interval_bytes=200)


def build(directory: Path, batches: int = 60) -> tuple[Log, list[tuple[int, int]]]:
    log = open_log(directory, CONFIG)
    spans = []
    for i in range(batches):
        data = batch(1 + i % 3, tag=f"b{i}", value_size=30, timestamp=BASE_TS + i)
        result = log.append_as_leader(data, i // 20)
        spans.append((result.first_offset, result.last_offset))
    return log, spans


def crash_and_reopen(log: Log, recovery_point: int | None = None) -> Log:
    """Reopen as after ``kill -9``: no close, recovery from the checkpointed point."""
    point = log.recovery_point if recovery_point is None else recovery_point
    return open_log(log.directory, CONFIG, recover=True, recovery_point=point,
                    log_start_offset=log.log_start_offset)


def assert_intact(log: Log, end: int) -> None:
    """Offsets 0..end-1 read back contiguously, and the next append continues at ``end``."""
    assert log.log_end_offset == end
    assert [r.offset for r in read_all(log)] == list(range(end))
    result = log.append_as_leader(batch(2, tag="next"), 9)
    assert (result.first_offset, result.last_offset) == (end, end + 1)
    assert [r.value for r in read_all(log, end)] == [b"next-0", b"next-1"]


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def flip_byte(path: Path, position: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(position)
        byte = handle.read(1)
        handle.seek(position)
        handle.write(bytes([byte[0] ^ 0x5A]))


def next_batch_bytes(log: Log) -> bytes:
    """The batch a producer's next write would have put at the log end."""
    records = [Record(log.log_end_offset + i, BASE_TS, b"k", b"x" * 100)
               for i in range(5)]
    return encode_batch(records, base_offset=log.log_end_offset)


TORN_TAILS = {
    "partial batch": lambda log: next_batch_bytes(log)[:150],
    "partial header": lambda log: next_batch_bytes(log)[:30],
    "offset prefix only": lambda log: next_batch_bytes(log)[:12],
    "garbage": lambda log: random.Random(7).randbytes(700),
    "all ones": lambda log: b"\xff" * 300,
    "negative length": lambda log: struct.pack(">qi", log.log_end_offset, -100) + bytes(100),
    "zeros (preallocated tail)": lambda log: bytes(4096),
    "huge claimed length": lambda log: struct.pack(">qi", log.log_end_offset, 2**31 - 1)
    + bytes(100),
}


@pytest.mark.parametrize("tail", list(TORN_TAILS))
def test_a_torn_tail_is_truncated(tmp_path: Path, tail: str) -> None:
    log, spans = build(tmp_path)
    end = log.log_end_offset
    active = log.active_segment.log_path
    size = active.stat().st_size
    append_bytes(active, TORN_TAILS[tail](log))
    recovered = crash_and_reopen(log)
    assert active.stat().st_size == size
    assert_intact(recovered, end)


def test_a_last_batch_with_a_bad_crc_is_dropped(tmp_path: Path) -> None:
    log, spans = build(tmp_path)
    last = log.active_segment
    position = last.position_of(spans[-1][0])
    flip_byte(last.log_path, position + 70)
    recovered = crash_and_reopen(log)
    assert_intact(recovered, spans[-1][0])


def test_a_replayed_batch_going_backwards_is_dropped(tmp_path: Path) -> None:
    """A whole, CRC-valid batch whose offsets do not follow on is not the log's."""
    log, spans = build(tmp_path)
    end = log.log_end_offset
    last = log.active_segment
    region = last.read(spans[-1][0], 1 << 20)
    assert region is not None
    append_bytes(last.log_path, region.read())
    assert_intact(crash_and_reopen(log), end)


def test_damage_mid_segment_drops_everything_after_it(tmp_path: Path) -> None:
    log, spans = build(tmp_path)
    assert len(log.segments) >= 3
    victim = log.segments[-2]
    cut = victim.base_offset + 2
    holder = next(s for s in spans if s[0] <= cut <= s[1])
    flip_byte(victim.log_path, victim.position_of(cut) + 65)
    recovered = crash_and_reopen(log, recovery_point=victim.base_offset)
    assert len(recovered.segments) == len(log.segments) - 1
    assert not log.segments[-1].log_path.exists()
    assert_intact(recovered, holder[0])


def test_unclean_open_rescans_only_from_the_recovery_point(tmp_path: Path) -> None:
    log, spans = build(tmp_path)
    old, newer = log.segments[0], log.segments[-1]
    flip_byte(old.log_path, 80)
    flip_byte(newer.log_path, newer.size - 5)
    recovered = crash_and_reopen(log, recovery_point=newer.base_offset)
    # The fsynced segment below the recovery point is trusted as is (like Kafka, a
    # restart does not reread the whole log); the one after it is checked and cut.
    assert recovered.segments[0].size == old.size
    assert recovered.log_end_offset == spans[-1][0]


def test_a_producer_may_resend_a_batch_that_was_torn(tmp_path: Path) -> None:
    """The torn batch never happened: its retry is appended, not reported a duplicate."""
    log = open_log(tmp_path, CONFIG)
    for i in range(30):
        log.append_as_leader(batch(2, producer_id=4, producer_epoch=0, base_sequence=2 * i), 0)
    torn = log.append_as_leader(batch(2, producer_id=4, producer_epoch=0, base_sequence=60), 0)
    position = log.active_segment.position_of(torn.first_offset)
    os.truncate(log.active_segment.log_path, position + 40)
    # A snapshot taken past the new end (here: at a clean close) must not be trusted.
    log.producer_state.take_snapshot(torn.last_offset + 1)
    recovered = crash_and_reopen(log)
    assert recovered.log_end_offset == torn.first_offset
    assert not list(tmp_path.glob(f"{torn.last_offset + 1:020d}{SNAPSHOT_SUFFIX}"))
    retry = recovered.append_as_leader(
        batch(2, producer_id=4, producer_epoch=0, base_sequence=60), 0)
    assert not retry.duplicate and retry.first_offset == torn.first_offset
    assert recovered.append_as_leader(
        batch(2, producer_id=4, producer_epoch=0, base_sequence=58), 0).duplicate


def test_leader_epochs_beyond_the_recovered_end_are_dropped(tmp_path: Path) -> None:
    log, spans = build(tmp_path)
    log.append_as_leader(batch(1), 50)
    os.truncate(log.active_segment.log_path, log.active_segment.position_of(spans[-1][1] + 1))
    recovered = crash_and_reopen(log)
    assert recovered.leader_epoch_cache.latest_epoch == 2


def test_leader_epochs_below_a_moved_log_start_are_dropped_on_load(tmp_path: Path) -> None:
    """A crash between DeleteRecords and the deferred write of the leader epochs leaves
    entries below the new log start in their file: loading the log drops them."""
    log, spans = build(tmp_path)
    written: list[Callable[[], None]] = []
    log.leader_epoch_cache.deferred_writer = written.append
    start = spans[45][0]
    assert log.advance_log_start_offset(start)
    assert written, "the truncated epochs were not handed to the deferred writer"
    reopened = open_log(tmp_path, CONFIG, log_start_offset=start)
    assert reopened.leader_epoch_cache.start_offsets == [start]
    assert reopened.leader_epoch_cache.epochs == [2]


def test_a_deferred_leader_epoch_write_never_undoes_a_later_one(tmp_path: Path) -> None:
    """A truncation's write and a new epoch's both wait on the worker: should the older
    run after the newer, its contents must not replace the newer ones."""
    log, spans = build(tmp_path)
    cache = log.leader_epoch_cache
    written: list[Callable[[], None]] = []
    cache.deferred_writer = written.append
    assert log.advance_log_start_offset(spans[45][0])
    log.append_as_leader(batch(1), 7)
    truncation, new_epoch = written
    new_epoch()
    truncation()
    assert cache.path.read_text().split("\n")[2:4] == [f"2 {spans[45][0]}",
                                                       f"7 {log.log_end_offset - 1}"]


def test_a_deleted_logs_deferred_leader_epoch_write_is_dropped(tmp_path: Path) -> None:
    log, spans = build(tmp_path / "t-0")
    written: list[Callable[[], None]] = []
    log.leader_epoch_cache.deferred_writer = written.append
    assert log.advance_log_start_offset(spans[45][0])
    log.delete()
    (deferred,) = written
    deferred()
    assert not (tmp_path / "t-0").exists()


INDEX_DAMAGE = {
    "deleted": lambda path: path.unlink(),
    "partial entry": lambda path: os.truncate(path, path.stat().st_size - 3),
    "garbage": lambda path: path.write_bytes(random.Random(3).randbytes(path.stat().st_size)),
    "entries out of order": lambda path: path.write_bytes(_swap_entries(path)),
    "entry past the log end": lambda path: append_bytes(
        path, struct.pack(">ii", 2**20, 2**30) if path.suffix == ".index"
        else struct.pack(">qi", 2**60, 2**20)),
}


def _swap_entries(path: Path) -> bytes:
    size = 8 if path.suffix == ".index" else 12
    raw = path.read_bytes()
    assert len(raw) >= 2 * size
    return raw[size : 2 * size] + raw[:size] + raw[2 * size:]


@pytest.mark.parametrize("which", ["index", "timeindex"])
@pytest.mark.parametrize("damage", list(INDEX_DAMAGE))
@pytest.mark.parametrize("shutdown", ["clean", "unclean"])
def test_damaged_indexes_are_rebuilt(tmp_path: Path, which: str, damage: str,
                                     shutdown: str) -> None:
    log, spans = build(tmp_path, batches=120)
    end = log.log_end_offset
    entries = [(len(s.offset_index), len(s.time_index)) for s in log.segments]
    if shutdown == "clean":
        log.close()
    # An old segment (below any recovery point) and the active one.
    for segment in (log.segments[0], log.segments[-1]):
        INDEX_DAMAGE[damage](segment.time_index.path if which == "timeindex"
                             else segment.offset_index.path)
    if shutdown == "clean":
        reopened = open_log(tmp_path, CONFIG)
    else:
        reopened = crash_and_reopen(log, recovery_point=log.segments[-1].base_offset)
    assert [(len(s.offset_index), len(s.time_index)) for s in reopened.segments] == entries
    for first, last in spans:
        assert batch_offsets(reopened.read(last, 1))[0] == (first, last)
    assert reopened.offset_for_timestamp(0) == (0, BASE_TS)
    assert reopened.offset_for_timestamp(BASE_TS + 100) == (spans[100][0], BASE_TS + 100)
    assert_intact(reopened, end)
