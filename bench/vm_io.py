"""The machine's disk and page cache over a measured window, sampled each second.

A copy of gigabytes can be bound by the machine rather than by the broker: a leader's
``sendfile`` from pages no longer cached reads the disk on the event loop, and a
follower's ``write`` waits in ``balance_dirty_pages`` once the dirty pages pass the
kernel's threshold (``vm.dirty_ratio`` of the reclaimable memory), at the rate the disk
writes them back. ``/proc/vmstat`` and ``/proc/diskstats`` show both, so a report can
say which it was.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from bench.machine import mount_of

SECTOR = 512
PAGE = os.sysconf("SC_PAGE_SIZE")


def _device_of(path: Path) -> str:
    """The block device (``vda``) whose mount holds ``path``."""
    device, _ = mount_of(path)
    return os.path.basename(os.path.realpath(device)) if device.startswith("/dev/") else ""


def _vmstat() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/vmstat").read_text().splitlines():
        key, value = line.split()
        fields[key] = int(value)
    return fields


def _disk(device: str) -> tuple[int, int]:
    """Bytes read and written by ``device`` since boot."""
    for line in Path("/proc/diskstats").read_text().splitlines():
        parts = line.split()
        if parts[2] == device:
            return int(parts[5]) * SECTOR, int(parts[9]) * SECTOR
    return 0, 0


class IoSampler:
    """Per second: the disk's MB read and written, the MB dirty and under writeback
    (what ``vmstat 1`` and ``iostat`` show), until stopped."""

    def __init__(self, directory: Path, interval: float = 1.0) -> None:
        self.device, self.interval = _device_of(directory), interval
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        read, written = _disk(self.device)
        mark = time.monotonic()
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            r, w = _disk(self.device)
            vm = _vmstat()
            span = now - mark
            self.samples.append({
                "t": now - self._started,
                "read_mb_s": (r - read) / span / 1e6, "write_mb_s": (w - written) / span / 1e6,
                "dirty_mb": vm["nr_dirty"] * PAGE / 1e6,
                "writeback_mb": vm["nr_writeback"] * PAGE / 1e6,
                "cached_mb": vm["nr_file_pages"] * PAGE / 1e6,
                "free_mb": vm["nr_free_pages"] * PAGE / 1e6})
            read, written, mark = r, w, now

    def stop(self) -> list[dict[str, float]]:
        self._stop.set()
        self._thread.join()
        return self.samples


def summary(samples: list[dict[str, float]], seconds: float) -> str:
    """The window's disk traffic and its largest dirty and writeback figures."""
    if not samples:
        return "no I/O samples"
    read = sum(s["read_mb_s"] for s in samples) * seconds / len(samples)
    written = sum(s["write_mb_s"] for s in samples) * seconds / len(samples)
    return (f"disk read {read:.0f} MB ({read / seconds:.0f} MB/s), written {written:.0f} MB "
            f"({written / seconds:.0f} MB/s); dirty up to "
            f"{max(s['dirty_mb'] for s in samples):.0f} MB, under writeback up to "
            f"{max(s['writeback_mb'] for s in samples):.0f} MB, page cache "
            f"{samples[0]['cached_mb'] / 1e3:.1f} -> {samples[-1]['cached_mb'] / 1e3:.1f} GB, "
            f"free down to {min(s['free_mb'] for s in samples) / 1e3:.1f} GB")
