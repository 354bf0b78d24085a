"""The unit of work of a read: one offset range of one topic-partition, and how to plan
such ranges on the driver.

A :class:`PartitionRange` is pickled to an executor's Python worker, which has nothing
else of the query (``read()`` runs on a fresh unpickled reader), so it carries the
client configuration and read settings with it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from itertools import pairwise

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
    spans = _split_for_parallelism(spans, min_partitions)
    return [PartitionRange(tp[0], tp[1], first, last, settings) for tp, first, last in spans]


def _split_for_parallelism(
    spans: list[tuple[TopicPartition, int, int]], min_partitions: int | None
) -> list[tuple[TopicPartition, int, int]]:
    """Spark's ``minPartitions``: cut large ranges so that there are about that many tasks,
    each range into parts proportional to its share of all offsets."""
    if not min_partitions or len(spans) >= min_partitions:
        return spans
    total = sum(last - first for _, first, last in spans)
    ideal = total / min_partitions
    split: list[tuple[TopicPartition, int, int]] = []
    for tp, first, last in spans:
        size = last - first
        parts = max(1, min(size, round(size / ideal)))
        bounds = [first + size * i // parts for i in range(parts + 1)]
        split.extend((tp, lo, hi) for lo, hi in pairwise(bounds))
    return split


def read_settings(options: SourceOptions) -> ReadSettings:
    """The part of the parsed options that executors need."""
    return ReadSettings(
        fetch=FetchSettings.from_config(options.client_config),
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
    )
