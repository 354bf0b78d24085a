"""OffsetIndex and TimeIndex on their own: lookups, ordering, truncation, and the sanity
check that decides whether a segment's indexes must be rebuilt."""

from __future__ import annotations

import struct
from collections import OrderedDict
from pathlib import Path

import pytest

from gregor.storage import index_file
from gregor.storage.index_file import CorruptIndexError
from gregor.storage.offset_index import OffsetIndex
from gregor.storage.time_index import TimeIndex

BASE = 1000


def offset_index(tmp_path: Path, max_size: int = 1024) -> OffsetIndex:
    return OffsetIndex(tmp_path / "00000000000000001000.index", BASE, max_size)


def time_index(tmp_path: Path, max_size: int = 1024) -> TimeIndex:
    return TimeIndex(tmp_path / "00000000000000001000.timeindex", BASE, max_size)


def test_offset_index_lookup_finds_the_last_entry_at_or_before(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    for i in range(1, 6):
        index.append(BASE + 10 * i, 100 * i)
    assert index.lookup(BASE) == (BASE, 0)
    assert index.lookup(BASE + 9) == (BASE, 0)
    assert index.lookup(BASE + 10) == (BASE + 10, 100)
    assert index.lookup(BASE + 35) == (BASE + 30, 300)
    assert index.lookup(BASE + 10**9) == (BASE + 50, 500)
    assert index.last_entry == (BASE + 50, 500)


def test_offset_index_ignores_entries_that_would_break_ordering(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(BASE + 10, 100)
    index.append(BASE + 10, 200)
    index.append(BASE + 20, 100)
    index.append(BASE + 5, 300)
    assert len(index) == 1
    assert (tmp_path / "00000000000000001000.index").stat().st_size == 8


def test_offset_index_round_trips_through_its_file(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    for i in range(1, 200):
        index.append(BASE + 3 * i, 64 * i)
    index.close()
    reloaded = offset_index(tmp_path)
    reloaded.load(log_size=64 * 200)
    assert len(reloaded) == 199
    assert reloaded.lookup(BASE + 301) == (BASE + 300, 6400)


def test_offset_index_truncation_is_persisted(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    for i in range(1, 11):
        index.append(BASE + 10 * i, 100 * i)
    index.truncate_to(BASE + 55)
    assert index.last_entry == (BASE + 50, 500)
    index.truncate_to(BASE + 50)
    assert index.last_entry == (BASE + 40, 400)
    reloaded = offset_index(tmp_path)
    reloaded.load(log_size=10_000)
    assert reloaded.last_entry == (BASE + 40, 400)
    index.append(BASE + 45, 450)
    assert index.lookup(BASE + 46) == (BASE + 45, 450)


def test_offset_index_is_full_at_its_maximum_size(tmp_path: Path) -> None:
    index = offset_index(tmp_path, max_size=8 * 3 + 5)
    for i in range(1, 4):
        assert not index.is_full
        index.append(BASE + i, i)
    assert index.is_full


@pytest.mark.parametrize("damage", ["missing", "partial entry", "out of order",
                                    "position beyond log", "negative offset"])
def test_offset_index_sanity_check_rejects_damage(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "00000000000000001000.index"
    entries = [(10, 100), (20, 200), (30, 300)]
    if damage == "out of order":
        entries = [(10, 100), (30, 300), (20, 200)]
    elif damage == "position beyond log":
        entries.append((40, 5000))
    elif damage == "negative offset":
        entries = [(-5, 100)]
    raw = b"".join(struct.pack(">ii", *e) for e in entries)
    if damage == "partial entry":
        raw = raw[:-3]
    if damage != "missing":
        path.write_bytes(raw)
    with pytest.raises(CorruptIndexError):
        offset_index(tmp_path).load(log_size=1000)


def test_time_index_keeps_only_rising_timestamps(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    index.maybe_append(500, BASE + 4)
    index.maybe_append(400, BASE + 9)
    index.maybe_append(500, BASE + 14)
    index.maybe_append(900, BASE + 19)
    assert len(index) == 2
    assert index.last_timestamp == 900
    assert index.last_offset == BASE + 19


def test_time_index_lookup_skips_entries_below_the_target(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    index.maybe_append(100, BASE + 9)
    index.maybe_append(200, BASE + 19)
    index.maybe_append(300, BASE + 29)
    # Entries say every offset up to theirs has timestamps <= their timestamp, so a
    # search for T may start after the last entry strictly below T.
    assert index.lookup(50) == BASE
    assert index.lookup(100) == BASE
    assert index.lookup(101) == BASE + 9
    assert index.lookup(300) == BASE + 19
    assert index.lookup(10**13) == BASE + 29


def test_time_index_truncation_and_reload(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    for i in range(1, 11):
        index.maybe_append(100 * i, BASE + 10 * i)
    index.truncate_to(BASE + 50)
    assert (index.last_timestamp, index.last_offset) == (400, BASE + 40)
    index.close()
    reloaded = time_index(tmp_path)
    reloaded.load()
    assert (reloaded.last_timestamp, reloaded.last_offset) == (400, BASE + 40)


@pytest.mark.parametrize("damage", ["missing", "partial entry", "timestamps out of order",
                                    "offsets out of order"])
def test_time_index_sanity_check_rejects_damage(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "00000000000000001000.timeindex"
    entries = [(100, 10), (200, 20), (300, 30)]
    if damage == "timestamps out of order":
        entries = [(100, 10), (300, 20), (200, 30)]
    elif damage == "offsets out of order":
        entries = [(100, 10), (200, 30), (300, 20)]
    raw = b"".join(struct.pack(">qi", *e) for e in entries)
    if damage == "partial entry":
        raw = raw[:-5]
    if damage != "missing":
        path.write_bytes(raw)
    with pytest.raises(CorruptIndexError):
        time_index(tmp_path).load()


def test_only_a_budget_of_indexes_is_held_open_for_appending(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each log keeps its segment files open already; one index held open per log too
    ran a broker of 6,665 partitions out of a 20,000 descriptor limit (its log
    directory failed). Past the budget the least recently appended index is closed,
    and opened again at its next entry; its entries, and their fsync, are unaffected."""
    monkeypatch.setattr(index_file._WRITERS, "budget", 2)
    monkeypatch.setattr(index_file._WRITERS, "open", OrderedDict())
    indexes = [OffsetIndex(tmp_path / f"{i:020d}.index", BASE, 1024) for i in range(4)]
    for round_ in range(1, 4):
        for index in indexes:
            index.append(BASE + 10 * round_, 100 * round_)
        assert list(index_file._WRITERS.open) == indexes[-2:]
    for index in indexes:
        index.flush()  # the closed ones too: through a descriptor of its own
        index.close()
        again = OffsetIndex(index.path, BASE, 1024)
        again.load(log_size=10_000)
        assert again.last_entry == (BASE + 30, 300)
    assert not index_file._WRITERS.open
