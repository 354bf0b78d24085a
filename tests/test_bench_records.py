"""The benchmark's verification: a lost, duplicated or altered record must fail the run."""

from __future__ import annotations

import pytest

from bench.records import RecordSet, Tally, VerificationError


@pytest.mark.parametrize("count", [1, 4095, 4096, 10_001])
def test_expected_checksum_matches_the_values_sent(count: int) -> None:
    records = RecordSet(100, count)
    tally = Tally()
    tally.add(list(records.values()))
    tally.verify(records.count, records.expected_checksum(), "t")


def _consumed(values: list[bytes]) -> Tally:
    tally = Tally()
    tally.add(values)
    return tally


@pytest.mark.parametrize("damage", ["lost", "duplicated", "altered", "swapped for another"])
def test_damaged_consumption_fails_verification(damage: str) -> None:
    records = RecordSet(1024, 5000)
    values = list(records.values())
    if damage == "lost":
        values.pop(123)
    elif damage == "duplicated":
        values[7] = values[8]
    elif damage == "altered":
        values[42] = values[42][:-1] + bytes([values[42][-1] ^ 1])
    else:
        values[0] = values[1] if values[0] != values[1] else values[2]
    with pytest.raises(VerificationError):
        _consumed(values).verify(records.count, records.expected_checksum(), "t")
