"""Values in Confluent's JSON Schema framing (magic byte 0, schema id, JSON text) as
typed Spark columns and back, in Spark's own JVM functions: the 5-byte header is cut
off (or put on) and Spark's ``from_json``/``to_json`` do the rest, with the column type
derived from the subject's latest JSON Schema."""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from gregor.schemas.framed_values import HEADER_SIZE, MAGIC

_SCALARS: dict[str, T.DataType] = {
    "string": T.StringType(), "integer": T.LongType(), "number": T.DoubleType(),
    "boolean": T.BooleanType(),
}


def spark_type(schema: Any) -> T.DataType:
    """The Spark type of a JSON Schema: objects become structs of their properties,
    arrays arrays of their items; a type list with null is its other type; anything
    without one type (or a $ref) is kept as JSON text."""
    if not isinstance(schema, dict):
        return T.StringType()
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind == "object":
        return T.StructType([T.StructField(name, spark_type(property_schema))
                             for name, property_schema in schema.get("properties", {}).items()])
    if kind == "array":
        return T.ArrayType(spark_type(schema.get("items", {})))
    return _SCALARS.get(kind, T.StringType()) if isinstance(kind, str) else T.StringType()


def _latest(registry_url: str, subject: str) -> tuple[int, Any]:
    latest = SchemaRegistryClient({"url": registry_url}).get_latest_version(subject)
    if latest.schema.schema_type != "JSON":
        raise ValueError(f"{subject}'s latest schema is {latest.schema.schema_type}, not JSON")
    return int(latest.schema_id or 0), json.loads(latest.schema.schema_str or "{}")


def from_confluent_json(column: Column | str, registry_url: str, subject: str) -> Column:
    """A column of the values of ``column`` (binary, Confluent's framing) parsed as JSON
    in the shape of ``subject``'s latest schema; what does not parse gives a null."""
    _, schema = _latest(registry_url, subject)
    value = F.col(column) if isinstance(column, str) else column
    struct = spark_type(schema)
    if not isinstance(struct, T.StructType):
        raise ValueError(f"{subject}'s latest schema is not an object")
    text = F.substring(value, HEADER_SIZE + 1, 2**31 - 1).cast("string")
    return F.from_json(text, struct)


def to_confluent_json(column: Column | str, registry_url: str, subject: str) -> Column:
    """A binary column of ``column``'s values as JSON text in Confluent's framing, with
    the id of ``subject``'s latest schema: what confluent-kafka's JSONDeserializer reads."""
    schema_id, _ = _latest(registry_url, subject)
    value = F.col(column) if isinstance(column, str) else column
    header = bytes([MAGIC]) + schema_id.to_bytes(4, "big")
    return F.concat(F.lit(header), F.encode(F.to_json(value), "UTF-8"))
