"""OffsetIndex: sparse map from offset to the byte position of a batch in its segment."""

from __future__ import annotations

import bisect
import struct
from array import array
from pathlib import Path

from gregor.storage.index_file import CorruptIndexError, IndexFile, increasing, split_columns

_ENTRY = struct.Struct(">ii")
_LAYOUT = ((0, 4, "i"), (4, 4, "i"))


class OffsetIndex(IndexFile):
    """Entries are (offset relative to the segment's base, file position), as in Kafka.

    An entry names the base offset of the batch starting at that position, so a
    binary search finds the last indexed batch at or before any offset and the
    reader scans at most ``index.interval.bytes`` of batch headers forward. Both
    columns increase strictly.
    """

    entry_size = _ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._relative = array("i")
        self._positions = array("i")

    def load(self, log_size: int) -> None:
        """Read the file and check it can belong to a log of ``log_size`` bytes.

        Every entry is checked (ordering at C speed), not only the last one as
        Kafka does: a damaged index found now costs a rebuild, one found while
        serving a fetch would send a consumer the wrong bytes.
        """
        relative, positions = split_columns(self._read_raw(), self.entry_size, _LAYOUT)
        if relative and (relative[0] < 0 or positions[0] < 0 or positions[-1] >= log_size
                         or not increasing(relative) or not increasing(positions)):
            raise CorruptIndexError(f"{self.path.name} entries are out of order or range")
        self._relative, self._positions = relative, positions

    def reset(self) -> None:
        self._relative, self._positions = array("i"), array("i")
        self._clear()

    def __len__(self) -> int:
        return len(self._relative)

    @property
    def is_full(self) -> bool:
        return len(self._relative) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(offset, position)`` of the newest entry, or the segment start."""
        if not self._relative:
            return self.base_offset, 0
        return self.base_offset + self._relative[-1], self._positions[-1]

    def append(self, offset: int, position: int) -> None:
        """Add an entry; one that would break the ordering is ignored (never indexed twice)."""
        relative = offset - self.base_offset
        if self._relative and (relative <= self._relative[-1] or position <= self._positions[-1]):
            return
        self._relative.append(relative)
        self._positions.append(position)
        self._write_entry(_ENTRY.pack(relative, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or before ``offset``, else the start."""
        i = bisect.bisect_right(self._relative, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative[i], self._positions[i]

    def batch_start_at_or_before(self, position: int) -> int | None:
        """The last indexed batch start at or before byte ``position``, if any: where a
        read cut at ``position`` can end on a batch boundary without reading a header."""
        i = bisect.bisect_right(self._positions, position) - 1
        return self._positions[i] if i >= 0 else None

    def truncate_to(self, offset: int) -> None:
        """Drop entries for ``offset`` and beyond (after a log truncation)."""
        i = bisect.bisect_left(self._relative, offset - self.base_offset)
        if i == len(self._relative):
            return
        del self._relative[i:]
        del self._positions[i:]
        self._rewrite(b"".join(_ENTRY.pack(r, p)
                               for r, p in zip(self._relative, self._positions, strict=True)))
