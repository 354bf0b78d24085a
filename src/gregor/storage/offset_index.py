"""OffsetIndex: sparse map from offset to the byte position of a batch in its segment."""

from __future__ import annotations

import bisect
import struct
from pathlib import Path

from gregor.storage.index_file import CorruptIndexError, IndexFile

_ENTRY = struct.Struct(">ii")


class OffsetIndex(IndexFile):
    """Entries are (offset relative to the segment's base, file position), as in Kafka.

    Both columns increase strictly, so a binary search finds the last indexed
    batch at or before any offset; the reader then scans at most
    ``index.interval.bytes`` of batch headers forward.
    """

    entry_size = _ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self.offsets: list[int] = []
        self.positions: list[int] = []

    def load(self, log_size: int) -> None:
        """Read the file and check it is consistent with a log of ``log_size`` bytes."""
        data = self._read_raw()
        offsets, positions = [], []
        for relative, position in _ENTRY.iter_unpack(data):
            if (offsets and (relative <= offsets[-1] or position <= positions[-1])) or (
                relative < 0 or position < 0 or position >= max(log_size, 1)
            ):
                raise CorruptIndexError(f"{self.path.name} entries are out of order or range")
            offsets.append(relative)
            positions.append(position)
        self.offsets = [self.base_offset + r for r in offsets]
        self.positions = positions

    def reset(self) -> None:
        self.offsets, self.positions = [], []
        self._rewrite(b"")

    @property
    def is_full(self) -> bool:
        return len(self.offsets) >= self.max_entries

    @property
    def last_offset(self) -> int:
        return self.offsets[-1] if self.offsets else self.base_offset

    def append(self, offset: int, position: int) -> None:
        if self.offsets and (offset <= self.offsets[-1] or position <= self.positions[-1]):
            return
        self.offsets.append(offset)
        self.positions.append(position)
        self._write_entry(_ENTRY.pack(offset - self.base_offset, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or before ``offset``, or the segment start."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.offsets[i], self.positions[i]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for ``offset`` and beyond (after a log truncation)."""
        i = bisect.bisect_left(self.offsets, offset)
        if i == len(self.offsets):
            return
        del self.offsets[i:]
        del self.positions[i:]
        self._rewrite(b"".join(_ENTRY.pack(o - self.base_offset, p)
                               for o, p in zip(self.offsets, self.positions, strict=True)))
