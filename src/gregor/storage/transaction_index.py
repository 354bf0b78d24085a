"""TransactionIndex: a segment's aborted transactions (Kafka's ``.txnindex``).

A read_committed consumer receives, with each fetch, the transactions aborted in
the range it reads, so it can drop their records without the broker decoding a
single record. Each entry is written to the index of the segment holding the
abort marker: producer id, first offset of the transaction, the marker's offset
and the partition's last stable offset once the marker is written. The last
field lets a search stop early: an entry whose last stable offset reaches the
end of the fetched range means no transaction open before that end is still to
be found further on.

The file is Kafka's layout (version int16 0 and four int64, big-endian); it is
small (one entry per aborted transaction), so it is held in memory and appended
to as aborts happen.
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from gregor.storage.checkpoint_file import fsync_file

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._dirty = False

    def load(self) -> None:
        """Read the entries; a torn last entry (a crash mid-write) is cut off."""
        self.entries = []
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % _ENTRY.size
        for pos in range(0, whole, _ENTRY.size):
            _, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            self.entries.append(AbortedTxn(pid, first, last, lso))
        if whole != len(data):
            os.truncate(self.path, whole)

    @property
    def last_offset(self) -> int:
        """The marker offset of the newest entry, -1 when empty."""
        return self.entries[-1].last_offset if self.entries else -1

    def append(self, txn: AbortedTxn) -> bool:
        """Add an abort; False (nothing written) if it is already indexed (a replay)."""
        if txn.last_offset <= self.last_offset:
            return False
        with open(self.path, "ab") as file:
            file.write(_ENTRY.pack(_VERSION, txn.producer_id, txn.first_offset,
                                   txn.last_offset, txn.last_stable_offset))
        self.entries.append(txn)
        self._dirty = True
        return True

    def collect(self, fetch_offset: int, upper_bound: int,
                found: list[AbortedTxn]) -> bool:
        """Add the aborts overlapping ``[fetch_offset, upper_bound)`` to ``found``; True
        once the search is complete (no later segment can hold one). Entries are in
        marker order, so those ending before the fetch offset are skipped by bisection."""
        start = bisect.bisect_left(self.entries, fetch_offset, key=_last_offset)
        for i in range(start, len(self.entries)):
            txn = self.entries[i]
            if txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return True
        return False

    def truncate_to(self, offset: int) -> None:
        """Drop the aborts whose marker lies at or after ``offset`` (the log was cut there)."""
        kept = [txn for txn in self.entries if txn.last_offset < offset]
        if len(kept) == len(self.entries):
            return
        self.entries = kept
        if self.path.exists():
            os.truncate(self.path, len(kept) * _ENTRY.size)

    def reset(self) -> None:
        self.entries = []
        self.path.unlink(missing_ok=True)

    def flush(self) -> None:
        if self._dirty and self.path.exists():
            fsync_file(self.path)
        self._dirty = False

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)

    def rename(self, new_path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, new_path)
        self.path = new_path


def _last_offset(txn: AbortedTxn) -> int:
    return txn.last_offset
