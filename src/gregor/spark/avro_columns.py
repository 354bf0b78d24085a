"""Avro binary values decoded a field at a time across a whole batch, straight into
Arrow columns: ``from_confluent_avro``'s path when the session lacks gregor's jar.

fastavro reads one record at a time into Python dicts (9-37 µs a record on this
machine), which Spark then turns into rows again; at that rate the Python path read
6-17% of the plain source's records/s. Here a batch of values is decoded as columns
with numpy: every value's first field is read at once (a varint, a double, a string's
length and bytes for all the values together), then every value's second field, and so
on, each value's read position kept in one array. A record costs a few numpy operations
per field for the whole batch, whatever the batch's length; the columns become Arrow
arrays without a Python object per value.

The binary encoding is Avro's specification's (zig-zag varints, little-endian floats,
length-prefixed bytes and strings, unions as a branch index, arrays and maps as counted
blocks). A value is read with its writer's schema and resolved into the reader's as the
specification's schema resolution says: fields matched by name (or the reader's
aliases), fields the writer lacks take the reader's default, numeric promotions,
string and bytes either way. What this module does not read (unions of several non-null
types, time-of-day and local-timestamp types, a resolution it does not cover) raises
:class:`Unsupported` when its plan is made, and the caller reads those values with
fastavro instead (:func:`gregor.spark.confluent_avro`'s twin path); the tests check both
against fastavro's answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

Read = Callable[[np.ndarray, np.ndarray], pa.Array]
"""Reads one value of a schema at each of the positions (into the buffer, int64, moved
past what was read, in place): an Arrow array of as many values."""


class Unsupported(Exception):
    """A schema (or a resolution of two) this module does not decode."""


@dataclass(frozen=True)
class Plan:
    """How values written with one schema are read as another."""

    read: Read
    """Decodes one writer value at each position, in the reader's shape."""
    type: pa.DataType


def plan(writer: Any, named_writer: dict[str, Any], reader: Any | None = None,
         named_reader: dict[str, Any] | None = None) -> Plan:
    """The plan for values written with ``writer`` (a schema parsed by fastavro, its
    named types in ``named_writer``), read as ``reader`` (None: as written). Raises
    Unsupported for what it does not cover."""
    node = _node(writer, named_writer, ())
    if reader is None:
        return Plan(node.read, node.type)
    resolve = _resolution(writer, named_writer, reader, named_reader or {}, ())
    target = _node(reader, named_reader or {}, ()).type

    def read(buf: np.ndarray, pos: np.ndarray) -> pa.Array:
        return resolve(node.read(buf, pos))

    return Plan(read, target)


def decode(offsets: np.ndarray, data: np.ndarray, rows: np.ndarray, start: int,
           how: Plan) -> pa.Array:
    """The values at ``rows`` of a binary array (its :func:`binary_buffers`), each read
    from its ``start``-th byte with ``how``. A value cut short raises ValueError, as
    fastavro raises for it."""
    pos = offsets[rows] + start
    ends = offsets[rows + 1]
    if np.any(pos > ends):
        raise ValueError("a value is shorter than its header")
    try:
        decoded = how.read(data, pos)
    except IndexError:
        raise ValueError("an Avro value is cut short") from None
    if np.any(pos > ends):
        raise ValueError("an Avro value is cut short")
    return decoded


def binary_buffers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A binary array's offsets (int64, one per value and one past the last) and data."""
    width: type[np.signedinteger[Any]]
    if pa.types.is_large_binary(values.type):
        width = np.int64
    elif pa.types.is_binary(values.type):
        width = np.int32
    else:
        raise TypeError(f"binary values expected, not {values.type}")
    _, offsets_buffer, data_buffer = values.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=width)[
        values.offset:values.offset + len(values) + 1].astype(np.int64)
    data = (np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None
            else np.zeros(0, dtype=np.uint8))
    return offsets, data


@dataclass(frozen=True)
class _Node:
    type: pa.DataType
    read: Read


_FIXED_WIDTH = {"float": (4, "<f4", pa.float32()), "double": (8, "<f8", pa.float64())}
_UTC = "UTC"


def _node(schema: Any, named: dict[str, Any], seen: tuple[str, ...]) -> _Node:
    schema = _named(schema, named)
    if isinstance(schema, list):
        return _union(schema, named, seen)
    kind = schema if isinstance(schema, str) else schema["type"]
    logical = None if isinstance(schema, str) else schema.get("logicalType")
    if logical is not None:
        return _logical(schema, kind, logical)
    if kind == "null":
        return _Node(pa.null(), lambda buf, pos: pa.nulls(len(pos)))
    if kind == "boolean":
        return _Node(pa.bool_(), _boolean)
    if kind == "int":
        return _Node(pa.int32(), lambda buf, pos: pa.array(_long(buf, pos).astype(np.int32)))
    if kind == "long":
        return _Node(pa.int64(), lambda buf, pos: pa.array(_long(buf, pos)))
    if kind in _FIXED_WIDTH:
        width, dtype, arrow = _FIXED_WIDTH[kind]
        return _Node(arrow, lambda buf, pos: pa.array(
            _fixed_bytes(buf, pos, width).view(dtype).ravel()))
    if kind == "string":
        return _Node(pa.string(), lambda buf, pos: _bytes(buf, pos, pa.string()))
    if kind == "bytes":
        return _Node(pa.binary(), lambda buf, pos: _bytes(buf, pos, pa.binary()))
    if kind == "fixed":
        size = int(schema["size"])
        return _Node(pa.binary(), lambda buf, pos: _fixed(buf, pos, size))
    if kind == "enum":
        symbols = pa.array(schema["symbols"], pa.string())
        return _Node(pa.string(), lambda buf, pos: symbols.take(
            _index(_long(buf, pos), len(symbols))))
    if kind in ("record", "error"):
        return _record(schema, named, seen)
    if kind == "array":
        items = _node(schema["items"], named, seen)
        return _Node(pa.list_(items.type), _blocks(items.read, None, items.type))
    if kind == "map":
        values = _node(schema["values"], named, seen)
        keys = _Node(pa.string(), lambda buf, pos: _bytes(buf, pos, pa.string()))
        return _Node(pa.map_(pa.string(), values.type),
                     _blocks(values.read, keys.read, values.type))
    raise Unsupported(f"Avro type {kind!r}")


def _named(schema: Any, named: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema in named:
        return named[schema]
    return schema


def _logical(schema: dict[str, Any], kind: str, logical: str) -> _Node:
    if logical == "date" and kind == "int":
        return _Node(pa.date32(), lambda buf, pos: pa.array(
            _long(buf, pos).astype(np.int32), pa.date32()))
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        unit = pa.timestamp("ms" if logical == "timestamp-millis" else "us", _UTC)
        return _Node(unit, lambda buf, pos: pa.array(_long(buf, pos), unit))
    if logical == "uuid" and kind == "string":
        return _Node(pa.string(), lambda buf, pos: _bytes(buf, pos, pa.string()))
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        if precision > 38:
            raise Unsupported(f"decimal of precision {precision}")
        arrow = pa.decimal128(precision, scale)
        size = int(schema["size"]) if kind == "fixed" else None
        return _Node(arrow, lambda buf, pos: _decimal(buf, pos, size, arrow))
    raise Unsupported(f"logical type {logical!r} of {kind!r}")


def _record(schema: dict[str, Any], named: dict[str, Any], seen: tuple[str, ...]) -> _Node:
    name = schema.get("name", "")
    if name in seen:
        raise Unsupported(f"recursive record {name}")
    fields = [(field["name"], _node(field["type"], named, (*seen, name)))
              for field in schema["fields"]]
    arrow = pa.struct([pa.field(name, node.type) for name, node in fields])
    names = [name for name, _ in fields]
    readers = [node.read for _, node in fields]

    def read(buf: np.ndarray, pos: np.ndarray) -> pa.Array:
        columns = [field_read(buf, pos) for field_read in readers]
        if not columns:
            return pa.array([{}] * len(pos), arrow)
        return pa.StructArray.from_arrays(columns, names=names)

    return _Node(arrow, read)


def _union(branches: list[Any], named: dict[str, Any], seen: tuple[str, ...]) -> _Node:
    kinds = [_named(branch, named) for branch in branches]
    values = [i for i, branch in enumerate(kinds) if branch != "null"]
    if len(values) != 1:
        raise Unsupported(f"union of {branches}")
    value_index = values[0]
    node = _node(branches[value_index], named, seen)

    def read(buf: np.ndarray, pos: np.ndarray) -> pa.Array:
        chosen = _index(_long(buf, pos), len(branches))
        present = chosen == value_index
        if present.all():
            return node.read(buf, pos)
        rows = np.flatnonzero(present)
        at = pos[rows]
        got = node.read(buf, at)
        pos[rows] = at
        return _scatter(got, present)

    return _Node(node.type, read)


def _scatter(values: pa.Array, present: np.ndarray) -> pa.Array:
    """``values`` spread over the rows where ``present``, nulls elsewhere."""
    where = np.cumsum(present) - 1
    return values.take(pa.array(where, mask=~present))


def _long(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Avro's zig-zag varints at ``pos`` (moved past them)."""
    byte = buf[pos]
    value = (byte & 0x7F).astype(np.uint64)
    pos += 1
    more = np.flatnonzero(byte & 0x80)
    shift = 7
    while more.size:
        if shift > 63:
            raise ValueError("an Avro varint longer than 10 bytes")
        if more.size == len(pos):  # every value goes on (timestamps): no subsets
            byte = buf[pos]
            value |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
            pos += 1
            more = np.flatnonzero(byte & 0x80)
        else:
            at = pos[more]
            byte = buf[at]
            value[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
            pos[more] = at + 1
            more = more[(byte & 0x80) != 0]
        shift += 7
    return ((value >> np.uint64(1)) ^ (np.uint64(0) - (value & np.uint64(1)))).view(np.int64)


def _index(values: np.ndarray, count: int) -> np.ndarray:
    if values.size and (values.min() < 0 or values.max() >= count):
        raise ValueError(f"an Avro index out of its {count} choices")
    return values


def _boolean(buf: np.ndarray, pos: np.ndarray) -> pa.Array:
    byte = buf[pos]
    pos += 1
    return pa.array(byte != 0)


def _fixed_bytes(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each position, one row each (positions moved past them)."""
    taken = buf[pos[:, None] + np.arange(width)]
    pos += width
    return taken


def _gather(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
            ) -> tuple[np.ndarray, np.ndarray]:
    """Arrow offsets (int32) and the bytes of the slices ``starts``/``lengths``."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 2**31:
        raise ValueError("more than 2 GiB of strings in one batch")
    if total:
        data = buf[np.repeat(starts - offsets[:-1], lengths) + np.arange(total)]
    else:
        data = np.zeros(0, dtype=np.uint8)
    return offsets.astype(np.int32), data


def _bytes(buf: np.ndarray, pos: np.ndarray, arrow: pa.DataType) -> pa.Array:
    lengths = _long(buf, pos)
    if lengths.size and lengths.min() < 0:
        raise ValueError("an Avro string or bytes of negative length")
    starts = pos.copy()
    pos += lengths
    if lengths.size and int(pos.max()) > len(buf):
        raise ValueError("an Avro value is cut short")
    offsets, data = _gather(buf, starts, lengths)
    array = pa.Array.from_buffers(arrow, len(pos), [None, pa.py_buffer(offsets),
                                                    pa.py_buffer(data)])
    if arrow == pa.string():
        array.validate(full=True)  # UTF-8, as fastavro's decode checks it
    return array


def _fixed(buf: np.ndarray, pos: np.ndarray, size: int) -> pa.Array:
    data = _fixed_bytes(buf, pos, size).ravel()
    offsets = (np.arange(len(pos) + 1, dtype=np.int64) * size).astype(np.int32)
    return pa.Array.from_buffers(pa.binary(), len(pos), [None, pa.py_buffer(offsets),
                                                         pa.py_buffer(data)])


def _decimal(buf: np.ndarray, pos: np.ndarray, size: int | None,
             arrow: pa.DataType) -> pa.Array:
    """Big-endian two's complement unscaled values, as Arrow's 16-byte little-endian."""
    lengths = _long(buf, pos) if size is None else np.full(len(pos), size, dtype=np.int64)
    if lengths.size and (lengths.min() < 1 or lengths.max() > 16):
        raise ValueError("an Avro decimal of more than 16 bytes (or none)")
    starts = pos.copy()
    pos += lengths
    if lengths.size and int(pos.max()) > len(buf):
        raise ValueError("an Avro value is cut short")
    first = buf[starts] if len(pos) else np.zeros(0, dtype=np.uint8)
    wide = np.where(first >= 0x80, 0xFF, 0).astype(np.uint8)[:, None].repeat(16, axis=1)
    rows = np.repeat(np.arange(len(pos)), lengths)
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    wide[rows, 16 - np.repeat(lengths, lengths) + within] = \
        buf[np.repeat(starts, lengths) + within]
    little = np.ascontiguousarray(wide[:, ::-1])
    return pa.Array.from_buffers(arrow, len(pos), [None, pa.py_buffer(little)])


def _blocks(read_item: Read, read_key: Read | None, item_type: pa.DataType) -> Read:
    """An array's (or, with keys, a map's) reader: Avro's blocks of a count (negative:
    followed by the block's size in bytes) and as many items, until a count of 0. The
    values' items are read in step (every value's first item, then the second of those
    that have one, ...) and put back in each value's order."""

    def read(buf: np.ndarray, pos: np.ndarray) -> pa.Array:
        owners: list[np.ndarray] = []
        items: list[pa.Array] = []
        keys: list[pa.Array] = []
        active = np.arange(len(pos))
        while active.size:
            at = pos[active]
            counts = _long(buf, at)
            sized = np.flatnonzero(counts < 0)
            if sized.size:
                counts[sized] = -counts[sized]
                skipped = at[sized]
                _long(buf, skipped)  # the block's size in bytes: not needed
                at[sized] = skipped
            for step in range(int(counts.max()) if counts.size else 0):
                rows = np.flatnonzero(counts > step)
                item_at = at[rows]
                if read_key is not None:
                    keys.append(read_key(buf, item_at))
                items.append(read_item(buf, item_at))
                at[rows] = item_at
                owners.append(active[rows])
            pos[active] = at
            active = active[counts > 0]
        owner = np.concatenate(owners) if owners else np.zeros(0, dtype=np.int64)
        order = pa.array(np.argsort(owner, kind="stable"))
        offsets = np.zeros(len(pos) + 1, dtype=np.int32)
        np.cumsum(np.bincount(owner, minlength=len(pos)), out=offsets[1:])
        values = (pa.concat_arrays(items) if items else pa.array([], item_type)).take(order)
        if read_key is None:
            return pa.ListArray.from_arrays(pa.array(offsets), values)
        names = (pa.concat_arrays(keys) if keys else pa.array([], pa.string())).take(order)
        return pa.MapArray.from_arrays(pa.array(offsets), names, values)

    return read


# Schema resolution: the writer's values, decoded as written, reshaped into the reader's.

Resolve = Callable[[pa.Array], pa.Array]
_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
               ("long", "double"), ("float", "double"), ("string", "bytes"),
               ("bytes", "string")}


def _resolution(writer: Any, named_writer: dict[str, Any], reader: Any,
                named_reader: dict[str, Any], seen: tuple[str, ...]) -> Resolve:
    writer, reader = _named(writer, named_writer), _named(reader, named_reader)
    if isinstance(reader, list):
        branches = [b for b in reader if _named(b, named_reader) != "null"]
        if len(branches) != 1:
            raise Unsupported(f"union of {reader}")
        if writer == "null":
            return lambda values: pa.nulls(len(values), _node(
                branches[0], named_reader, seen).type)
        if isinstance(writer, list):
            written = [b for b in writer if _named(b, named_writer) != "null"]
            if len(written) != 1:
                raise Unsupported(f"union of {writer}")
            writer = _named(written[0], named_writer)
        return _resolution(writer, named_writer, branches[0], named_reader, seen)
    if isinstance(writer, list):
        raise Unsupported("a union read as a non-union")
    w_kind = writer if isinstance(writer, str) else writer["type"]
    r_kind = reader if isinstance(reader, str) else reader["type"]
    w_logical = None if isinstance(writer, str) else writer.get("logicalType")
    r_logical = None if isinstance(reader, str) else reader.get("logicalType")
    if (w_logical is not None or r_logical is not None) and writer != reader:
        raise Unsupported(f"{writer} read as {reader}")
    if w_kind in ("record", "error") and r_kind in ("record", "error"):
        return _record_resolution(writer, named_writer, reader, named_reader, seen)
    if w_kind != r_kind:
        if (w_kind, r_kind) not in _PROMOTIONS:
            raise Unsupported(f"{w_kind} read as {r_kind}")
        target = _node(reader, named_reader, seen).type
        # Avro promotes a long past 2**53 to the nearest double, as a cast does unchecked.
        return lambda values: values.cast(target, safe=False)
    if w_kind == "enum":
        if not set(writer["symbols"]) <= set(reader["symbols"]):
            raise Unsupported("an enum with symbols the reader lacks")
        return lambda values: values
    if w_kind == "array":
        items = _resolution(writer["items"], named_writer, reader["items"], named_reader,
                            seen)
        return lambda values: pa.ListArray.from_arrays(values.offsets, items(values.values))
    if w_kind == "map":
        map_values = _resolution(writer["values"], named_writer, reader["values"],
                                 named_reader, seen)
        return lambda values: pa.MapArray.from_arrays(values.offsets, values.keys,
                                                      map_values(values.items))
    if w_kind == "fixed" and writer.get("size") != reader.get("size"):
        raise Unsupported("fixed of another size")
    return lambda values: values


def _record_resolution(writer: dict[str, Any], named_writer: dict[str, Any],
                       reader: dict[str, Any], named_reader: dict[str, Any],
                       seen: tuple[str, ...]) -> Resolve:
    name = reader.get("name", "")
    if name in seen:
        raise Unsupported(f"recursive record {name}")
    written = {field["name"]: field for field in writer["fields"]}
    steps: list[tuple[str, Callable[[pa.StructArray], pa.Array]]] = []
    for field in reader["fields"]:
        names = [field["name"], *field.get("aliases", ())]
        source = next((n for n in names if n in written), None)
        if source is None:
            steps.append((field["name"], _default(field, named_reader, seen)))
            continue
        resolve = _resolution(written[source]["type"], named_writer, field["type"],
                              named_reader, (*seen, name))
        steps.append((field["name"], _field_step(source, resolve)))

    def read(values: pa.Array) -> pa.Array:
        columns = [step(values) for _, step in steps]
        return pa.StructArray.from_arrays(columns, names=[name for name, _ in steps],
                                          mask=values.is_null())

    return read


def _field_step(source: str, resolve: Resolve) -> Callable[[pa.StructArray], pa.Array]:
    return lambda values: resolve(values.field(source))


def _default(field: dict[str, Any], named: dict[str, Any], seen: tuple[str, ...],
             ) -> Callable[[pa.StructArray], pa.Array]:
    """A column of the reader's default for a field the writer lacks."""
    if "default" not in field:
        raise Unsupported(f"field {field['name']} has no default and the writer lacks it")
    arrow = _node(field["type"], named, seen).type
    try:
        one = pa.array([field["default"]], arrow)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise Unsupported(f"default of {field['name']}: {exc}") from None
    return lambda values: one.take(np.zeros(len(values), dtype=np.int64))
