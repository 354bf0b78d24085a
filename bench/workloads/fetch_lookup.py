"""Offset lookup as the log grows: fetch latency at the start and at the tail of a small
and a large log (100 MB against 5 GB in the full run).

Producing 5 GB through the broker would take minutes of the benchmark's budget
for no insight, so the logs are written through gregor's own storage API
(:class:`gregor.storage.log.Log`, the code the broker appends with) while the
broker is stopped: batches of 1,000 records of 1 KiB, validated, offset-stamped,
indexed and rolled into 1 GiB segments exactly as produced data would be. The
broker then restarts on that directory and answers fetches, timed by a bare
Fetch round trip (:mod:`bench.clients.kafka_fetch`).
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from bench.clients.kafka_fetch import KafkaFetcher
from bench.peers.gregor import GregorPeer
from bench.results import Lookup, percentile
from gregor.config import BrokerConfig, TopicConfig
from gregor.protocol.record_codec import Record, encode_batch
from gregor.storage.log import Log

RECORD_SIZE = 1024
RECORDS_PER_BATCH = 1000
FETCH_MAX_BYTES = 1024 * 1024
# Offsets are drawn from this many records at the start, or before the tail
# margin at the end, so that every fetch returns a full FETCH_MAX_BYTES.
_WINDOW_RECORDS = 10_000
_TAIL_MARGIN_RECORDS = 3_000
_WARMUP_FETCHES = 20


def _batch() -> bytes:
    rng = random.Random(7)
    now_ms = int(time.time() * 1000)
    return encode_batch([Record(i, now_ms, None, rng.randbytes(RECORD_SIZE))
                         for i in range(RECORDS_PER_BATCH)])


def write_log(data_dir: Path, topic: str, target_bytes: int) -> int:
    """Append to partition 0 of ``topic`` until it holds ``target_bytes``; return its end."""
    log = Log(data_dir / f"{topic}-0", topic, 0, TopicConfig(BrokerConfig.load(), {}))
    try:
        batch = _batch()
        while log.size < target_bytes:
            log.append_as_leader(batch, leader_epoch=0)
        return log.log_end_offset
    finally:
        log.close()


def space_for(workdir: Path, wanted: int, reserve: int) -> int:
    """How many bytes of log fit: ``wanted``, or what the disk has left beyond ``reserve``."""
    free = shutil.disk_usage(workdir).free - reserve
    return max(0, min(wanted, free))


def measure_lookup(peer: GregorPeer, sizes: dict[str, int], samples: int,
                   note: Callable[[str], None]) -> list[Lookup]:
    """Build one log per entry of ``sizes`` (topic -> bytes), then time fetches on each."""
    client = peer.client()
    for topic in sizes:
        client.create(topic, 1)
    peer.stop()
    ends = {}
    for topic, size in sizes.items():
        started = time.monotonic()
        ends[topic] = write_log(peer.data_dir, topic, size)
        note(f"wrote a {size / 1e6:,.0f} MB log ({ends[topic]:,} records) through the storage "
             f"API in {time.monotonic() - started:.1f} s")
    peer.start()
    rng = random.Random(11)
    cells = [(topic, position) for topic in sizes for position in ("start", "tail")]
    timings: dict[tuple[str, str], list[float]] = {cell: [] for cell in cells}
    fetcher = KafkaFetcher(peer.bootstrap)
    try:
        for i in range(_WARMUP_FETCHES + samples):
            for topic, position in cells:  # interleaved, so drift hits every cell alike
                end = ends[topic]
                offset = (rng.randrange(0, _WINDOW_RECORDS) if position == "start" else
                          rng.randrange(end - _WINDOW_RECORDS, end - _TAIL_MARGIN_RECORDS))
                elapsed = fetcher.timed_fetch(topic, offset, FETCH_MAX_BYTES)
                if i >= _WARMUP_FETCHES:
                    timings[(topic, position)].append(elapsed)
    finally:
        fetcher.close()
    for topic in sizes:
        client.delete(topic, 1)
    results = []
    for (topic, position), values in timings.items():
        values.sort()
        results.append(Lookup(sizes[topic], position, len(values),
                              percentile(values, 0.5) * 1e3, percentile(values, 0.99) * 1e3))
    return results
