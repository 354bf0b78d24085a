"""Avro values decoded as Arrow columns (gregor.spark.avro_columns) give what fastavro
reads from the same bytes, value by value: every kind of schema the module reads, values
written by fastavro (as confluent-kafka's serializer writes them), resolution of one
schema's values into another's, and the values it must refuse."""

from __future__ import annotations

import datetime
import decimal
import io
import random
import uuid
from typing import Any

import fastavro
import fastavro.schema
import numpy as np
import pyarrow as pa
import pytest

from gregor.spark import avro_columns

EVERYTHING = {"type": "record", "name": "Everything", "namespace": "t", "fields": [
    {"name": "flag", "type": "boolean"},
    {"name": "small", "type": "int"},
    {"name": "big", "type": "long"},
    {"name": "ratio", "type": "float"},
    {"name": "price", "type": "double"},
    {"name": "name", "type": "string"},
    {"name": "blob", "type": "bytes"},
    {"name": "nothing", "type": "null"},
    {"name": "colour", "type": {"type": "enum", "name": "Colour",
                                "symbols": ["RED", "GREEN", "BLUE"]}},
    {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                "precision": 20, "scale": 3}},
    {"name": "fixed_amount", "type": {"type": "fixed", "name": "Amount", "size": 9,
                                      "logicalType": "decimal", "precision": 18,
                                      "scale": 2}},
    {"name": "note", "type": ["null", "string"]},
    {"name": "later", "type": ["string", "null"]},
    {"name": "home", "type": ["null", {"type": "record", "name": "Address", "fields": [
        {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}]},
    {"name": "work", "type": "Address"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "visits", "type": {"type": "map", "values": ["null", "long"]}},
    {"name": "stops", "type": {"type": "array", "items": "Address"}},
    {"name": "grid", "type": {"type": "array", "items": {"type": "array", "items": "int"}}},
]}


def _text(r: random.Random, size: int = 12) -> str:
    return "".join(r.choice("abcxyzé€😀 ") for _ in range(r.randrange(size)))


def _address(r: random.Random) -> dict[str, Any]:
    return {"city": _text(r), "zip": None if r.random() < 0.3 else r.randrange(-9, 99999)}


def _everything(r: random.Random) -> dict[str, Any]:
    return {
        "flag": r.random() < 0.5,
        "small": r.choice([0, -1, 1, 2**31 - 1, -2**31, r.randrange(-1000, 1000)]),
        "big": r.choice([0, -1, 2**63 - 1, -2**63, r.randrange(-2**40, 2**40)]),
        "ratio": r.choice([0.5, -1.25, 3e8]),
        "price": r.uniform(-1e6, 1e6),
        "name": _text(r),
        "blob": bytes(r.randrange(256) for _ in range(r.randrange(6))),
        "nothing": None,
        "colour": r.choice(["RED", "GREEN", "BLUE"]),
        "digest": bytes(r.randrange(256) for _ in range(4)),
        "day": datetime.date(2026, 1, 1) + datetime.timedelta(days=r.randrange(-9000, 9000)),
        "at": datetime.datetime(2026, 11, 29, tzinfo=datetime.UTC)
        + datetime.timedelta(milliseconds=r.randrange(-2**40, 2**40)),
        "at_us": datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
        + datetime.timedelta(microseconds=r.randrange(-2**50, 2**50)),
        "id": str(uuid.UUID(int=r.getrandbits(128))),
        "amount": decimal.Decimal(r.randrange(-10**20 + 1, 10**20)).scaleb(-3),
        "fixed_amount": decimal.Decimal(r.randrange(-10**18 + 1, 10**18)).scaleb(-2),
        "note": None if r.random() < 0.5 else _text(r),
        "later": None if r.random() < 0.5 else _text(r),
        "home": None if r.random() < 0.4 else _address(r),
        "work": _address(r),
        "tags": [_text(r) for _ in range(r.choice([0, 0, 1, 3, 20]))],
        "visits": {_text(r): None if r.random() < 0.2 else r.randrange(-5, 5)
                   for _ in range(r.randrange(4))},
        "stops": [_address(r) for _ in range(r.randrange(3))],
        "grid": [[r.randrange(-3, 3) for _ in range(r.randrange(3))]
                 for _ in range(r.randrange(3))],
    }


def _encoded(schema: Any, records: list[dict[str, Any]], prefix: bytes = b"") -> pa.Array:
    values = []
    for record in records:
        buffer = io.BytesIO()
        buffer.write(prefix)
        fastavro.schemaless_writer(buffer, schema, record)
        values.append(buffer.getvalue())
    return pa.array(values, pa.binary())


def _columnar(values: pa.Array, how: avro_columns.Plan, start: int = 0,
              rows: np.ndarray | None = None) -> list[Any]:
    offsets, data = avro_columns.binary_buffers(values)
    chosen = np.arange(len(values)) if rows is None else rows
    return avro_columns.decode(offsets, data, chosen, start, how).to_pylist()


def _by_fastavro(values: pa.Array, writer: Any, reader: Any, arrow: pa.DataType,
                 start: int = 0) -> list[Any]:
    """What fastavro reads, through the same Arrow type (maps as key-value pairs)."""
    return pa.array([_uuids_as_text(fastavro.schemaless_reader(
        io.BytesIO(value[start:]), writer, reader)) for value in values.to_pylist()],
        arrow).to_pylist()


def _uuids_as_text(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _uuids_as_text(item) for key, item in value.items()}
    return str(value) if isinstance(value, uuid.UUID) else value


def _parsed(schema: Any) -> tuple[Any, dict[str, Any]]:
    named: dict[str, Any] = {}
    return fastavro.schema.parse_schema(schema, named_schemas=named), named


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_kind_of_value_reads_as_fastavro_reads_it(seed: int) -> None:
    writer, named = _parsed(EVERYTHING)
    r = random.Random(seed)
    values = _encoded(writer, [_everything(r) for _ in range(300)], b"\0\0\0\0\7")
    how = avro_columns.plan(writer, named)
    assert _columnar(values, how, start=5) == _by_fastavro(values, writer, None, how.type,
                                                           start=5)


def test_a_slice_of_the_values_and_some_rows_only() -> None:
    writer, named = _parsed(EVERYTHING)
    r = random.Random(7)
    values = _encoded(writer, [_everything(r) for _ in range(50)]).slice(5, 40)
    how = avro_columns.plan(writer, named)
    rows = np.array([0, 3, 4, 39])
    expected = _by_fastavro(values, writer, None, how.type)
    assert _columnar(values, how, rows=rows) == [expected[i] for i in rows]


def test_blocks_with_their_size_in_bytes() -> None:
    """A writer may give a block's count negated, followed by its size in bytes
    (fastavro never writes it, Java's block-buffered encoders do)."""
    writer, named = _parsed({"type": "array", "items": "long"})
    # count -2 (zig-zag 3), size 2 bytes, items 1 and -1, then count 1, item 5, end
    values = pa.array([bytes([3, 4, 2, 1, 2, 10, 0]), b"\0"], pa.binary())
    assert _columnar(values, avro_columns.plan(writer, named)) == [[1, -1, 5], []]


V1 = {"type": "record", "name": "Sale", "fields": [
    {"name": "sku", "type": "string"},
    {"name": "quantity", "type": "int"},
    {"name": "gone", "type": {"type": "array", "items": "string"}},
    {"name": "size", "type": {"type": "enum", "name": "Size", "symbols": ["S", "M"]}},
    {"name": "ratio", "type": "float"},
    {"name": "raw", "type": "string"},
    {"name": "maybe", "type": ["null", "long"]},
    {"name": "where", "type": {"type": "record", "name": "Place", "fields": [
        {"name": "city", "type": "string"}]}}]}
V2 = {"type": "record", "name": "Sale", "fields": [
    {"name": "quantity", "type": "long"},
    {"name": "code", "type": "string", "aliases": ["sku"]},
    {"name": "size", "type": {"type": "enum", "name": "Size", "symbols": ["S", "M", "L"]}},
    {"name": "ratio", "type": "double"},
    {"name": "raw", "type": "bytes"},
    {"name": "maybe", "type": ["null", "double"]},
    {"name": "where", "type": {"type": "record", "name": "Place", "fields": [
        {"name": "city", "type": "string"},
        {"name": "country", "type": "string", "default": "FR"}]}},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "count", "type": "int", "default": 7}]}


def test_old_values_resolve_into_the_new_schema_as_fastavro_resolves_them() -> None:
    writer, named_writer = _parsed(V1)
    reader, named_reader = _parsed(V2)
    r = random.Random(3)
    records = [{"sku": _text(r), "quantity": r.randrange(-9, 9), "gone": ["x"] * r.randrange(3),
                "size": r.choice(["S", "M"]), "ratio": 0.25 * r.randrange(9), "raw": _text(r),
                "maybe": None if r.random() < 0.5 else r.randrange(99),
                "where": {"city": _text(r)}} for _ in range(100)]
    values = _encoded(writer, records)
    how = avro_columns.plan(writer, named_writer, reader, named_reader)
    assert _columnar(values, how) == _by_fastavro(values, writer, reader, how.type)


@pytest.mark.parametrize("writer_schema,reader_schema", [
    (["null", "int", "string"], None),  # a union of two non-null types has no column type
    ({"type": "int", "logicalType": "time-millis"}, None),
    ({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]},
     {"type": "record", "name": "R", "fields": [{"name": "b", "type": "int"}]}),  # no default
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]},
     {"type": "enum", "name": "E", "symbols": ["A"], "default": "A"}),
    ("long", "int"),
])
def test_what_it_does_not_read_is_left_to_fastavro(writer_schema: Any,
                                                   reader_schema: Any) -> None:
    writer, named_writer = _parsed(writer_schema)
    reader, named_reader = (None, {}) if reader_schema is None else _parsed(reader_schema)
    with pytest.raises(avro_columns.Unsupported):
        avro_columns.plan(writer, named_writer, reader, named_reader)


@pytest.mark.parametrize("value", [
    b"",  # nothing at all
    b"\x06ab",  # a string of 3 bytes with 2
    b"\x04ab\x80",  # a long whose varint does not end
    b"\x04ab\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # a varint of 11 bytes
    b"\x03ab\x02",  # a negative length
    b"\x04\xc3\x28\x02",  # not UTF-8
])
def test_broken_values_raise(value: bytes) -> None:
    """A value cut short, or not Avro of its schema, fails (as Java's reader does) and
    the next value's bytes are never read as the end of this one."""
    writer, named = _parsed({"type": "record", "name": "R", "fields": [
        {"name": "s", "type": "string"}, {"name": "n", "type": "long"}]})
    values = pa.array([value, b"\x02z\x02"], pa.binary())
    with pytest.raises(ValueError):
        _columnar(values, avro_columns.plan(writer, named), rows=np.array([0]))
