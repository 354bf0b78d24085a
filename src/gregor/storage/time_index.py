"""TimeIndex: sparse map from the largest timestamp seen so far to the offset reaching it."""

from __future__ import annotations

import bisect
import struct
from array import array
from pathlib import Path

from gregor.storage.index_file import CorruptIndexError, IndexFile, increasing, split_columns

_ENTRY = struct.Struct(">qi")
_LAYOUT = ((0, 8, "q"), (8, 4, "i"))
NO_TIMESTAMP = -1


class TimeIndex(IndexFile):
    """Entries are (timestamp, relative offset), both increasing, as in Kafka.

    Timestamps in a partition need not be monotonic, so an entry written at an
    offset index point records the largest timestamp of every batch before that
    point and the last offset of those batches. A ListOffsets-by-time search for
    ``T`` may therefore skip everything up to the last entry below ``T``.
    """

    entry_size = _ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._timestamps = array("q")
        self._relative = array("i")

    def load(self) -> None:
        """Read the file and check its ordering; the caller checks the offsets' range."""
        timestamps, relative = split_columns(self._read_raw(), self.entry_size, _LAYOUT)
        if relative and (relative[0] < 0 or not increasing(timestamps)
                         or not increasing(relative, strictly=False)):
            raise CorruptIndexError(f"{self.path.name} entries are out of order or range")
        self._timestamps, self._relative = timestamps, relative

    def reset(self) -> None:
        self._timestamps, self._relative = array("q"), array("i")
        self._clear()

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def is_full(self) -> bool:
        return len(self._timestamps) >= self.max_entries

    @property
    def last_timestamp(self) -> int:
        return self._timestamps[-1] if self._timestamps else NO_TIMESTAMP

    @property
    def last_offset(self) -> int | None:
        return self.base_offset + self._relative[-1] if self._relative else None

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry if ``timestamp`` is a new maximum (the index only ever rises)."""
        relative = offset - self.base_offset
        if timestamp <= self.last_timestamp or (self._relative and relative < self._relative[-1]):
            return
        self._timestamps.append(timestamp)
        self._relative.append(relative)
        self._write_entry(_ENTRY.pack(timestamp, relative))

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry whose timestamp is below ``timestamp`` (scan after it)."""
        i = bisect.bisect_left(self._timestamps, timestamp) - 1
        return self.base_offset + self._relative[i] if i >= 0 else self.base_offset

    def truncate_to(self, offset: int) -> None:
        """Drop entries for ``offset`` and beyond (after a log truncation)."""
        i = bisect.bisect_left(self._relative, offset - self.base_offset)
        if i == len(self._relative):
            return
        del self._timestamps[i:]
        del self._relative[i:]
        self._rewrite(b"".join(_ENTRY.pack(t, r)
                               for t, r in zip(self._timestamps, self._relative, strict=True)))
