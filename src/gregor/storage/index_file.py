"""Shared mechanics of the sparse, append-only index files next to each segment."""

from __future__ import annotations

import itertools
import operator
import os
import sys
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path


class CorruptIndexError(Exception):
    """An index file that fails its sanity check; the segment's indexes are rebuilt."""


# (byte offset inside an entry, width in bytes, array typecode of the column)
Column = tuple[int, int, str]


def split_columns(data: bytes, entry_size: int, layout: Sequence[Column]) -> list[array]:
    """Turn big-endian fixed-size entries into one native ``array`` per field.

    Strided slice copies move each byte of a field into place, so loading an index
    of a million entries runs at C speed instead of a Python loop per entry.
    """
    count = len(data) // entry_size
    columns = []
    for start, width, typecode in layout:
        packed = bytearray(count * width)
        for byte in range(width):
            packed[byte::width] = data[start + byte::entry_size]
        column = array(typecode)
        column.frombytes(packed)
        if sys.byteorder == "little":
            column.byteswap()
        columns.append(column)
    return columns


def increasing(column: array, strictly: bool = True) -> bool:
    """Whether each value is above (or, not strictly, at least) the one before it."""
    compare: Callable[[int, int], bool] = operator.lt if strictly else operator.le
    return all(map(compare, column, itertools.islice(column, 1, None)))


class IndexFile:
    """Fixed-size big-endian entries appended to a file and mirrored in memory.

    Kafka mmaps preallocated index files. Here the entries live in compact
    ``array`` columns (a few bytes per entry, bisected in C) and each new entry is
    appended to the file with one small write -- one per ``index.interval.bytes``
    of log, so rare. The file never holds preallocated zeros, so after a crash its
    length alone says whether the last entry is whole.
    """

    entry_size: int

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._fd: int | None = None

    def create(self) -> None:
        """Create the (empty) file of a new segment's index, without holding it open."""
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))

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
            raise CorruptIndexError(f"{self.path.name} ends with a partial entry")
        return data

    def _write_entry(self, raw: bytes) -> None:
        os.write(self._open(), raw)

    def _clear(self) -> None:
        """Empty the file in place, for a rebuild from the log (Kafka's reset truncates
        too). A crash midway leaves a shorter index, still valid as a sparse one, or a
        partial entry, which fails the load check and is rebuilt; no temporary file is
        made, which cost about 90 us a file on ext4 when 10,000 logs recovered."""
        self.close()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC,
                           0o644)

    def _rewrite(self, raw: bytes) -> None:
        """Replace the whole file atomically (truncation and rebuilds)."""
        self.close()
        tmp = self.path.with_name(self.path.name + ".tmp")
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
