"""Check a request's arrays before kio reads it: no more elements than bytes left,
and null only where the schema allows it.

kio's compiled decoder reserves memory for an array's claimed length before it
reads a single element. A flexible request can claim up to 2**35 elements (a
5-byte varint), a non-flexible one 2**31: reserving that fails, and a failed
allocation in Rust aborts the process -- one frame from any client would take
the broker down. kio also reads a null (length -1) for every array, nullable or
not, and handlers iterate arrays without checking. Kafka's own parser refuses
both ("Tried to allocate a collection of size N, but there are only M bytes
remaining", "non-nullable field was serialized as null"); this walk does the
same before kio sees the frame, following the same schema kio reads: field
order, compact or legacy lengths, tagged fields.

It stops quietly at the first other malformation: kio then refuses the frame at
that same spot, with its own message. It runs on every request, so fixed-size
fields are skipped in runs rather than one by one.

The walk also finds tagged fields the schema does not know. Kafka skips those
(that is what tags are for: newer clients may add them), while kio refuses them,
so the walk reports their spans and :func:`strip_unknown_tags` cuts them out of
the frame before kio reads it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import struct
import threading
from collections.abc import Callable
from functools import cache
from types import NoneType, UnionType
from typing import Any, TypeGuard, Union, get_args, get_origin, get_type_hints

from kio.static.protocol import Entity

from gregor.protocol.varint import encode_uvarint

Buffer = bytes | bytearray | memoryview
# Reads one value at a position and returns the position after it.
Walker = Callable[[Buffer, int], int]

_FIXED_SIZES = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "float64": 8, "uuid": 16,
}
_LEGACY_LENGTHS = {1: struct.Struct(">b"), 2: struct.Struct(">h"), 4: struct.Struct(">i")}
_MAX_VARINT_BYTES = 5


class InvalidArray(ValueError):
    """An array longer than the rest of the frame, or null where it may not be."""


class _Malformed(Exception):
    """Something kio will refuse at this spot; nothing after it needs checking."""


# Tag sections holding unknown tags, found by the walk in progress:
# (section start, section end, the known entries' raw bytes, their count).
_found = threading.local()


def check_arrays(schema: type[Entity], frame: Buffer, offset: int) -> Buffer:
    """Raise :class:`InvalidArray` for a bad array in the ``schema`` request at ``offset``.

    Returns the frame to decode: ``frame`` itself, or a copy without the tagged
    fields the schema does not know.
    """
    _found.sections = []
    # On a malformation the walk stops; kio then refuses the frame at that spot.
    with contextlib.suppress(_Malformed, struct.error):
        _entity_walker(schema)(frame, offset)
    sections, _found.sections = _found.sections, []
    return _rewrite(frame, sections) if sections else frame


def strip_unknown_tags(frame: Buffer, start: int) -> tuple[Buffer, int]:
    """Drop every tag of the tag section at ``start`` (a request header's, which
    defines none); return the frame and the position after the section."""
    try:
        count, pos = _uvarint(frame, start)
        for _ in range(count):
            _, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
    except _Malformed:
        return frame, start
    if count == 0 or pos > len(frame):
        return frame, start + 1
    return _rewrite(frame, [(start, pos, b"", 0)]), start + 1


def _rewrite(frame: Buffer, sections: list[tuple[int, int, bytes, int]]) -> bytes:
    parts = []
    last = 0
    for start, end, kept, kept_count in sorted(sections):
        parts += [bytes(frame[last:start]), encode_uvarint(kept_count), kept]
        last = end
    parts.append(bytes(frame[last:]))
    return b"".join(parts)


def _uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    if pos < len(buf) and buf[pos] < 0x80:  # lengths and counts are mostly one byte
        return buf[pos], pos + 1
    value = 0
    for index in range(_MAX_VARINT_BYTES):
        if pos >= len(buf):
            raise _Malformed
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            return value, pos
    raise _Malformed


def _length_reader(flexible: bool, legacy_size: int) -> Callable[[Buffer, int], tuple[int, int]]:
    """A length prefix: compact (varint of length + 1) or legacy int16/int32; -1 is null."""
    if flexible:
        def compact(buf: Buffer, pos: int) -> tuple[int, int]:
            if pos < len(buf) and buf[pos] < 0x80:  # the common one-byte varint
                return buf[pos] - 1, pos + 1
            value, pos = _uvarint(buf, pos)
            return value - 1, pos

        return compact
    unpack = _LEGACY_LENGTHS[legacy_size].unpack_from

    def legacy(buf: Buffer, pos: int) -> tuple[int, int]:
        (value,) = unpack(buf, pos)  # struct.error past the end
        if value < -1:
            raise _Malformed
        return value, pos + legacy_size

    return legacy


def _sized(flexible: bool, legacy_size: int) -> Walker:
    """Strings (int16 legacy length), bytes and records (int32)."""
    read_length = _length_reader(flexible, legacy_size)

    def walk(buf: Buffer, pos: int) -> int:
        length, pos = read_length(buf, pos)
        return pos + length if length > 0 else pos

    return walk


def _array(name: str, element: Walker | int, flexible: bool, nullable: bool) -> Walker:
    read_length = _length_reader(flexible, 4)
    # Fixed-size elements are skipped all at once rather than walked one by one.
    element_size = element if isinstance(element, int) else 0
    walk_element = None if isinstance(element, int) else element

    def walk(buf: Buffer, pos: int) -> int:
        count, pos = read_length(buf, pos)
        if count <= 0:
            if count < 0 and not nullable:
                raise InvalidArray(f"non-nullable field {name} was serialized as null")
            return pos
        # Every element takes at least one byte: the bound Kafka's parser uses too.
        if count > len(buf) - pos:
            raise InvalidArray(f"{name} claims {count} elements, {len(buf) - pos} bytes left")
        if walk_element is None:
            return pos + count * element_size
        for _ in range(count):
            pos = walk_element(buf, pos)
        return pos

    return walk


def _nullable_entity(entity: Walker) -> Walker:
    """A nullable struct field: an int8 marker, -1 for null."""
    marker = _LEGACY_LENGTHS[1].unpack_from

    def walk(buf: Buffer, pos: int) -> int:
        (present,) = marker(buf, pos)
        return pos + 1 if present < 0 else entity(buf, pos + 1)

    return walk


def _primitive(kafka_type: str, flexible: bool) -> Walker | int:
    """A walker, or the size of a fixed-size type."""
    if kafka_type in _FIXED_SIZES:
        return _FIXED_SIZES[kafka_type]
    if kafka_type == "string":
        return _sized(flexible, 2)
    if kafka_type in ("bytes", "records"):
        return _sized(flexible, 4)
    raise TypeError(f"no walker for kafka type {kafka_type!r}")


def _without_none(hint: Any) -> tuple[Any, bool]:
    if get_origin(hint) in (Union, UnionType) and NoneType in get_args(hint):
        (inner,) = [arg for arg in get_args(hint) if arg is not NoneType]
        return inner, True
    return hint, False


def _is_entity(hint: Any) -> TypeGuard[type[Entity]]:
    """A nested kio message class (a dataclass), rather than a primitive's type."""
    return dataclasses.is_dataclass(hint)


def _field_walker(field: dataclasses.Field, hint: Any, flexible: bool) -> Walker | int:
    hint, nullable = _without_none(hint)
    if get_origin(hint) is tuple:
        element, _ = _without_none(get_args(hint)[0])
        inner = (_entity_walker(element) if _is_entity(element)
                 else _primitive(field.metadata["kafka_type"], flexible))
        return _array(field.name, inner, flexible, nullable)
    if _is_entity(hint):
        entity = _entity_walker(hint)
        return _nullable_entity(entity) if nullable else entity
    return _primitive(field.metadata["kafka_type"], flexible)


def _as_walker(step: Walker | int) -> Walker:
    if isinstance(step, int):
        return lambda _buf, pos: pos + step
    return step


@cache
def _entity_walker(cls: type[Entity]) -> Walker:
    flexible = cls.__flexible__
    hints = get_type_hints(cls)
    # Each walker with the run of fixed-size fields before it, skipped in one step.
    runs: list[tuple[int, Walker]] = []
    skip = 0
    tagged: dict[int, Walker] = {}
    for field in dataclasses.fields(cls):
        step = _field_walker(field, hints[field.name], flexible)
        if "tag" in field.metadata:
            tagged[field.metadata["tag"]] = _as_walker(step)
        elif isinstance(step, int):
            skip += step
        else:
            runs.append((skip, step))
            skip = 0

    fixed_runs = tuple(runs)
    trailing_skip = skip

    def walk(buf: Buffer, pos: int) -> int:
        for run_size, step in fixed_runs:
            pos = step(buf, pos + run_size)
        pos += trailing_skip
        if flexible:
            section_start = pos
            count, pos = _uvarint(buf, pos)  # tagged fields: almost always none
            kept: list[bytes] = []
            unknown = False
            for _ in range(count):
                entry_start = pos
                tag, pos = _uvarint(buf, pos)
                size, pos = _uvarint(buf, pos)  # the value's size
                known = tagged.get(tag)
                if known is None:
                    unknown = True
                    pos += size
                    if pos > len(buf):
                        raise _Malformed
                    continue
                # Like kio (and Kafka's generated code), a known tag's value is read
                # from here, and reading goes on from where the value ends.
                pos = known(buf, pos)
                kept.append(bytes(buf[entry_start:pos]))
            if unknown:
                _found.sections.append((section_start, pos, b"".join(kept), len(kept)))
        return pos

    return walk
