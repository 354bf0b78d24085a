"""Read one :class:`PartitionRange` on an executor: Fetch from the partition's leader,
record batches in, Arrow record batches out.

Batches are taken as the broker stores them (CRC checked, decompressed, control batches
skipped) and their records scanned into Arrow columns (:mod:`gregor.spark.record_columns`).
The next Fetch goes out as soon as the last one's batch headers say where it ends, so the
broker reads and sends while this task builds columns.  Nothing joins a group or commits:
Spark's checkpoint, not the broker, remembers what was read.  Reading stops by offset, not
by count, because compaction and transaction markers leave gaps.

Transactions: read_uncommitted reads everything, as Spark's Kafka source does by default;
read_committed reads up to the last stable offset and leaves out the batches of aborted
transactions (:mod:`gregor.spark.aborted_transactions`).  Control batches are never rows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from gregor.client.connection import BrokerUnavailable
from gregor.protocol.compression import CompressionType, decompress
from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_batch import HEADER_SIZE, BatchHeader, validate_batch
from gregor.protocol.record_codec import iter_batches
from gregor.spark.aborted_transactions import AbortedTransactions
from gregor.spark.partition_leader import READ_COMMITTED, PartitionLeader
from gregor.spark.partition_range import PartitionRange, report_data_loss
from gregor.spark.record_columns import ChunkBuilder

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1
_LEADER_MOVED = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
    ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
    ErrorCode.unknown_topic_or_partition, ErrorCode.replica_not_available,
    ErrorCode.kafka_storage_error, ErrorCode.offset_not_available,
})
"""Errors after which the leader may be elsewhere: ask the metadata again and retry."""


def read_range(part: InputPartition) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``[part.start, part.end)`` as Arrow batches in offset order."""
    if not isinstance(part, PartitionRange):
        # Spark runs a plan without partitions as a single InputPartition(None) task.
        return iter(())
    return _read_range(part)


def _read_range(part: PartitionRange) -> Iterator[pa.RecordBatch]:
    leader = PartitionLeader(part.topic, part.partition, part.settings.fetch)
    try:
        yield from _RangeReader(leader, part).batches()
    finally:
        leader.close()


class _RangeReader:
    """The fetch loop for one range; ``position`` is the next offset still to read."""

    def __init__(self, leader: PartitionLeader, part: PartitionRange) -> None:
        self._leader = leader
        self._part = part
        self.position = part.start
        self._in_flight = False
        self._timeout_s = part.settings.poll_timeout_ms / 1000
        self.deadline = time.monotonic() + self._timeout_s
        """When waiting for the next offset turns into an error (kafkaConsumer.pollTimeoutMs
        without progress)."""

    def batches(self) -> Iterator[pa.RecordBatch]:
        part = self._part
        builder = ChunkBuilder(part.topic, part.partition, part.end,
                               part.settings.include_headers)
        while self.position < part.end:
            before = self.position
            data = self._fetch()
            if data is not None:
                for records, header in self._take(data):
                    builder.add(records, header, before)
                    if builder.full:
                        chunk = builder.build()
                        if chunk is not None:
                            yield chunk
            if self.position > before:
                self.deadline = time.monotonic() + self._timeout_s
            elif time.monotonic() > self.deadline:
                raise TimeoutError(
                    f"{part.topic}-{part.partition}: no record at offset {self.position} "
                    f"within {part.settings.poll_timeout_ms} ms (reading up to {part.end}); "
                    "raise kafkaConsumer.pollTimeoutMs if the broker is just slow"
                )
        chunk = builder.build()
        if chunk is not None:
            yield chunk

    def _fetch(self) -> Any | None:
        """This partition's part of the next Fetch answer; ``None`` after an error was
        dealt with."""
        leader = self._leader
        try:
            if not self._in_flight:
                leader.send_fetch(self.position)
            self._in_flight = False
            data = leader.receive_fetch()
        except BrokerUnavailable as exc:
            self._in_flight = False
            self._retry_later(str(exc))
            return None
        error = ErrorCode(data.error_code)
        if error == ErrorCode.offset_out_of_range:
            self._out_of_range()
            return None
        if error in _LEADER_MOVED:
            self._retry_later(error.name)
            return None
        if error != ErrorCode.none:
            raise RuntimeError(f"{self._part.topic}-{self._part.partition}: fetch at offset "
                               f"{self.position} answered {error.name}")
        return data

    def _take(self, data: Any) -> list[tuple[bytes | memoryview, BatchHeader]]:
        """The data batches of a fetch answer that hold offsets from ``position`` on, with
        their records decompressed.  Moves ``position`` past every whole batch and, before
        anything is decompressed, sends the next Fetch from there."""
        wanted = []
        before = self.position
        read_committed = self._leader.settings.isolation_level == READ_COMMITTED
        # Only a read_committed answer's list is the reader's to apply.
        committed = AbortedTransactions(
            (t.producer_id, t.first_offset)
            for t in (data.aborted_transactions or () if read_committed else ()))
        for view in iter_batches(data.records or b""):
            header = validate_batch(view)
            if header.next_offset <= self.position:
                continue
            self.position = header.next_offset
            if committed.keeps(view, header) and header.records_count:
                wanted.append((view, header))
        if self.position == before:
            self._no_batch(data.last_stable_offset if read_committed else data.high_watermark)
        elif self.position < self._part.end:
            try:
                self._leader.send_fetch(self.position)
                self._in_flight = True
            except BrokerUnavailable as exc:
                self._retry_later(str(exc))
        return [
            (view[HEADER_SIZE:] if header.compression == CompressionType.NONE
             else decompress(header.compression, view[HEADER_SIZE:]), header)
            for view, header in wanted
        ]

    def _no_batch(self, high_watermark: int) -> None:
        """The broker has no batch from ``position`` on below its high watermark: the
        offsets up to it are gaps (compaction, or records of aborted transactions that
        were cleaned).  A high watermark at or below ``position`` is waited out until
        the deadline, as Spark's Kafka source waits out its poll timeout: a newly elected
        leader's high watermark can trail the old one's for a moment.  After that, the
        log was cut below the range's end."""
        part = self._part
        if high_watermark > self.position:
            self.position = min(high_watermark, part.end)
        elif time.monotonic() > self.deadline:
            report_data_loss(
                f"{part.topic}-{part.partition}: expected records up to offset {part.end}, "
                f"but the log now ends at offset {high_watermark}",
                part.settings.fail_on_data_loss,
            )
            self.position = part.end

    def _out_of_range(self) -> None:
        """The broker no longer has ``position``: deleted below, or truncated above."""
        part = self._part
        try:
            low = self._leader.list_offset(EARLIEST_TIMESTAMP)
            high = self._leader.list_offset(LATEST_TIMESTAMP)
        except BrokerUnavailable as exc:
            self._retry_later(str(exc))
            return
        report_data_loss(
            f"{part.topic}-{part.partition}: expected to read from offset {self.position}, "
            f"but the available offsets are {low} to {high}",
            part.settings.fail_on_data_loss,
        )
        self.position = low if self.position < low < part.end else part.end

    def _retry_later(self, reason: str) -> None:
        """The leader is gone or moved: find it again after the client's retry backoff."""
        log.info("%s-%d: %s; looking for the leader again", self._part.topic,
                 self._part.partition, reason)
        self._leader.forget()
        time.sleep(self._leader.settings.retry_backoff_ms / 1000)
