"""Shared mechanics of the sparse, append-only index files next to each segment."""

from __future__ import annotations

import contextlib
import itertools
import operator
import os
import resource
import sys
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

from gregor.storage.checkpoint_file import fsync_file


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


def _writer_budget() -> int:
    """How many index files may be open for appending at once: a quarter of the
    process's descriptor limit, at most 4,096. Each log keeps its segments' files
    open for reads already; an index held open per log as well ran a broker of
    6,665 partitions into a 20,000 limit, and its log directory failed."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(64, min(4096, soft // 4 if soft > 0 else 4096))


class _Writers:
    """The index files open for appending, least recently appended first; past the
    budget the oldest is closed (and opened again at its next entry). Entries come
    once per ``index.interval.bytes`` of log, so only partitions being written keep
    theirs open. A lock, since logs are closed on worker threads too."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.lock = threading.Lock()
        self.open: OrderedDict[IndexFile, None] = OrderedDict()


_WRITERS = _Writers(_writer_budget())


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
        self._unsynced = False  # entries written and not fsynced yet

    def create(self) -> None:
        """Create the (empty) file of a new segment's index, without holding it open."""
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))

    def _open(self) -> int:
        with _WRITERS.lock:
            if self._fd is not None:
                _WRITERS.open.move_to_end(self)
                return self._fd
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            _WRITERS.open[self] = None
            if len(_WRITERS.open) > _WRITERS.budget:
                oldest, _ = _WRITERS.open.popitem(last=False)
                oldest._release()
            return self._fd

    def _release(self) -> None:
        """Close the appending descriptor (the caller holds the lock)."""
        _WRITERS.open.pop(self, None)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

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
        self._unsynced = True

    def _clear(self) -> None:
        """Empty the file in place, for a rebuild from the log (Kafka's reset truncates
        too). A crash midway leaves a shorter index, still valid as a sparse one, or a
        partial entry, which fails the load check and is rebuilt; no temporary file is
        made, which cost about 90 us a file on ext4 when 10,000 logs recovered. Not
        held open after: an index is opened on its first entry, and a broker holding
        an open index per quiet log ran out of file descriptors at 10,000 logs."""
        self.close()
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))

    def _rewrite(self, raw: bytes) -> None:
        """Replace the whole file atomically (truncation and rebuilds)."""
        self.close()
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(raw)
        os.replace(tmp, self.path)

    def flush(self) -> None:
        """Fsync the entries written since the last flush, through a descriptor of its
        own: flushes run on worker threads, and the appending one may be closed (past
        the budget) at any time. Cleared first, so an entry written meanwhile is
        flushed now or next time."""
        if not self._unsynced:
            return
        self._unsynced = False
        with contextlib.suppress(FileNotFoundError):  # deleted with its segment
            fsync_file(self.path)

    def close(self) -> None:
        with _WRITERS.lock:
            self._release()

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        self.close()
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path
