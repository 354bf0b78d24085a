"""Kafka's offset checkpoint file format: version, count, then ``topic partition offset`` lines."""

from __future__ import annotations

import os
from pathlib import Path

_VERSION = 0


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
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as handle:
        handle.write(f"{_VERSION}\n{len(entries)}\n{body}")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
