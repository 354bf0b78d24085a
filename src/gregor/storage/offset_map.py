"""OffsetMap: the log cleaner's key -> latest offset map over the dirty section of a log.

Kafka hashes keys into a fixed-size buffer (``log.cleaner.dedupe.buffer.size``)
and accepts a tiny chance of collision. Here the keys themselves are stored, so a
collision can never make the cleaner drop a live record; memory is bounded by an
estimate of what the entries cost, and the cleaner maps fewer dirty segments per
pass when the budget runs out.
"""

from __future__ import annotations

# What one entry costs beyond the key's own bytes: the dict slot, the bytes
# object's header and the int holding the offset (measured on CPython 3.11).
_ENTRY_OVERHEAD = 120


class OffsetMap:
    def __init__(self, memory_bytes: int) -> None:
        self.memory_bytes = memory_bytes
        self._offsets: dict[bytes, int] = {}
        self._used = 0

    def put(self, key: bytes, offset: int) -> None:
        """Remember ``offset`` as the latest for ``key`` (offsets arrive in increasing order)."""
        if key not in self._offsets:
            self._used += len(key) + _ENTRY_OVERHEAD
        self._offsets[key] = offset

    def get(self, key: bytes) -> int | None:
        return self._offsets.get(key)

    @property
    def is_full(self) -> bool:
        return self._used >= self.memory_bytes

    def __len__(self) -> int:
        return len(self._offsets)
