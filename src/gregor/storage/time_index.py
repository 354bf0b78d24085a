"""TimeIndex: sparse map from max timestamp seen so far to the offset where it was reached."""

from __future__ import annotations

import bisect
import struct
from pathlib import Path

from gregor.storage.index_file import CorruptIndexError, IndexFile

_ENTRY = struct.Struct(">qi")


class TimeIndex(IndexFile):
    """Entries are (timestamp, relative offset) with both increasing, as in Kafka.

    Timestamps in a partition need not be monotonic, so an entry records the
    largest timestamp seen up to a batch; the first entry at or after a target
    timestamp bounds where a ListOffsets-by-time search must start scanning.
    """

    entry_size = _ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self.timestamps: list[int] = []
        self.offsets: list[int] = []

    def load(self, next_offset: int) -> None:
        data = self._read_raw()
        timestamps, offsets = [], []
        for timestamp, relative in _ENTRY.iter_unpack(data):
            offset = self.base_offset + relative
            if (timestamps and (timestamp <= timestamps[-1] or offset < offsets[-1])) or (
                relative < 0 or offset >= max(next_offset, self.base_offset + 1)
            ):
                raise CorruptIndexError(f"{self.path.name} entries are out of order or range")
            timestamps.append(timestamp)
            offsets.append(offset)
        self.timestamps, self.offsets = timestamps, offsets

    def reset(self) -> None:
        self.timestamps, self.offsets = [], []
        self._rewrite(b"")

    @property
    def is_full(self) -> bool:
        return len(self.timestamps) >= self.max_entries

    @property
    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if timestamp <= self.last_timestamp or (self.offsets and offset < self.offsets[-1]):
            return
        self.timestamps.append(timestamp)
        self.offsets.append(offset)
        self._write_entry(_ENTRY.pack(timestamp, offset - self.base_offset))

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry whose timestamp is below ``timestamp`` (scan from there)."""
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        return self.offsets[i] if i >= 0 else self.base_offset

    def truncate_to(self, offset: int) -> None:
        i = bisect.bisect_left(self.offsets, offset)
        if i == len(self.offsets):
            return
        del self.timestamps[i:]
        del self.offsets[i:]
        self._rewrite(b"".join(_ENTRY.pack(t, o - self.base_offset)
                               for t, o in zip(self.timestamps, self.offsets, strict=True)))
