"""Read one :class:`PartitionRange` on an executor with a confluent-kafka consumer.

The consumer is assigned the partition at the range's start offset and never joins a
group nor commits: Spark's checkpoint, not the broker, remembers what was read.  Reading
stops by offset, not by count, because compaction and transaction markers leave gaps;
librdkafka's end-of-partition event tells us when the last offsets of a range were such
gaps.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition
from pyspark.sql.datasource import InputPartition

from gregor.spark.arrow_rows import records_to_batch
from gregor.spark.partition_range import PartitionRange, report_data_loss

CHUNK_ROWS = 32_768
"""Rows per RecordBatch: large enough to amortise Arrow and JVM overhead per batch..."""
CHUNK_BYTES = 16 << 20
"""...and small enough in bytes that large records do not pile up in worker memory."""
CONSUME_MAX = 10_000
CONSUME_WAIT_S = 0.5
WATERMARK_TIMEOUT_S = 30.0

CONSUMER_DEFAULTS = {
    "client.id": "gregor-spark",
    # Spark's Kafka source reads with the Java client's default; librdkafka's differs.
    "isolation.level": "read_uncommitted",
    # librdkafka pauses fetching for 1 s once ~100k small records are queued; a reader
    # that drains its queue as fast as it can only loses throughput to that pause.
    "fetch.queue.backoff.ms": "10",
    "queued.min.messages": "1000000",
    "max.partition.fetch.bytes": str(8 << 20),
}
"""Defaults that the user's ``kafka.*`` options may override."""

CONSUMER_REQUIRED = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    # The reader relies on these two to end ranges that finish in a gap and to notice
    # deleted offsets instead of silently jumping elsewhere.
    "enable.partition.eof": "true",
    "auto.offset.reset": "error",
}
"""Settings the reader depends on; they override the user's options."""

_OUT_OF_RANGE = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)


def read_range(part: InputPartition) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``[part.start, part.end)`` as Arrow batches in offset order."""
    if not isinstance(part, PartitionRange):
        # Spark runs a plan without partitions as a single InputPartition(None) task.
        return iter(())
    return _read_range(part)


def _read_range(part: PartitionRange) -> Iterator[pa.RecordBatch]:
    # librdkafka insists on a group.id even though an assign()-only consumer never uses it.
    config = {
        **CONSUMER_DEFAULTS,
        "group.id": f"gregor-spark-{uuid.uuid4().hex}",
        **part.settings.consumer_config,
        **CONSUMER_REQUIRED,
    }
    consumer = Consumer(config)
    try:
        yield from _RangeReader(consumer, part).batches()
    finally:
        consumer.close()


class _RangeReader:
    """The consume loop for one range; ``position`` is the next offset still to read."""

    def __init__(self, consumer: Consumer, part: PartitionRange) -> None:
        self._consumer = consumer
        self._part = part
        self._kafka_tp = KafkaTopicPartition(part.topic, part.partition)
        self.position = part.start

    def batches(self) -> Iterator[pa.RecordBatch]:
        part = self._part
        timeout_s = part.settings.poll_timeout_ms / 1000
        self._assign()
        pending: list[Message] = []
        pending_bytes = 0
        deadline = time.monotonic() + timeout_s
        while self.position < part.end:
            messages = self._next_messages()
            records = [m for m in messages if m.error() is None]
            if records:
                deadline = time.monotonic() + timeout_s
                pending.extend(self._take_in_range(records))
                pending_bytes += sum(map(len, records))
                if len(pending) >= CHUNK_ROWS or pending_bytes >= CHUNK_BYTES:
                    yield self._to_batch(pending)
                    pending, pending_bytes = [], 0
            if len(records) != len(messages):
                for message in messages:
                    error = message.error()
                    if error is not None:
                        self._handle_event(error, message)
            if not records and self.position < part.end and time.monotonic() > deadline:
                raise TimeoutError(
                    f"{part.topic}-{part.partition}: no record at offset {self.position} "
                    f"within {part.settings.poll_timeout_ms} ms (reading up to {part.end}); "
                    "raise kafkaConsumer.pollTimeoutMs if the broker is just slow"
                )
        if pending:
            yield self._to_batch(pending)

    def _next_messages(self) -> list[Message]:
        """Whatever the client has queued, waiting up to ``CONSUME_WAIT_S`` only when it has
        nothing: ``consume(n, timeout)`` alone would wait out the timeout for a full ``n``."""
        messages = self._consumer.consume(CONSUME_MAX, 0)
        if messages:
            return messages
        first = self._consumer.poll(CONSUME_WAIT_S)
        if first is None:
            return []
        return [first, *self._consumer.consume(CONSUME_MAX - 1, 0)]

    def _take_in_range(self, records: list[Message]) -> list[Message]:
        """Advance ``position`` past ``records`` and drop those at or beyond the end."""
        end = self._part.end
        last = _offset(records[-1])
        if last < end:
            self.position = last + 1
            return records
        self.position = end
        return [m for m in records if _offset(m) < end]

    def _handle_event(self, error: KafkaError, message: Message) -> None:
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            self._at_end_of_log(_offset(message))
        elif code in _OUT_OF_RANGE:
            self._out_of_range()
        elif error.fatal() or not error.retriable():
            raise KafkaException(error)
        # Retriable errors (a broker restarting, a leader moving): librdkafka retries them.

    def _at_end_of_log(self, log_end: int) -> None:
        """The consumer caught up with the log end.  If that is at or past the range end,
        the offsets still missing were gaps; otherwise check whether the log really ends
        below the range (truncation) or the event was stale."""
        part = self._part
        if log_end >= part.end:
            self.position = part.end
            return
        _, high = self._watermarks()
        if high < part.end:
            report_data_loss(
                f"{part.topic}-{part.partition}: expected records up to offset {part.end}, "
                f"but the log now ends at offset {high}",
                part.settings.fail_on_data_loss,
            )
            self.position = part.end

    def _out_of_range(self) -> None:
        """The broker no longer has ``position``: deleted below, or truncated above."""
        part = self._part
        low, high = self._watermarks()
        report_data_loss(
            f"{part.topic}-{part.partition}: expected to read from offset {self.position}, "
            f"but the available offsets are {low} to {high}",
            part.settings.fail_on_data_loss,
        )
        if self.position < low < part.end:
            self.position = low
            self._assign()
        else:
            self.position = part.end

    def _watermarks(self) -> tuple[int, int]:
        return self._consumer.get_watermark_offsets(
            self._kafka_tp, timeout=WATERMARK_TIMEOUT_S, cached=False
        )

    def _assign(self) -> None:
        self._consumer.assign(
            [KafkaTopicPartition(self._part.topic, self._part.partition, self.position)]
        )

    def _to_batch(self, records: list[Message]) -> pa.RecordBatch:
        part = self._part
        return records_to_batch(records, part.topic, part.partition, part.settings.include_headers)


def _offset(message: Message) -> int:
    """A record's offset, or an end-of-partition event's log end offset. confluent-kafka
    types ``offset()`` as optional, for the messages that carry none (other errors)."""
    offset = message.offset()
    assert offset is not None
    return offset
