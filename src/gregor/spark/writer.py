"""``df.write.format("gregor")`` and ``df.writeStream.format("gregor")``: produce rows.

Columns follow Spark's Kafka sink: ``value`` (required, binary or string), ``key``
(optional, binary or string), ``topic`` (optional string; the ``topic`` option overrides
it), ``partition`` (optional int) and ``headers`` (optional array of key/value structs).
Other columns are ignored, and names match case-insensitively, as in Spark.

Streaming output modes: Append, and Complete, which appends the whole result table at
every micro-batch (as Spark's Kafka sink does).  Update mode and a batch write's default
save mode (ErrorIfExists) never reach this module from ``format("gregor")``: the JVM
source's table takes them and hands the rows here as appends (GregorTable and
GregorProvider in jvm/).  Without that jar, Spark refuses both for every Python data
source ("gregor does not support Update mode"; PySpark's ``PythonWriteBuilder`` lacks
Spark's internal ``SupportsStreamingUpdateAsAppend``, and the checks never reach Python):
batch writes then need ``.mode("append")``, and Update mode ``foreachBatch`` with it.

Delivery is at-least-once by default.  Each task flushes its producer before it reports success,
because the producer lives in the executor process: the driver-side ``commit`` runs in
another process and has nothing to flush.  A failed delivery fails the task, so Spark
retries it, and a retried task or micro-batch can write some records twice.  Option
``deliveryGuarantee=exactly-once`` makes each micro-batch (or batch write) one atomic set
of Kafka transactions instead: :mod:`gregor.spark.exactly_once_sink`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat

import pyarrow as pa
from confluent_kafka import KafkaError, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from gregor.spark import exactly_once_sink
from gregor.spark.options import SinkOptions

log = logging.getLogger(__name__)

UNASSIGNED_PARTITION = -1
"""librdkafka's "let the partitioner choose" partition number."""
BUFFER_FULL_WAIT_S = 0.1

PRODUCER_DEFAULTS = {
    "client.id": "gregor-spark",
    # The Java client's defaults, which Spark's Kafka sink uses: keyed records land in the
    # partition a Java producer would pick, and broker-side retries cannot duplicate.
    "partitioner": "murmur2_random",
    "enable.idempotence": "true",
}
"""Defaults that the user's ``kafka.*`` options may override."""

_TEXT_OR_BYTES = (BinaryType, StringType)


@dataclass(frozen=True)
class SinkColumns:
    """The DataFrame's actual names for the columns the sink uses (``None``: absent)."""

    value: str
    key: str | None
    topic: str | None
    partition: str | None
    headers: str | None


@dataclass(frozen=True)
class DeliveredRecords(WriterCommitMessage):
    """What a task reports to the driver: how many records the broker acknowledged."""

    records: int


def sink_columns(schema: StructType, options: SinkOptions) -> SinkColumns:
    """Check the DataFrame against Spark's Kafka sink rules on the driver, before any task
    starts, and find the columns to use."""
    by_name = {field.name.lower(): field for field in schema.fields}

    def column(name: str, accepted: tuple[type[DataType], ...]) -> str | None:
        field = by_name.get(name)
        if field is None:
            return None
        if not isinstance(field.dataType, accepted):
            allowed = " or ".join(t.typeName() for t in accepted)
            raise ValueError(
                f"column {field.name!r} must be {allowed}, got {field.dataType.simpleString()}"
            )
        return field.name

    value = column("value", _TEXT_OR_BYTES)
    if value is None:
        raise ValueError(f"required column 'value' not found in {schema.simpleString()}")
    topic = column("topic", (StringType,))
    if topic is None and options.topic is None:
        raise ValueError("set the 'topic' option or provide a string column 'topic'")
    headers = column("headers", (ArrayType,))
    if headers is not None and not _is_header_array(by_name["headers"].dataType):
        raise ValueError("column 'headers' must be array<struct<key:string,value:binary>>")
    return SinkColumns(
        value=value,
        key=column("key", _TEXT_OR_BYTES),
        topic=None if options.topic is not None else topic,
        partition=column("partition", (IntegerType,)),
        headers=headers,
    )


def produce_batches(
    batches: Iterator[pa.RecordBatch], options: SinkOptions, columns: SinkColumns
) -> DeliveredRecords:
    """Produce every row and wait until the broker acknowledged all of them."""
    failures: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failures.append(error)

    producer = Producer({**PRODUCER_DEFAULTS, **options.client_config, "on_delivery": on_delivery})
    produced = 0
    for batch in batches:
        for topic, value, key, partition, headers in _rows(batch, options, columns):
            _produce(producer, topic, value, key, partition, headers)
        produced += batch.num_rows
        producer.poll(0)
    producer.flush()
    if failures:
        raise RuntimeError(
            f"{len(failures)} of {produced} records were not delivered; first error: {failures[0]}"
        )
    return DeliveredRecords(produced)


def write_batches(batches: Iterator[pa.RecordBatch], options: SinkOptions,
                  columns: SinkColumns, write_prefix: str | None) -> WriterCommitMessage:
    """A task's write in either delivery mode (see :mod:`gregor.spark.exactly_once_sink`)."""
    if not options.exactly_once:
        return produce_batches(batches, options, columns)
    return exactly_once_sink.write_in_transaction(
        (_record_columns(batch, options, columns) for batch in batches if batch.num_rows),
        options, write_prefix)


class GregorArrowWriter(DataSourceArrowWriter):
    """Batch writer: each task produces its rows and flushes before it succeeds; with
    ``deliveryGuarantee=exactly-once`` the whole write becomes visible when the driver commits."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self._options = options
        self._columns = columns
        self._prefix = exactly_once_sink.job_prefix() if options.exactly_once else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(iterator, self._options, self._columns, self._prefix)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        if self._options.exactly_once:
            exactly_once_sink.commit(messages, None, self._options)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        if self._options.exactly_once:
            exactly_once_sink.abort(messages, None, self._options, self._prefix)


class GregorStreamArrowWriter(DataSourceStreamArrowWriter):
    """Streaming writer: at-least-once, since a failed micro-batch is written again,
    unless ``deliveryGuarantee=exactly-once``."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self._options = options
        self._columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(iterator, self._options, self._columns, None)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """At-least-once: every task already flushed, so the records are in the topic;
        just account.  Exactly-once: commit the tasks' transactions."""
        if self._options.exactly_once:
            committed = exactly_once_sink.commit(messages, batchId, self._options)
            log.info("micro-batch %d: %d records committed", batchId, committed)
            return
        log.info("micro-batch %d: %d records written", batchId, _delivered(messages))

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        if self._options.exactly_once:
            exactly_once_sink.abort(messages, batchId, self._options)
            return
        """Records cannot be taken back out of a topic: say how many stay and will be
        written again when Spark retries the micro-batch.  Stopping a query (Ctrl-C)
        aborts its running micro-batch, mostly before anything was written: that is no
        news worth a warning."""
        delivered = _delivered(messages)
        log.log(
            logging.WARNING if delivered else logging.INFO,
            "micro-batch %d aborted; %d records from tasks that finished remain in the "
            "topic and may be duplicated by the retry",
            batchId,
            delivered,
        )


def _rows(batch: pa.RecordBatch, options: SinkOptions, columns: SinkColumns) -> Iterator:
    """``(topic, value, key, partition, headers)`` per row; partition -1: unassigned."""
    rows = batch.num_rows
    records = zip(
        _column(batch, columns.topic, rows, options.topic),
        _column(batch, columns.value, rows, None),
        _column(batch, columns.key, rows, None),
        _column(batch, columns.partition, rows, UNASSIGNED_PARTITION),
        _headers(batch, columns.headers, rows),
        strict=True,
    )
    for record in records:
        if record[0] is None:
            raise ValueError("a row has a null 'topic' and no 'topic' option is set")
        yield record


def _record_columns(batch: pa.RecordBatch, options: SinkOptions,
                    columns: SinkColumns) -> exactly_once_sink.RecordColumns:
    """Whole columns for the exactly-once sink: text cast to UTF-8 bytes by Arrow, and
    None where no row has a key, partition or header."""

    def binary(name: str | None) -> list | None:
        if name is None:
            return None
        column = batch.column(name)
        return (column.cast(pa.binary()) if pa.types.is_string(column.type) else column
                ).to_pylist()

    topics: str | list[str] = options.topic or ""
    if columns.topic is not None:
        topics = batch.column(columns.topic).to_pylist()
        if None in topics:
            raise ValueError("a row has a null 'topic' and no 'topic' option is set")
    partitions = None
    if columns.partition is not None:
        partitions = [None if p is None or p < 0 else p
                      for p in batch.column(columns.partition).to_pylist()]
    headers = None
    if columns.headers is not None:
        headers = [None if hs is None else [
            (h["key"], h["value"].encode() if isinstance(h["value"], str) else h["value"])
            for h in hs if h is not None] for hs in batch.column(columns.headers).to_pylist()]
    values = binary(columns.value)
    assert values is not None
    return topics, binary(columns.key), values, partitions, headers


def _produce(
    producer: Producer,
    topic: str,
    value: bytes | str | None,
    key: bytes | str | None,
    partition: int,
    headers: list[tuple[str, str | bytes | None]] | None,
) -> None:
    """Produce one record, waiting for room when the client's queue is full."""
    while True:
        try:
            producer.produce(topic, value, key, partition=partition, headers=headers)
            return
        except BufferError:
            producer.poll(BUFFER_FULL_WAIT_S)


def _column(batch: pa.RecordBatch, name: str | None, rows: int, default: object) -> Iterator:
    if name is None:
        return repeat(default, rows)
    values = batch.column(name).to_pylist()
    if default is None:
        return iter(values)
    return (default if v is None else v for v in values)


def _headers(batch: pa.RecordBatch, name: str | None, rows: int) -> Iterator:
    if name is None:
        return repeat(None, rows)
    return (
        None if hs is None else [(h["key"], h["value"]) for h in hs if h is not None]
        for hs in batch.column(name).to_pylist()
    )


def _is_header_array(data_type: DataType) -> bool:
    element = data_type.elementType if isinstance(data_type, ArrayType) else None
    if not isinstance(element, StructType):
        return False
    types = {f.name: f.dataType for f in element.fields}
    return isinstance(types.get("key"), StringType) and isinstance(
        types.get("value"), _TEXT_OR_BYTES
    )


def _delivered(messages: Sequence[WriterCommitMessage | None]) -> int:
    return sum(m.records for m in messages if isinstance(m, DeliveredRecords))
