"""LogSegment on its own: appends, reads at every offset, byte and position limits,
sparse indexing, time lookups, truncation and reloading."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_helpers import BASE_TS, batch_offsets

from gregor.protocol.record_codec import Record, encode_batch
from gregor.storage.segment import LogSegment

BASE = 100


def new_segment(directory: Path, index_interval_bytes: int = 4096,
                max_index_size: int = 1 << 20) -> LogSegment:
    return LogSegment(directory, BASE, index_interval_bytes=index_interval_bytes,
                      max_index_size=max_index_size)


def append(segment: LogSegment, count: int, timestamps: list[int] | None = None,
           value_size: int = 0) -> tuple[int, int]:
    """Append one batch of ``count`` records at the segment's next offset; its offset span."""
    first = segment.next_offset
    stamps = timestamps or [BASE_TS + first + i for i in range(count)]
    records = [Record(first + i, stamps[i], b"k", b"%d" % (first + i) + b"." * value_size)
               for i in range(count)]
    data = encode_batch(records, base_offset=first)
    segment.append(data, [(0, len(data), first, first + count - 1, max(stamps))])
    return first, first + count - 1


def fill(segment: LogSegment, batches: int, count: int = 3, value_size: int = 0) -> list:
    return [append(segment, count, value_size=value_size) for _ in range(batches)]


def test_every_offset_reads_the_whole_batch_holding_it(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, index_interval_bytes=200)
    spans = fill(segment, 40, count=3, value_size=20)
    assert len(segment.offset_index) > 5
    for first, last in spans:
        for offset in range(first, last + 1):
            region = segment.read(offset, max_bytes=1)
            assert batch_offsets(region) == [(first, last)]
    assert segment.next_offset == spans[-1][1] + 1
    assert segment.read(segment.next_offset, 1 << 20) is None


def test_read_returns_whole_batches_up_to_max_bytes(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    spans = fill(segment, 10, count=2, value_size=50)
    batch_size = segment.size // 10
    region = segment.read(BASE, max_bytes=3 * batch_size)
    assert batch_offsets(region) == spans[:3]
    # A limit inside a batch, with no index entry to end on, cuts it; clients drop
    # the partial batch at the end.
    assert segment.offset_index.batch_start_at_or_before(3 * batch_size + 10) is None
    region = segment.read(BASE, max_bytes=3 * batch_size + 10)
    assert region is not None and region.length == 3 * batch_size + 10
    assert batch_offsets(region) == spans[:3]


def test_a_cut_read_ends_on_the_last_indexed_batch_start(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, index_interval_bytes=300)
    spans = fill(segment, 20, count=2, value_size=50)
    ends = [batch.position + batch.size for batch in segment.iter_batches()]
    # From the first indexed batch start on (index.interval.bytes in), reads are trimmed.
    for max_bytes in range(ends[3], ends[11]):
        region = segment.read(BASE, max_bytes=max_bytes)
        assert region is not None and region.length <= max_bytes
        # Whole batches only, and at most an index interval (plus a batch) short of the limit.
        assert region.length in ends
        assert batch_offsets(region) == spans[:ends.index(region.length) + 1]
        assert max_bytes - region.length < 300 + ends[0]


def test_first_batch_is_whole_even_above_max_bytes_only_with_min_one_batch(
        tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    spans = fill(segment, 3, count=5, value_size=500)
    region = segment.read(BASE + 2, max_bytes=100, min_one_batch=True)
    assert batch_offsets(region) == spans[:1]
    region = segment.read(BASE + 2, max_bytes=100, min_one_batch=False)
    assert region is not None and region.length == 100
    assert segment.read(BASE, max_bytes=0, min_one_batch=False) is None


def test_read_stops_at_max_position(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    spans = fill(segment, 5)
    hw_position = segment.position_of(spans[3][0])
    region = segment.read(BASE, 1 << 20, max_position=hw_position)
    assert batch_offsets(region) == spans[:3]
    assert segment.read(spans[3][0], 1 << 20, max_position=hw_position) is None


def test_index_entries_every_index_interval_bytes(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, index_interval_bytes=1000)
    fill(segment, 100, count=1, value_size=200)
    batch_size = segment.size // 100
    # One entry each time more than 1000 bytes were written since the last one.
    expected = 100 // (1000 // batch_size + 1)
    assert abs(len(segment.offset_index) - expected) <= 1
    # Every entry points at the start of the batch with that base offset.
    for offset in range(BASE, BASE + 100):
        indexed_offset, position = segment.offset_index.lookup(offset)
        assert segment.read_batch_header(position).base_offset == indexed_offset


def test_find_offset_by_timestamp_with_unordered_timestamps(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, index_interval_bytes=0)
    append(segment, 3, [50, 10, 20])       # 100..102
    append(segment, 3, [30, 70, 40])       # 103..105
    append(segment, 2, [60, 80])           # 106..107
    assert segment.find_offset_by_timestamp(5, BASE) == (100, 50)
    assert segment.find_offset_by_timestamp(55, BASE) == (104, 70)
    assert segment.find_offset_by_timestamp(75, BASE) == (107, 80)
    assert segment.find_offset_by_timestamp(81, BASE) is None
    # Records below the starting offset (the log start) never answer.
    assert segment.find_offset_by_timestamp(5, 101) == (101, 10)
    assert segment.find_offset_by_timestamp(45, 105) == (106, 60)
    assert segment.max_timestamp == 80


@pytest.mark.parametrize("cut", ["batch start", "mid batch"])
def test_truncate_to_removes_whole_batches(tmp_path: Path, cut: str) -> None:
    segment = new_segment(tmp_path, index_interval_bytes=100)
    spans = fill(segment, 30, count=4, value_size=30)
    first, _ = spans[20]
    offset = first if cut == "batch start" else first + 2
    removed = segment.truncate_to(offset)
    assert removed > 0
    assert segment.next_offset == first
    assert segment.offset_index.last_entry[0] < first
    assert batch_offsets(segment.read(BASE, 1 << 20))[-1] == spans[19]
    assert segment.max_timestamp == BASE_TS + spans[19][1]
    # Appending continues at the cut, and reads see the new batch.
    assert append(segment, 2) == (first, first + 1)
    assert batch_offsets(segment.read(first, 1 << 20)) == [(first, first + 1)]


@pytest.mark.parametrize("max_bytes", [1, 150, 1 << 20])
def test_reads_from_remembered_batch_starts_are_the_index_s(tmp_path: Path,
                                                            max_bytes: int) -> None:
    """A batch appended lately is read from where the segment remembers it starts: the
    same region the index and the headers in the file give (a reloaded segment, which
    remembers nothing), at every offset, byte limit and position limit."""
    segment = new_segment(tmp_path, index_interval_bytes=200)
    spans = fill(segment, 90, count=3, value_size=20)
    segment.flush()
    reloaded = LogSegment(tmp_path, BASE, index_interval_bytes=200, max_index_size=1 << 20)
    reloaded.load(recover=False)
    for first, last in spans:
        for offset in (first, first + 1, last + 1):
            for limit in (None, segment.position_of(last + 1)):
                assert segment.position_of(offset) == reloaded.position_of(offset)
                ours = segment.read(offset, max_bytes, limit)
                theirs = reloaded.read(offset, max_bytes, limit)
                assert (ours is None) == (theirs is None)
                if ours is not None:
                    assert (ours.position, ours.length) == (theirs.position, theirs.length)


def test_a_truncated_batch_start_is_forgotten(tmp_path: Path) -> None:
    """After a truncation the offsets come back in other batches: where the old ones
    started means nothing any more."""
    segment = new_segment(tmp_path, index_interval_bytes=100)
    spans = fill(segment, 30, count=4, value_size=30)
    first, _ = spans[20]
    segment.truncate_to(first)
    assert append(segment, 8) == (first, first + 7)
    assert batch_offsets(segment.read(spans[21][0], 1 << 20)) == [(first, first + 7)]
    assert segment.position_of(spans[21][0]) == segment.position_of(first)


def test_truncate_to_base_offset_empties_the_segment(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, index_interval_bytes=10)
    fill(segment, 5)
    segment.truncate_to(BASE)
    assert (segment.size, segment.next_offset, len(segment.offset_index)) == (0, BASE, 0)
    assert segment.first_batch_timestamp is None
    assert segment.max_timestamp == -1


def test_clean_reload_restores_the_same_state(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, index_interval_bytes=300)
    fill(segment, 50, count=2, value_size=40)
    state = (segment.size, segment.next_offset, segment.max_timestamp,
             segment.first_batch_timestamp, len(segment.offset_index), len(segment.time_index))
    segment.flush()
    segment.close()
    reloaded = new_segment(tmp_path, index_interval_bytes=300)
    assert reloaded.load(recover=False) == 0
    assert (reloaded.size, reloaded.next_offset, reloaded.max_timestamp,
            reloaded.first_batch_timestamp, len(reloaded.offset_index),
            len(reloaded.time_index)) == state
    # Appends go on from where the segment ended, indexed as before the restart.
    assert append(reloaded, 2, value_size=40) == (BASE + 100, BASE + 101)
    assert batch_offsets(reloaded.read(BASE + 99, 1 << 20))[-2:] == [(BASE + 98, BASE + 99),
                                                                     (BASE + 100, BASE + 101)]
