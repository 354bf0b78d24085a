"""The benchmark's verification: a record lost, duplicated, reordered or altered fails a run."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from bench.records import RecordSet, Tally, VerificationError, probe, sent_at, sequence_of

PARTITIONS = 3


def _consumed(partitions: list[list[bytes]], batch: int = 7) -> Tally:
    """What a consumer reading ``partitions`` in turn, ``batch`` records at a time, saw."""
    tally = Tally()
    longest = max(map(len, partitions))
    for start in range(0, longest, batch):
        for p, values in enumerate(partitions):
            if values[start:start + batch]:
                tally.add(values[start:start + batch], p)
    return tally


def test_every_value_is_distinct_and_carries_its_sequence_number() -> None:
    records = RecordSet(100, 10_001)  # more records than random tails
    values = records.values()
    assert len(set(values)) == records.count
    assert [sequence_of(v) for v in values] == list(range(records.count))
    assert {len(v) for v in values} == {100}


def test_partitions_hold_the_round_robin_share_in_order() -> None:
    records = RecordSet(1024, 100)
    lanes = records.partitions(PARTITIONS)
    assert lanes == [records.values()[p::PARTITIONS] for p in range(PARTITIONS)]
    assert [[sequence_of(v) for v in lane] for lane in lanes] == [
        list(range(p, 100, PARTITIONS)) for p in range(PARTITIONS)]


@pytest.mark.parametrize("count", [1, 4096, 10_001])
def test_every_record_consumed_once_in_order_passes(count: int) -> None:
    records = RecordSet(100, count)
    _consumed(records.partitions(PARTITIONS)).verify(records.partitions(PARTITIONS), "t")


def _lost_and_duplicated(lane: list[bytes]) -> None:
    """Record 10 lost and record 20 delivered twice: the count stays right."""
    lane.pop(10)
    lane.insert(20, lane[19])


def _swapped(lane: list[bytes]) -> None:
    lane[4], lane[5] = lane[5], lane[4]


def _altered(lane: list[bytes]) -> None:
    lane[42] = lane[42][:-1] + bytes([lane[42][-1] ^ 1])


def _lost(lane: list[bytes]) -> None:
    lane.pop(123)


@pytest.mark.parametrize(("damage", "reported"), [
    (_lost_and_duplicated, "lost 1 (#"),
    (_swapped, "out of order at 1 (#"),
    (_altered, "altered 1 (#"),
    (_lost, "records instead of"),
])
def test_damaged_consumption_fails_verification(damage: Callable[[list[bytes]], None],
                                                reported: str) -> None:
    records = RecordSet(1024, 5000)
    consumed = records.partitions(PARTITIONS)
    damage(consumed[1])
    with pytest.raises(VerificationError, match="partition 1: .*" + re.escape(reported)):
        _consumed(consumed).verify(records.partitions(PARTITIONS), "t")


def test_lost_and_duplicated_names_both_records() -> None:
    records = RecordSet(100, 300)
    consumed = records.partitions(PARTITIONS)
    _lost_and_duplicated(consumed[0])
    with pytest.raises(VerificationError) as failure:
        _consumed(consumed).verify(records.partitions(PARTITIONS), "t")
    lost, duplicated = sequence_of(records.partitions(PARTITIONS)[0][10]), sequence_of(
        consumed[0][20])
    assert f"lost 1 (#{lost})" in str(failure.value)
    assert f"duplicated 1 (#{duplicated})" in str(failure.value)


def test_a_record_in_another_partition_fails_verification() -> None:
    records = RecordSet(100, 300)
    consumed = records.partitions(PARTITIONS)
    consumed[2].append(consumed[0].pop())
    with pytest.raises(VerificationError, match="never sent 1"):
        _consumed(consumed).verify(records.partitions(PARTITIONS), "t")


def test_records_from_an_unknown_partition_fail_verification() -> None:
    records = RecordSet(100, 30)
    tally = _consumed(records.partitions(PARTITIONS))
    tally.add(records.values()[:1], PARTITIONS)
    with pytest.raises(VerificationError, match=f"partition {PARTITIONS}, which was never"):
        tally.verify(records.partitions(PARTITIONS), "t")


def test_a_probe_carries_its_sequence_number_and_send_time() -> None:
    value = probe(b"x" * 84, 17, 123_456_789)
    assert (len(value), sequence_of(value), sent_at(value)) == (100, 17, 123_456_789)
