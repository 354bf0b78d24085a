"""The fault tests' checker catches each anomaly it claims to (on made-up histories)."""

from __future__ import annotations

from checker import Acked, find_anomalies


def acked(*entries: tuple[int, int, str]) -> list[Acked]:
    return [Acked(p, o, v.encode()) for p, o, v in entries]


def stored(*entries: tuple[int, int, str]) -> dict[int, list[tuple[int, bytes]]]:
    result: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}
    for p, o, v in entries:
        result[p].append((o, v.encode()))
    return result


def test_a_faithful_history_has_no_anomaly() -> None:
    assert find_anomalies(acked((0, 0, "v-0"), (1, 0, "v-1"), (0, 1, "v-2")),
                          stored((0, 0, "v-0"), (0, 1, "v-2"), (1, 0, "v-1"),
                                 (1, 1, "v-3"))).none  # v-3: sent, never acknowledged


def test_lost_write() -> None:
    found = find_anomalies(acked((0, 0, "v-0"), (0, 1, "v-1")), stored((0, 0, "v-0")))
    assert [a.value for a in found.lost] == [b"v-1"] and not found.moved


def test_value_at_another_offset() -> None:
    found = find_anomalies(acked((0, 1, "v-1")), stored((0, 0, "x-9"), (0, 2, "v-1")))
    assert [(a.value, at) for a, at in found.moved] == [(b"v-1", 2)]


def test_two_values_at_one_offset_show_as_a_loss() -> None:
    # Two acknowledgements for offset 0 (split brain): one of them is not there.
    found = find_anomalies(acked((0, 0, "v-0"), (0, 0, "v-1")), stored((0, 0, "v-1")))
    assert [a.value for a in found.lost] == [b"v-0"]


def test_duplicate() -> None:
    found = find_anomalies(acked((0, 0, "v-0")), stored((0, 0, "v-0"), (0, 1, "v-0")))
    assert found.duplicated == [b"v-0"]


def test_reordered() -> None:
    found = find_anomalies(acked((0, 0, "v-5"), (0, 1, "v-4")),
                           stored((0, 0, "v-5"), (0, 1, "v-4")))
    assert found.reordered == [(0, b"v-5", b"v-4")]
