"""glibc malloc thresholds for the broker process.

Every produce request of a megabyte is decoded into buffers of about that size
(kio's copy of the records, the copy whose offsets are stamped). glibc serves
sizes above its mmap threshold with a fresh ``mmap`` and gives them back with
``munmap``, and trims the heap top beyond its trim threshold; its dynamic
threshold only rises after such a chunk is freed, so whether a request's buffers
are reused or faulted in page by page depends on the allocation history. Faulted
in, they cost the kernel about 500 page faults and as many zeroed pages per
megabyte: measured as a third of the broker's CPU on 1 KiB produce, and the cause
of runs at half speed. Fixed thresholds keep those buffers in the heap, at the
cost of holding up to the trim threshold of freed memory.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's maximum on 64-bit
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024
_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_large_buffers_in_heap() -> None:
    """Set the thresholds unless the environment sets them (or the C library is not
    glibc, which has no ``mallopt``)."""
    if any(name in os.environ for name in _ENVIRONMENT):
        return
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return
    if not (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
            and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1):
        log.info("malloc thresholds not set; large requests may cost page faults")
