"""Shared mechanics of the sparse, append-only index files next to each segment."""

from __future__ import annotations

import os
from pathlib import Path


class CorruptIndexError(Exception):
    """An index file that fails its sanity check; the segment's indexes are rebuilt."""


class IndexFile:
    """Fixed-size big-endian entries appended to a file and mirrored in memory.

    Kafka mmaps preallocated index files; Python gains nothing from mmap here, so
    entries live in lists for bisecting and are appended to the file with one
    small write each (one per ``index.interval.bytes`` of log, so rare).
    """

    entry_size: int

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def _read_raw(self) -> bytes:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise CorruptIndexError(f"{self.path.name} is missing") from None
        if len(data) % self.entry_size:
            raise CorruptIndexError(f"{self.path.name} has a partial entry")
        return data

    def _write_entry(self, raw: bytes) -> None:
        os.write(self._open(), raw)

    def _rewrite(self, raw: bytes) -> None:
        self.close()
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_bytes(raw)
        os.replace(tmp, self.path)

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        self.close()
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path
