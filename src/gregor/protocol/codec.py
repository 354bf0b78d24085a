"""Request decoding and response encoding through kio's generated message classes.

Everything version-specific (which header a message uses, which fields exist)
comes from kio, generated from Kafka's own JSON schemas; this module only adds
the framing rules kio leaves to the caller. Produce requests, nearly all record
bytes, are read by hand instead (:mod:`gregor.protocol.produce_request`).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, fields
from functools import cache
from types import ModuleType
from typing import Any, TypeVar

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.protocol import Entity

from gregor.protocol import produce_request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.array_guard import Buffer, check_arrays, strip_unknown_tags
from gregor.protocol.primitives import Reader

E = TypeVar("E", bound=Entity)

_FRAME_PREFIX = struct.Struct(">i")
_API_PREFIX = struct.Struct(">hhi")
_CLIENT_ID_LENGTH = struct.Struct(">h")


class MalformedRequest(ValueError):
    """A frame that cannot be decoded; the connection is closed, as Kafka does."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_api(frame: Buffer) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)`` of a request frame body.

    These three fields have the same layout in every header version, so they can
    be read before knowing whether the API or version is supported.
    """
    if len(frame) < _API_PREFIX.size:
        raise MalformedRequest("request shorter than its header")
    return _API_PREFIX.unpack_from(frame, 0)


@cache
def _request_codec(api_key: int, version: int) -> tuple[Any, Any, Any]:
    schema = load_request_schema(api_key, version)
    return schema, entity_reader(schema.__header_schema__), entity_reader(schema)


@cache
def response_schema(api_key: int, version: int) -> Any:
    """kio's response class for this API version (handlers build instances of it)."""
    return load_response_schema(api_key, version)


@cache
def _response_codec(api_key: int, version: int) -> tuple[bool, Any]:
    schema = load_response_schema(api_key, version)
    # kio knows each response's header version: ApiVersions keeps header v0 even
    # when flexible, so a client can parse it before knowing what we support.
    return schema.__header_schema__.__flexible__, entity_writer(schema)


def _header_tags_position(frame: Buffer) -> int:
    """Where header v2's tag section starts: after the legacy (int16) client id."""
    (client_id_length,) = _CLIENT_ID_LENGTH.unpack_from(frame, _API_PREFIX.size)
    return _API_PREFIX.size + 2 + max(client_id_length, 0)


def decode_request(frame: Buffer) -> tuple[RequestHeader, Any]:
    """Decode a whole request frame (without its size prefix) into header and body.

    A writable frame (a large request the connection received into a buffer of its
    own) is left writable for the Produce decoder, whose record sets the log stamps
    offsets into in place; kio reads read-only buffers only."""
    api_key, version, _ = peek_api(frame)
    if api_key == ApiKey.PRODUCE and version in produce_request.VERSIONS:
        return _decode_produce(frame, version)
    frame = _read_only(frame)
    try:
        schema, header_reader, body_reader = _request_codec(api_key, version)
    except Exception as exc:  # kio raises its own lookup errors for unknown pairs
        raise MalformedRequest(f"no schema for api {api_key} v{version}") from exc
    try:
        # kio readers return (value, bytes consumed). Trailing bytes are ignored, as
        # Kafka's own parser does: librdkafka's "all topics" Metadata v9+ request
        # leaves a 4-byte array-count placeholder in which only the first byte counts.
        if schema.__header_schema__.__flexible__:
            # Header v2 defines no tags; unknown ones are skipped, as Kafka does.
            frame, _ = strip_unknown_tags(frame, _header_tags_position(frame))
        header, header_size = header_reader(frame, 0)
        frame = check_arrays(schema, frame, header_size)
        body, _ = body_reader(frame, header_size)
    except Exception as exc:
        raise MalformedRequest(f"cannot decode api {api_key} v{version}: {exc}") from exc
    return RequestHeader(api_key, version, header.correlation_id, header.client_id), body


def _read_only(frame: Buffer) -> bytes | memoryview:
    """``frame`` as kio reads it: bytes, or a read-only view (writable buffers are the
    connections' own receive buffers, which only the Produce decoder writes into)."""
    if isinstance(frame, bytes) or (isinstance(frame, memoryview) and frame.readonly):
        return frame
    return memoryview(frame).toreadonly()


def _decode_produce(frame: Buffer, version: int) -> tuple[RequestHeader, Any]:
    reader = Reader(frame)
    try:
        _, _, correlation_id = reader.unpack(_API_PREFIX)
        client_id = reader.classic_string()  # header v1 and v2 alike
        if version >= produce_request.FIRST_FLEXIBLE:
            reader.tags()  # header v2
        body = produce_request.decode_body(frame, reader.at, version)
    except (ValueError, struct.error, IndexError) as exc:  # UnicodeDecodeError included
        raise MalformedRequest(f"cannot decode api {ApiKey.PRODUCE} v{version}: {exc}"
                               ) from exc
    return RequestHeader(ApiKey.PRODUCE, version, correlation_id, client_id), body


def response_header(api_key: int, version: int, correlation_id: int) -> bytes:
    """The response header bytes: correlation id, plus an empty tag section when flexible."""
    flexible_header, _ = _response_codec(api_key, version)
    return _FRAME_PREFIX.pack(correlation_id) + (b"\x00" if flexible_header else b"")


def encode_body(api_key: int, version: int, body: Any) -> bytes:
    _, writer = _response_codec(api_key, version)
    buffer = io.BytesIO()
    writer(buffer, body)
    return buffer.getvalue()


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """A complete size-prefixed response frame."""
    payload = (response_header(api_key, version, correlation_id)
               + encode_body(api_key, version, body))
    return _FRAME_PREFIX.pack(len(payload)) + payload


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: Any) -> bytes:
    """A complete size-prefixed request frame; used by tests and fuzzers, not the broker."""
    schema, _, _ = _request_codec(api_key, version)
    header_schema = schema.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_schema)(buffer, header_schema(
        request_api_key=api_key, request_api_version=version,
        correlation_id=correlation_id, client_id=client_id))
    entity_writer(schema)(buffer, body)
    payload = buffer.getvalue()
    return _FRAME_PREFIX.pack(len(payload)) + payload


@cache
def _response_reader(api_key: int, version: int) -> tuple[Any, Any]:
    schema = load_response_schema(api_key, version)
    return entity_reader(schema.__header_schema__), entity_reader(schema)


def decode_response(api_key: int, version: int, frame: Buffer) -> tuple[int, Any]:
    """``(correlation_id, body)`` of a response frame (without its size prefix): what a
    broker reads when it is the client of another broker (a follower fetching)."""
    header_reader, body_reader = _response_reader(api_key, version)
    frame = _read_only(frame)
    header, header_size = header_reader(frame, 0)
    body, _ = body_reader(frame, header_size)
    return header.correlation_id, body


@cache
def _field_names(cls: type[Entity]) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


@cache
def response_module(api_key: int, version: int) -> ModuleType:
    """The kio module of one response version, whose nested classes handlers instantiate."""
    return load_payload_module(api_key, version, EntityType.response)


def build(cls: type[E], **values: Any) -> E:
    """Instantiate a kio message class from a superset of its fields.

    Handlers describe an answer once with every field any version has; each
    version's class keeps only the fields it defines, as Kafka's generated
    serializers skip fields outside a version's range.
    """
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def nested(api_key: int, version: int, name: str) -> type[Any]:
    """A nested response class (e.g. ``MetadataResponseTopic``) of one version."""
    return getattr(response_module(api_key, version), name)
