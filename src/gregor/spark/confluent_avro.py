"""Values in Confluent's framing (magic byte 0, schema id, Avro binary) as typed Spark
columns, ``from_confluent_avro(col("value"), registry_url, subject)``, and struct
columns into such values, ``to_confluent_avro(col("sale"), registry_url, subject)``.

Spark's own ``from_avro`` knows neither the 5-byte header nor a registry, and its
spark-avro module is not among PySpark's jars. Each value is read with its writer's
schema (found by the id in its header) and resolved into the subject's latest schema,
the reader's, whose shape the column takes: records written with older versions read
as the latest one (new fields take their defaults), as Avro's schema resolution
defines it. Schemas that reference others (Confluent's schema references) are read
with the schemas they reference.

Decoding and encoding run in the JVM when the session has gregor's jar (``io.gregor.
spark.avro.ConfluentAvroDecoder``, which reads Avro straight into Spark's rows with
Apache Avro's schema resolution, and ``ConfluentAvroEncoder``, Apache Avro's writer;
PySpark ships Avro's Java library), as column expressions that carry their function
(no catalog entry, so ``foreachBatch``'s batches use them too): the records never go
through Python. Without it, an
Arrow UDF decodes each batch of values as columns (:mod:`gregor.spark.avro_columns`;
the values of each writer schema together), no Python object per record, fastavro only
for the writer schemas that module does not read, and a pandas UDF encodes with
fastavro (``python -m bench.spark_avro_bench`` measures both paths against the plain
source).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import fastavro
import fastavro.schema
import numpy as np
import pandas as pd
import pyarrow as pa
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from pyspark.sql import Column, SparkSession
from pyspark.sql import types as T
from pyspark.sql.classic.column import Column as JvmColumn
from pyspark.sql.classic.column import _to_java_column
from pyspark.sql.functions import arrow_udf, pandas_udf
from pyspark.sql.pandas.types import to_arrow_type

from gregor.schemas.framed_values import HEADER_SIZE, MAGIC
from gregor.spark import avro_columns, jvm_source_loaded

_PRIMITIVES: dict[str, T.DataType] = {
    "null": T.NullType(), "boolean": T.BooleanType(), "int": T.IntegerType(),
    "long": T.LongType(), "float": T.FloatType(), "double": T.DoubleType(),
    "bytes": T.BinaryType(), "string": T.StringType(),
}
_LOGICAL: dict[str, T.DataType] = {
    "date": T.DateType(), "timestamp-millis": T.TimestampType(),
    "timestamp-micros": T.TimestampType(), "uuid": T.StringType(),
}
_batch_readers: dict[tuple[str, tuple[str, ...]], FramedAvroBatches] = {}
"""Per Python worker: one reader per (registry, reader schema), writer schemas cached."""
_writers: dict[tuple[str, ...], Any] = {}
"""Per Python worker: the parsed schemas values are written with."""


def spark_type(schema: Any, named: dict[str, Any] | None = None) -> T.DataType:
    """The Spark type of an Avro schema (parsed by fastavro): records become structs,
    a union with null the other branch's type, enums strings."""
    named = named if named is not None else {}
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        return spark_type(named[schema], named)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return spark_type(branches[0], named)
        raise ValueError(f"unions of several types ({schema}) have no Spark column type")
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical == "decimal":
        return T.DecimalType(schema["precision"], schema.get("scale", 0))
    if logical in _LOGICAL:
        return _LOGICAL[logical]
    if kind in ("record", "error"):
        named[schema["name"]] = schema
        # Every field nullable: a value not in the framing reads as a row of nulls.
        return T.StructType([T.StructField(field["name"], spark_type(field["type"], named))
                             for field in schema["fields"]])
    if kind == "enum":
        return T.StringType()
    if kind == "fixed":
        return T.BinaryType()
    if kind == "array":
        return T.ArrayType(spark_type(schema["items"], named))
    if kind == "map":
        return T.MapType(T.StringType(), spark_type(schema["values"], named))
    return spark_type(kind, named)


def from_confluent_avro(column: Column | str, registry_url: str, subject: str,
                        jvm: bool | None = None) -> Column:
    """A struct column of the values of ``column`` (binary, in Confluent's framing), in
    the shape of ``subject``'s latest schema (a record). A null, or a value not in the
    framing, gives a null. ``jvm``: decode in the JVM (True; the session must have
    gregor's jar) or in Python (False); by default the JVM whenever it can."""
    client = SchemaRegistryClient({"url": registry_url})
    reader_texts = schema_texts(client, client.get_latest_version(subject).schema)
    named: dict[str, Any] = {}
    struct = spark_type(_parse(reader_texts, named), named)
    if not isinstance(struct, T.StructType):
        raise ValueError(f"{subject}'s latest schema is not a record")
    spark = _jvm_session(jvm)
    if spark is not None:
        return JvmColumn(_jvm_columns(spark).decoded(
            _to_java_column(column), registry_url, json.dumps(reader_texts),
            spark._jsparkSession.parseDataType(struct.json())))
    target = to_arrow_type(struct, timezone="UTC")
    texts = tuple(reader_texts)

    @arrow_udf(struct)  # type: ignore[call-overload]  # pyspark's stubs omit StructType
    def decode(values: pa.Array) -> pa.Array:
        return _batch_reader(registry_url, texts, target).read(values)

    return decode(column)


def _jvm_columns(spark: SparkSession) -> Any:
    """The JVM class that makes the decoder's and encoder's column expressions: the
    function is in the expression, not in a session's catalog, so that ``foreachBatch``'s
    batches (of the stream's own clone of the session) can use it too."""
    return spark._jvm.io.gregor.spark.avro.ConfluentAvroColumns  # type: ignore[union-attr]


def _jvm_session(jvm: bool | None) -> SparkSession | None:
    """The session whose JVM is to do the work (``jvm`` True, or None and the session
    has gregor's jar), or None for the Python path."""
    spark = SparkSession.getActiveSession()
    if jvm is None:
        jvm = spark is not None and jvm_source_loaded(spark)
    if jvm and spark is None:
        raise ValueError("Avro in the JVM needs an active SparkSession")
    return spark if jvm else None


def schema_texts(client: SchemaRegistryClient, schema: Schema) -> list[str]:
    """The texts of ``schema`` and of the schemas it references (recursively), those
    referenced first: the order in which a parser learns the names each one uses."""
    texts: list[str] = []
    seen: set[tuple[str, int]] = set()

    def add(references: list[Any]) -> None:
        for reference in references:
            key = (reference.subject, int(reference.version))
            if key in seen:
                continue
            seen.add(key)
            found = client.get_version(reference.subject, int(reference.version)).schema
            add(list(found.references or ()))
            texts.append(found.schema_str or "null")

    add(list(schema.references or ()))
    texts.append(schema.schema_str or "null")
    return texts


def _parse(texts: list[str] | tuple[str, ...], named: dict[str, Any] | None = None) -> Any:
    """The last of ``texts`` parsed by fastavro after those it references (their named
    types gathered in ``named``)."""
    named = {} if named is None else named
    parsed = None
    for text in texts:
        parsed = fastavro.schema.parse_schema(json.loads(text), named_schemas=named)
    return parsed


def to_confluent_avro(column: Column | str, registry_url: str, subject: str,
                      jvm: bool | None = None) -> Column:
    """A binary column of the structs of ``column`` in Confluent's framing, written
    with ``subject``'s latest schema (found now, on the driver, as confluent-kafka's
    serializer does with ``use.latest.version``): what any Confluent deserializer
    reads. A null struct gives a null value. ``jvm``: encode in the JVM (True; Apache
    Avro's writer, the session must have gregor's jar) or in Python (False; fastavro in
    a pandas UDF); by default the JVM whenever it can."""
    client = SchemaRegistryClient({"url": registry_url})
    latest = client.get_latest_version(subject)
    header = bytes([MAGIC]) + int(latest.schema_id or 0).to_bytes(4, "big")
    writer_texts = tuple(schema_texts(client, latest.schema))
    spark = _jvm_session(jvm)
    if spark is not None:
        # Binary literals: the JVM side finds its writing by the array's identity.
        return JvmColumn(_jvm_columns(spark).encoded(
            _to_java_column(column), bytearray(json.dumps(writer_texts).encode()),
            bytearray(header)))

    @pandas_udf(T.BinaryType())  # type: ignore[call-overload]
    def encode(rows: pd.DataFrame) -> pd.Series:
        writer = _writer_schema(writer_texts)
        encoded: list[bytes | None] = []
        for row in rows.to_dict("records"):
            if all(value is None for value in row.values()):
                encoded.append(None)
                continue
            buffer = io.BytesIO(header)
            buffer.seek(len(header))
            fastavro.schemaless_writer(buffer, writer, row)
            encoded.append(buffer.getvalue())
        return pd.Series(encoded, dtype=object)

    return encode(column)


def _writer_schema(texts: tuple[str, ...]) -> Any:
    if texts not in _writers:
        _writers[texts] = _parse(texts)
    return _writers[texts]


def _batch_reader(registry_url: str, reader_texts: tuple[str, ...],
                  target: pa.DataType) -> FramedAvroBatches:
    key = (registry_url, reader_texts)
    if key not in _batch_readers:
        _batch_readers[key] = FramedAvroBatches(registry_url, reader_texts, target)
    return _batch_readers[key]


class FramedAvroBatches:
    """Batches of framed values (an Arrow binary array) read into a struct array in the
    reader schema's shape (``target``): the values of each writer schema id decoded
    together as columns (:mod:`gregor.spark.avro_columns`), or, for a writer schema that
    module does not read, one at a time by fastavro. A null or unframed value gives a
    null struct, as in the JVM decoder."""

    def __init__(self, registry_url: str, reader_texts: tuple[str, ...],
                 target: pa.DataType) -> None:
        self._client = SchemaRegistryClient({"url": registry_url})
        self._reader_texts = reader_texts
        self._reader_named: dict[str, Any] = {}
        self._reader = _parse(reader_texts, self._reader_named)
        self._target = target
        self._plans: dict[int, avro_columns.Plan | Callable[[bytes], Any]] = {}
        """Per writer schema id: its columnar plan, or fastavro's reading of a value."""

    def read(self, values: pa.Array) -> pa.Array:
        offsets, data = avro_columns.binary_buffers(values)
        starts = offsets[:-1]
        framed = (offsets[1:] - starts) >= HEADER_SIZE
        if values.null_count:
            framed &= values.is_valid().to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(framed)
        at = starts[rows]
        rows, at = rows[data[at] == MAGIC], at[data[at] == MAGIC]
        ids = ((data[at + 1].astype(np.int64) << 24) | (data[at + 2].astype(np.int64) << 16)
               | (data[at + 3].astype(np.int64) << 8) | data[at + 4])
        pieces: list[pa.Array] = []
        order: list[np.ndarray] = []
        for schema_id in np.unique(ids):
            chosen = rows[ids == schema_id]
            decoded = self._decode(values, offsets, data, chosen, int(schema_id))
            pieces.append(decoded.cast(self._target))
            order.append(chosen)
        if len(pieces) == 1 and len(order[0]) == len(values):
            return pieces[0]
        present = np.zeros(len(values), dtype=bool)
        where = np.zeros(len(values), dtype=np.int64)
        if order:
            placed = np.concatenate(order)
            present[placed] = True
            where[placed] = np.arange(len(placed))
        whole = pa.concat_arrays(pieces) if pieces else pa.array([], self._target)
        return whole.take(pa.array(where, mask=~present))

    def _decode(self, values: pa.Array, offsets: np.ndarray, data: np.ndarray,
                rows: np.ndarray, schema_id: int) -> pa.Array:
        how = self._plans.get(schema_id)
        if how is None:
            how = self._plans[schema_id] = self._plan(schema_id)
        if isinstance(how, avro_columns.Plan):
            return avro_columns.decode(offsets, data, rows, HEADER_SIZE, how)
        return pa.array([how(values[int(row)].as_py()) for row in rows], self._target)

    def _plan(self, schema_id: int) -> avro_columns.Plan | Callable[[bytes], Any]:
        texts = tuple(schema_texts(self._client, self._client.get_schema(schema_id)))
        named: dict[str, Any] = {}
        writer = _parse(texts, named)
        try:
            if texts == self._reader_texts:
                return avro_columns.plan(writer, named)
            return avro_columns.plan(writer, named, self._reader, self._reader_named)
        except avro_columns.Unsupported:
            # fastavro skips resolution for a value written with the reader's schema.
            reader = None if texts == self._reader_texts else self._reader
            return lambda value: fastavro.schemaless_reader(
                io.BytesIO(value[HEADER_SIZE:]), writer, reader)
