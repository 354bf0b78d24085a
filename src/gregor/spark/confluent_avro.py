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

Decoding runs in the JVM when the session has gregor's jar (``io.gregor.spark.avro.
ConfluentAvroDecoder``, Apache Avro's Java library, which PySpark ships): the records
never go through Python. Without it, a pandas UDF decodes them with fastavro, several
times slower (``python -m bench.spark_avro_bench`` measures both against the plain
source).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import fastavro
import fastavro.schema
import pandas as pd
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.functions import pandas_udf

from gregor.schemas.framed_values import HEADER_SIZE, MAGIC, schema_id_of
from gregor.spark import jvm_source_loaded

_PRIMITIVES: dict[str, T.DataType] = {
    "null": T.NullType(), "boolean": T.BooleanType(), "int": T.IntegerType(),
    "long": T.LongType(), "float": T.FloatType(), "double": T.DoubleType(),
    "bytes": T.BinaryType(), "string": T.StringType(),
}
_LOGICAL: dict[str, T.DataType] = {
    "date": T.DateType(), "timestamp-millis": T.TimestampType(),
    "timestamp-micros": T.TimestampType(), "uuid": T.StringType(),
}
JVM_DECODER = "io.gregor.spark.avro.ConfluentAvroDecoder"
_readers: dict[tuple[str, tuple[str, ...]], Callable[[bytes | None], dict[str, Any] | None]] = {}
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
    spark = SparkSession.getActiveSession()
    if jvm is None:
        jvm = spark is not None and jvm_source_loaded(spark)
    if jvm:
        if spark is None:
            raise ValueError("decoding in the JVM needs an active SparkSession")
        name = f"gregor_from_confluent_avro_{abs(hash(struct.json()))}"
        spark.udf.registerJavaFunction(name, JVM_DECODER, struct)
        # Binary literals: the JVM side finds its reading by the array's identity.
        return F.call_function(name, column, F.lit(bytearray(registry_url.encode())),
                               F.lit(bytearray(json.dumps(reader_texts).encode())))
    names = [field.name for field in struct.fields]

    @pandas_udf(struct)  # type: ignore[call-overload]  # pyspark's stubs omit StructType
    def decode(values: pd.Series) -> pd.DataFrame:
        read = _reader(registry_url, tuple(reader_texts))
        empty = dict.fromkeys(names)
        return pd.DataFrame.from_records([read(value) or empty for value in values],
                                         columns=names)

    return decode(column)


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


def to_confluent_avro(column: Column | str, registry_url: str, subject: str) -> Column:
    """A binary column of the structs of ``column`` in Confluent's framing, written
    with ``subject``'s latest schema (found now, on the driver, as confluent-kafka's
    serializer does with ``use.latest.version``): what any Confluent deserializer
    reads. A null struct gives a null value."""
    client = SchemaRegistryClient({"url": registry_url})
    latest = client.get_latest_version(subject)
    header = bytes([MAGIC]) + int(latest.schema_id or 0).to_bytes(4, "big")
    writer_texts = tuple(schema_texts(client, latest.schema))

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


def _reader(registry_url: str, reader_texts: tuple[str, ...],
            ) -> Callable[[bytes | None], dict[str, Any] | None]:
    key = (registry_url, reader_texts)
    if key not in _readers:
        client = SchemaRegistryClient({"url": registry_url})
        reader_schema = _parse(reader_texts)
        # id -> (writer schema, reader schema or None when they are the same: fastavro
        # then skips resolution, a third of the time per record)
        writers: dict[int, tuple[Any, Any]] = {}

        def read(value: bytes | None) -> dict[str, Any] | None:
            schema_id = schema_id_of(value)
            if value is None or schema_id is None:
                return None
            if schema_id not in writers:
                texts = tuple(schema_texts(client, client.get_schema(schema_id)))
                writers[schema_id] = (_parse(texts),
                                      None if texts == reader_texts else reader_schema)
            writer, resolved_into = writers[schema_id]
            record = fastavro.schemaless_reader(io.BytesIO(value[HEADER_SIZE:]), writer,
                                                resolved_into)
            return record if isinstance(record, dict) else None

        _readers[key] = read
    return _readers[key]
