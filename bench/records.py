"""The records a run sends, and the verification that each came back once and in order.

Record ``k`` of a run carries its sequence number ``k`` in its first 8 bytes,
then one of 4,096 random tails in turn: every value of a run is distinct, so a
record lost and another duplicated cannot cancel out. Records go round-robin,
record ``k`` to partition ``k mod n``, and systems promise order within a
partition only: partition ``p`` must give back records ``p, p + n, p + 2n, ...``,
each exactly once, in that order, unaltered. That is checked by comparing, per
partition, the values consumed with the values sent, after the clock has stopped.

All values of a run are built before its clock starts (a few hundred MB at
most), so the load generator hands over pre-built objects as it did when values
were drawn from a pool of 4,096: numbering records costs the timed loop nothing,
as long as it reads them in the order they were built (see ``partitions``).
"""

from __future__ import annotations

import itertools
import operator
import random
import struct
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

SEQUENCE_BYTES = 8
_SEQUENCE = struct.Struct(">Q")
_TAILS = 4096
# A latency probe's value: its sequence number, then its send time (CLOCK_MONOTONIC,
# which all processes of the machine share), then filler.
_PROBE = struct.Struct(">Qq")
PROBE_BYTES = _PROBE.size
_SHOWN = 5  # sequence numbers quoted per kind of damage


class VerificationError(AssertionError):
    """Records consumed differ from records produced: the run's figures are void."""


def sequence_of(value: bytes) -> int:
    return int.from_bytes(value[:SEQUENCE_BYTES], "big")


@dataclass(frozen=True)
class RecordSet:
    size: int
    count: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.size < SEQUENCE_BYTES:
            raise ValueError(f"records of {self.size} B cannot hold a sequence number")

    @cached_property
    def _tails(self) -> list[bytes]:
        rng = random.Random(self.seed * 1_000_003 + self.size)
        return [rng.randbytes(self.size - SEQUENCE_BYTES)
                for _ in range(min(self.count, _TAILS))]

    def _build(self, records: range) -> list[bytes]:
        tails = self._tails
        return list(map(bytes.__add__, map(_SEQUENCE.pack, records),
                        map(tails.__getitem__,
                            map(operator.mod, records, itertools.repeat(len(tails))))))

    @property
    def total_bytes(self) -> int:
        return self.size * self.count

    def values(self) -> list[bytes]:
        """Every value of the run, record ``k`` at index ``k``, built anew."""
        return self._build(range(self.count))

    def partitions(self, partitions: int) -> list[list[bytes]]:
        """The values each partition must hold, in order, when sent round-robin.

        Each partition's values are built together, so that a producer walking one
        partition reads memory in order: walking every n-th value of one list made
        librdkafka's producer spend 20% more CPU per 100 B record than a pool did.
        """
        return [self._build(range(p, self.count, partitions)) for p in range(partitions)]


@dataclass
class Tally:
    """What a consumer saw: the values of each partition, kept until the run is verified.

    Values are only counted while the clock runs and compared afterwards: any
    per-record check costs a Python consumer a sizeable share of its time per
    record, which would cap every system's consume figure at the load
    generator's own speed. Keeping the references costs the run's values in
    memory, never a copy.
    """

    count: int = 0
    _batches: dict[int, list[list[bytes]]] = field(default_factory=dict, repr=False)

    def add(self, values: list[bytes], partition: int = 0) -> None:
        self.count += len(values)
        self._batches.setdefault(partition, []).append(values)

    def values(self, partition: int) -> list[bytes]:
        return list(itertools.chain.from_iterable(self._batches.get(partition, ())))

    def verify(self, expected: Sequence[Sequence[bytes]], what: str) -> None:
        """Partition ``p`` must have given exactly ``expected[p]``, in that order."""
        problems = [f"records from partition {p}, which was never written"
                    for p in self._batches if not 0 <= p < len(expected)]
        for partition, wanted in enumerate(expected):
            consumed = self.values(partition)
            if consumed != wanted:
                problems.append(f"partition {partition}: {differences(wanted, consumed)}")
        if problems:
            raise VerificationError(f"{what}: " + "; ".join(problems))


def differences(expected: Sequence[bytes], consumed: Sequence[bytes]) -> str:
    """How ``consumed`` departs from ``expected`` (whose sequence numbers increase),
    by sequence number: what a failed run's message must let one find."""
    wanted = {sequence_of(v): v for v in expected}
    sequences = list(map(sequence_of, consumed))
    seen = Counter(sequences)
    kinds = {
        "lost": [s for s in wanted if s not in seen],
        "duplicated": [s for s, n in seen.items() if n > 1],
        "never sent": [s for s in seen if s not in wanted],
        "altered": [s for s, v in zip(sequences, consumed, strict=True)
                    if s in wanted and v != wanted[s]],
        "out of order at": [s for before, s in itertools.pairwise(sequences) if s < before],
    }
    found = [f"{len(consumed)} records instead of {len(expected)}"] if (
        len(consumed) != len(expected)) else []
    found += [f"{kind} {len(seqs)} (#{', #'.join(map(str, seqs[:_SHOWN]))}"
              f"{', ...' if len(seqs) > _SHOWN else ''})"
              for kind, seqs in kinds.items() if seqs]
    return ", ".join(found)


def probe(filler: bytes, sequence: int, now_ns: int) -> bytes:
    """A latency probe value (see ``_PROBE``)."""
    return _PROBE.pack(sequence, now_ns) + filler


def sent_at(value: bytes) -> int:
    return _PROBE.unpack_from(value)[1]
