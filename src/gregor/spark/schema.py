"""The DataFrame schema of records read from a topic: the same as Spark's Kafka source,
so that queries written for ``format("kafka")`` run unchanged."""

from __future__ import annotations

from functools import cache

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
"""One record header, as Spark's Kafka source and sink represent it."""


def source_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema; ``headers`` only with ``includeHeaders=true``, as Spark."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER_TYPE)))
    return StructType(fields)


@cache
def source_arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark demands of batches from ``read()``.

    Spark compares it with ``Schema.equals`` (field names, types and nullability), so it
    is derived with Spark's own conversion rather than written out by hand.
    """
    return to_arrow_schema(source_schema(include_headers), timezone="UTC")
