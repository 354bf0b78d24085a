"""``spark.readStream.format("gregor")``: micro-batches of new records.

An offset is ``{topic: {"partition": next offset to read}}`` (Spark's Kafka source uses
the same shape), so the end of one micro-batch is the start of the next.  Spark keeps
these in its checkpoint; a restarted query resumes from them, so the broker is never
told what was consumed.

``initialOffset``, ``latestOffset``, ``partitions``, ``commit`` and ``stop`` run in one
long-lived planner process per query; ``read`` runs in executor workers on a separately
unpickled reader, so it uses nothing but its :class:`PartitionRange`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from gregor.spark.offset_lookup import OffsetLookup
from gregor.spark.offsets import Offsets, describe, offsets_from_json, offsets_to_json
from gregor.spark.options import SourceOptions
from gregor.spark.partition_range import (
    plan_ranges,
    read_settings,
    report_data_loss,
)
from gregor.spark.partition_reader import read_range
from gregor.spark.read_limit import cap_offsets


class GregorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader with ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` with
    ``maxTriggerDelay``, and ``trigger(availableNow=True)``.

    Partitions that appear while the query runs (new topics matching ``subscribePattern``,
    partitions added to a topic) are read from their earliest offset, as in Spark.

    ``minOffsetsPerTrigger`` holds a trigger back (``latestOffset`` answers its start)
    while fewer new offsets than that are there, until ``maxTriggerDelay`` has passed since
    the last micro-batch, as Spark's Kafka source does; the first trigger of a run is
    never held.  Under availableNow it is ignored: waiting there could never end.
    """

    def __init__(self, options: SourceOptions,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._options = options
        self._client: OffsetLookup | None = None
        self._available_now_end: Offsets | None = None
        self._latest_seen: Offsets | None = None
        self._clock = clock
        self._last_trigger_s: float | None = None

    @property
    def _lookup(self) -> OffsetLookup:
        # Created on first use in the planner process: an instance that Spark pickles for
        # read() must not hold a client.
        if self._client is None:
            self._client = OffsetLookup(self._options.client_config)
        return self._client

    def initialOffset(self) -> dict:
        options = self._options
        tps = self._lookup.partitions(options.subscription)
        start = self._lookup.resolve(
            options.starting,
            tps,
            starting=True,
            fail_if_no_timestamp_match=options.fail_if_no_timestamp_match,
        )
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        """The row cap, if any; ``minOffsetsPerTrigger`` is applied in ``latestOffset``
        from the options, since PySpark has no composite limit to pass both."""
        limit = self._options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the end of the query at today's log ends; later records wait for the next run."""
        tps = self._lookup.partitions(self._options.subscription)
        self._available_now_end = self._lookup.latest(tps)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        latest = self._latest_offsets(begin)
        self._latest_seen = latest
        if self._hold_trigger(begin, latest):
            return offsets_to_json(begin)
        new = [tp for tp in latest if tp not in begin]
        if isinstance(limit, ReadMaxRows):
            earliest = self._lookup.earliest(latest)
            begin.update({tp: earliest[tp] for tp in new})
            # Share the budget among offsets that still exist.  Counted from ``begin``,
            # offsets deleted by retention would use it up: with failOnDataLoss=false the
            # query would creep through the deleted range one empty micro-batch (and one
            # warning) at a time instead of skipping it in one.  partitions() still sees
            # ``begin`` below the log start and reports the loss.
            base = {tp: max(begin[tp], min(earliest[tp], latest[tp])) for tp in latest}
            capped = cap_offsets(base, latest, limit.max_rows)
        else:
            begin.update(self._lookup.earliest(new))
            capped = latest
        # A log that now ends before where the query is (the topic was deleted and created
        # again, or an unclean leader election truncated it) moves the end back, as in
        # Spark: partitions() reports the records that are gone, and reading goes on there.
        return offsets_to_json({
            tp: end if end < begin[tp] else max(begin[tp], capped[tp])
            for tp, end in latest.items()
        })

    def _latest_beyond(self, begin: Offsets) -> Offsets:
        """Log ends of the subscribed partitions, asked again (``fetchOffset.numRetries``
        times, ``fetchOffset.retryIntervalMs`` apart, as Spark's Kafka source) while one is
        below where the query is: a new leader's high watermark can lag for a moment, and
        that is no data loss."""
        options = self._options
        for attempt in range(1, options.fetch_offset_num_retries + 1):
            latest = self._lookup.latest(self._lookup.partitions(options.subscription))
            behind = any(begin.get(tp, end) > end for tp, end in latest.items())
            if not behind or attempt == options.fetch_offset_num_retries:
                break
            time.sleep(options.fetch_offset_retry_interval_ms / 1000)
        return latest

    def _hold_trigger(self, begin: Offsets, latest: Offsets) -> bool:
        """``minOffsetsPerTrigger``: too few new offsets, and not yet ``maxTriggerDelay``
        since the last micro-batch (offsets of new partitions count from 0, as in Spark)."""
        minimum = self._options.min_offsets_per_trigger
        if minimum is None or self._available_now_end is not None:
            return False
        now = self._clock()
        waited_ms = (None if self._last_trigger_s is None
                     else (now - self._last_trigger_s) * 1000)
        new = sum(max(0, end - begin.get(tp, 0)) for tp, end in latest.items())
        if (waited_ms is not None and waited_ms < self._options.max_trigger_delay_ms
                and new < minimum):
            return True
        self._last_trigger_s = now
        return False

    def reportLatestOffset(self) -> dict | None:
        """The log ends seen by the last ``latestOffset`` call, for query progress."""
        return None if self._latest_seen is None else offsets_to_json(self._latest_seen)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        stop = offsets_from_json(end)
        if begin == stop:
            return []
        earliest = self._lookup.earliest(stop)
        options = self._options
        for tp, last in stop.items():
            if tp not in begin:
                # A partition first seen in this batch starts at its log start (capped at the
                # planned end so that deletions since latestOffset show up as data loss),
                # which is 0 unless records went before the query saw it (Spark reports that).
                begin[tp] = min(earliest[tp], last)
                if earliest[tp] != 0:
                    report_data_loss(f"{describe(tp)}: added partition starts at offset "
                                     f"{earliest[tp]}, not 0", options.fail_on_data_loss)
            if last < begin[tp]:
                report_data_loss(f"{describe(tp)}: offset was changed from {begin[tp]} to {last}",
                                 options.fail_on_data_loss)
                begin[tp] = last
        return plan_ranges(begin, stop, earliest, read_settings(options), options.min_partitions,
                           options.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the checkpoint, not a consumer group, holds the progress (as with
        Spark's Kafka source), so the broker's retention alone decides when data goes."""

    def stop(self) -> None:
        self._client = None

    def _latest_offsets(self, begin: Offsets) -> Offsets:
        """Log ends of the subscribed partitions, or the frozen ends under availableNow.

        Partitions of ``begin`` that no longer exist are data loss, under availableNow too
        (as in Spark); partitions created after the ends were frozen stay where they are
        until the next run.
        """
        if self._available_now_end is not None:
            latest = dict(self._available_now_end)
            if set(begin) - set(latest):
                for tp in self._lookup.partitions(self._options.subscription):
                    if tp in begin and tp not in latest:
                        latest[tp] = begin[tp]
        else:
            latest = self._latest_beyond(begin)
        gone = sorted(set(begin) - set(latest))
        if gone:
            report_data_loss(
                "partitions " + ", ".join(describe(tp) for tp in gone) + " no longer exist",
                self._options.fail_on_data_loss,
            )
        return latest
