"""Small state files written atomically, and Kafka's offset checkpoint format.

The checkpoint format is a version line, a count line, then one
``topic partition offset`` line per partition.
"""

from __future__ import annotations

import os
from pathlib import Path

_VERSION = 0


def write_atomically(path: Path, text: str, *, durable: bool = True) -> None:
    """Replace ``path`` with ``text`` so a crash leaves either the old or the new file.

    The data is fsynced before the rename: without that, a machine crash could publish
    the new name before its contents reach the disk. ``durable=False`` skips the fsync,
    for a file whose loss to a machine crash recovery makes good, and which is fsynced
    (``fsync_file``) before anything relies on it: the rename still keeps a process
    crash from leaving half a file.
    """
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as handle:
        handle.write(text)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    try:
        lines = path.read_text().split("\n")
        count = int(lines[1])
        result = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.rsplit(" ", 2)
            result[(topic, int(partition))] = int(offset)
        return result
    except (FileNotFoundError, IndexError, ValueError):
        return {}


def write_checkpoint(path: Path, entries: dict[tuple[str, int], int]) -> None:
    body = "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(entries.items()))
    write_atomically(path, f"{_VERSION}\n{len(entries)}\n{body}")
