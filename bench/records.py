"""The records a run sends, and the checksum that proves they all came back.

Values are drawn in turn from a pool of distinct random payloads, so producing
costs the load generator no per-record allocation while consecutive records
still differ. A run is verified by count and by the sum of the CRC-32 of every
value consumed; the sum is order-independent, because systems only promise
order within a partition and the consumer reads several partitions at once.
"""

from __future__ import annotations

import itertools
import random
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

_POOL_SIZE = 4096
_CHECKSUM_MODULUS = 2**64
_STAMP = struct.Struct(">q")


class VerificationError(AssertionError):
    """Records consumed differ from records produced: the run's figures are void."""


def checksum(values: Iterable[bytes]) -> int:
    """Order-independent checksum of a sequence of values (``map`` keeps it in C)."""
    return sum(map(zlib.crc32, values)) % _CHECKSUM_MODULUS


@dataclass(frozen=True)
class RecordSet:
    size: int
    count: int
    seed: int = 0
    pool: list[bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed * 1_000_003 + self.size)
        pool = [i.to_bytes(8, "big") + rng.randbytes(self.size - 8)
                for i in range(min(self.count, _POOL_SIZE))]
        object.__setattr__(self, "pool", pool)

    @property
    def total_bytes(self) -> int:
        return self.size * self.count

    def values(self) -> Iterator[bytes]:
        return itertools.islice(itertools.cycle(self.pool), self.count)

    def expected_checksum(self) -> int:
        full, rest = divmod(self.count, len(self.pool))
        return (full * checksum(self.pool) + checksum(self.pool[:rest])) % _CHECKSUM_MODULUS


@dataclass
class Tally:
    """What a consumer saw: how many values, each kept until the run is verified.

    Values are only counted while the clock runs and checksummed afterwards: a
    CRC-32 per value costs a Python consumer 200-600 ns, a third of its time per
    record, which capped every system's consume figure at the load generator's
    own speed. Keeping the references costs the run's values in memory (at most
    a few hundred MB), never a copy.
    """

    count: int = 0
    _batches: list[list[bytes]] = field(default_factory=list, repr=False)

    def add(self, values: list[bytes]) -> None:
        self.count += len(values)
        self._batches.append(values)

    @property
    def checksum(self) -> int:
        return sum(map(checksum, self._batches)) % _CHECKSUM_MODULUS

    def verify(self, count: int, expected_checksum: int, what: str) -> None:
        if self.count != count:
            raise VerificationError(f"{what}: consumed {self.count} records, produced {count}")
        if self.checksum != expected_checksum:
            raise VerificationError(f"{what}: checksum of consumed values differs from produced")


def stamped(filler: bytes, now_ns: int) -> bytes:
    """A latency probe value: the send time (CLOCK_MONOTONIC, shared by all processes) first."""
    return _STAMP.pack(now_ns) + filler


def stamp_of(value: bytes) -> int:
    return _STAMP.unpack_from(value)[0]
