"""The unit of work of a read: one offset range of one topic-partition, and how to plan
such ranges on the driver.

A :class:`PartitionRange` is pickled to an executor's Python worker, which has nothing
else of the query (``read()`` runs on a fresh unpickled reader), so it carries the
client configuration and read settings with it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from pyspark.sql.datasource import InputPartition

from gregor.spark.offsets import Offsets, TopicPartition, describe
from gregor.spark.options import SourceOptions
from gregor.spark.partition_leader import FetchSettings

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Records a query was due to read are gone (retention, deletion or truncation)."""


@dataclass(frozen=True)
class ReadSettings:
    """Per-query settings every task needs."""

    fetch: FetchSettings
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int


@dataclass(frozen=True)
class PartitionRange(InputPartition):
    """Offsets ``[start, end)`` of one topic-partition.  The range is bounded by offsets,
    not by a record count, because compacted topics and transaction markers leave gaps."""

    topic: str
    partition: int
    start: int
    end: int
    settings: ReadSettings = field(repr=False)


def report_data_loss(message: str, fail: bool) -> None:
    """Fail the query or, with ``failOnDataLoss=false``, warn and let the caller skip."""
    if fail:
        raise DataLossError(
            f"{message}. Some data may have been lost because it is no longer available "
            "in the topic (retention, deletion or truncation). If you want the query to "
            "continue with what is left, set the source option failOnDataLoss=false."
        )
    log.warning("%s; skipping the missing records (failOnDataLoss=false)", message)


def plan_ranges(
    start: Offsets,
    end: Offsets,
    earliest: Offsets,
    settings: ReadSettings,
    min_partitions: int | None,
    max_records_per_partition: int | None = None,
) -> list[PartitionRange]:
    """Non-empty ranges for every partition in ``end``, sorted by topic-partition.

    ``start`` must name every partition of ``end``.  A start below the partition's log
    start offset means records were deleted before being read: that is reported as data
    loss, and when tolerated the range starts at the log start instead.
    """
    spans: list[tuple[TopicPartition, int, int]] = []
    for tp in sorted(end):
        first, last = start[tp], end[tp]
        if last < first:
            raise ValueError(
                f"{describe(tp)}: ending offset {last} is before starting offset {first}"
            )
        if first < earliest[tp]:
            report_data_loss(
                f"{describe(tp)}: expected to read from offset {first}, but the earliest "
                f"available offset is {earliest[tp]}",
                settings.fail_on_data_loss,
            )
            first = earliest[tp]
        if first < last:
            spans.append((tp, first, last))
    spans = _split_for_parallelism(spans, min_partitions, max_records_per_partition)
    return [PartitionRange(tp[0], tp[1], first, last, settings) for tp, first, last in spans]


def _split_for_parallelism(
    spans: list[tuple[TopicPartition, int, int]],
    min_partitions: int | None,
    max_records_per_partition: int | None,
) -> list[tuple[TopicPartition, int, int]]:
    """Spark's ``maxRecordsPerPartition`` and ``minPartitions``, as its
    KafkaOffsetRangeCalculator: first each range into ceil(size / maxRecordsPerPartition)
    even parts; then, while there are fewer ranges than ``minPartitions``, the large ones
    into parts proportional to their share of the offsets that ranges too small to split
    leave, so that there are about ``minPartitions``."""
    if max_records_per_partition:
        spans = [piece for span in spans
                 for piece in _divide(span, -(-(span[2] - span[1]) // max_records_per_partition))]
    if not min_partitions or len(spans) >= min_partitions:
        return spans
    total = sum(last - first for _, first, last in spans)
    unsplit = [(tp, last - first) for tp, first, last in spans
               if _part_count(last - first, total, min_partitions) == 1]
    unsplit_tps = {tp for tp, _ in unsplit}
    split_total = total - sum(size for _, size in unsplit)
    split_min_partitions = max(min_partitions - len(unsplit), 1)
    return [piece for span in spans for piece in _divide(
        span, 1 if span[0] in unsplit_tps
        else _part_count(span[2] - span[1], split_total, split_min_partitions))]


def _part_count(size: int, total: int, min_parts: int) -> int:
    """Spark's share of ``min_parts`` for a range: at least 1, rounded half up (Scala's
    math.round, not Python's round to even)."""
    return max(math.floor(size / total * min_parts + 0.5), 1)


def _divide(span: tuple[TopicPartition, int, int],
            parts: int) -> list[tuple[TopicPartition, int, int]]:
    """``parts`` ranges as even as integers allow, the remainder going to the last ones."""
    tp, low, last = span
    pieces = []
    remaining = last - low
    for part in range(parts):
        piece = remaining // (parts - part)
        remaining -= piece
        if piece:
            pieces.append((tp, low, low + piece))
        low += piece
    return pieces


def read_settings(options: SourceOptions) -> ReadSettings:
    """The part of the parsed options that executors need."""
    return ReadSettings(
        fetch=FetchSettings.from_config(options.client_config),
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
    )
