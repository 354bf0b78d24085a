"""Turn consumed Kafka records into Arrow record batches in the source schema.

Spark moves data from Python workers to the JVM as Arrow; yielding RecordBatches from
``read()`` skips its per-row tuple conversion, which costs more than consuming.  Each
column is built with one comprehension over the chunk rather than per-record appends.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Message

from gregor.spark.schema import source_arrow_schema

_US_UTC = pa.timestamp("us", tz="UTC")
_MS_UTC = pa.timestamp("ms", tz="UTC")
_ONE = pa.scalar(1, pa.int32())


def records_to_batch(
    messages: list[Message], topic: str, partition: int, include_headers: bool
) -> pa.RecordBatch:
    """One RecordBatch of records of a single topic-partition (as returned by
    ``Consumer.consume``; none may carry an error).

    librdkafka numbers timestamp types 0 = not available, 1 = create time, 2 = log append
    time; Kafka and Spark number them -1, 0, 1, hence the ``- 1``.  A missing timestamp is
    -1 ms, as Spark's source reports it.
    """
    schema = source_arrow_schema(include_headers)
    count = len(messages)
    stamps = [m.timestamp() for m in messages]
    columns = [
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        pa.array([m.offset() for m in messages], pa.int64()),
        pa.array([ms for _, ms in stamps], _MS_UTC).cast(_US_UTC),
        pc.subtract(pa.array([kind for kind, _ in stamps], pa.int32()), _ONE),
    ]
    if include_headers:
        columns.append(pa.array([m.headers() for m in messages], schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
