"""Helpers for the storage unit tests: batches as a producer sends them, topic configs,
and decoding what a read returns.

The storage tests drive ``Log``/``LogSegment`` directly with real record batch v2
bytes (built by the same codec the tools use), so what they check is what the
broker writes and serves.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gregor.config import BrokerConfig, TopicConfig
from gregor.protocol.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from gregor.protocol.record_codec import Record, decode_records, encode_batch, iter_batches
from gregor.storage.log import Log
from gregor.storage.segment import FileRegion

BASE_TS = 1_700_000_000_000


def topic_config(**overrides: object) -> TopicConfig:
    """A topic config with Kafka's defaults plus ``overrides`` (dots spelled as ``_``)."""
    return TopicConfig(BrokerConfig.from_mapping({}),
                       {name.replace("_", "."): value for name, value in overrides.items()})


def batch(count: int = 1, *, tag: str = "v", timestamp: int = BASE_TS,
          timestamps: Sequence[int] | None = None, value_size: int = 0,
          producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
          base_sequence: int = NO_SEQUENCE, keyed: bool = True) -> bytes:
    """One batch of ``count`` records as a producer sends it (base offset 0).

    Values are ``<tag>-<i>`` padded to ``value_size`` so tests can tell batches apart.
    """
    stamps = list(timestamps) if timestamps is not None else [timestamp] * count
    records = [Record(offset=i, timestamp=stamps[i], key=(b"k%d" % i) if keyed else None,
                      value=f"{tag}-{i}".encode().ljust(value_size, b"."))
               for i in range(count)]
    return encode_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=base_sequence)


def decode_region(region: FileRegion | None) -> list[Record]:
    """Records of every whole batch in a read; a partial trailing batch is skipped,
    as clients do."""
    if region is None:
        return []
    records: list[Record] = []
    for raw in iter_batches(region.read()):
        records.extend(decode_records(raw)[1])
    return records


def batch_offsets(region: FileRegion | None) -> list[tuple[int, int]]:
    """``(base offset, last offset)`` of every whole batch in a read."""
    if region is None:
        return []
    spans = []
    for raw in iter_batches(region.read()):
        header = decode_records(raw)[0]
        spans.append((header.base_offset, header.last_offset))
    return spans


def read_all(log: Log, start: int | None = None) -> list[Record]:
    """Every record from ``start`` (default: the log start) to the log end, batch by batch."""
    offset = log.log_start_offset if start is None else start
    records: list[Record] = []
    while offset < log.log_end_offset:
        got = decode_region(log.read(offset, 1 << 20))
        assert got, f"no progress reading at {offset}"
        records.extend(r for r in got if r.offset >= offset)
        offset = got[-1].offset + 1
    return records


def open_log(directory: Path, config: TopicConfig | None = None, **kwargs: object) -> Log:
    return Log(directory, "t", 0, config or topic_config(), **kwargs)  # type: ignore[arg-type]
