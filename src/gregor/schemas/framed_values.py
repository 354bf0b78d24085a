"""Values in Confluent's framing (magic byte 0, a 4-byte big-endian schema id, then the
payload: Avro binary, JSON text, or Protobuf message indexes and bytes) decoded into
plain JSON-able values, their schema looked up by id in a registry.

For readers that know no schema of their own (the web console's message viewer): each
format's own library decodes (fastavro, json, protobuf), with the writer's schema.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import uuid
from typing import Any

import fastavro
import fastavro.schema
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError

MAGIC = 0
HEADER_SIZE = 5


def schema_id_of(data: bytes | None) -> int | None:
    """The schema id of a framed value; None for anything else."""
    if data is None or len(data) < HEADER_SIZE or data[0] != MAGIC:
        return None
    return int.from_bytes(data[1:HEADER_SIZE], "big")


class FramedValueDecoder:
    """Decodes framed values with the schemas of the registry at ``url`` (cached by
    confluent-kafka's client, schemas never change under an id)."""

    def __init__(self, url: str) -> None:
        self.client = SchemaRegistryClient({"url": url})
        self._avro: dict[int, Any] = {}
        self._protobuf: dict[int, tuple[descriptor_pb2.FileDescriptorProto,
                                        descriptor_pool.DescriptorPool]] = {}

    def decode(self, data: bytes | None) -> tuple[int, Any] | None:
        """(schema id, the value as JSON-able data), or None when ``data`` is not
        framed, its schema is unknown or it does not decode with it."""
        schema_id = schema_id_of(data)
        if data is None or schema_id is None:
            return None
        payload = data[HEADER_SIZE:]
        try:
            schema = self.client.get_schema(schema_id)
            if schema.schema_type in (None, "AVRO"):
                value = fastavro.schemaless_reader(io.BytesIO(payload), self._avro_schema(
                    schema_id, schema), None)
            elif schema.schema_type == "JSON":
                value = json.loads(payload)
            else:
                value = self._protobuf_value(schema_id, payload)
        except (SchemaRegistryError, ValueError, EOFError, KeyError, IndexError,
                DecodeError, TypeError):
            return None
        return schema_id, _jsonable(value)

    def _avro_schema(self, schema_id: int, schema: Any) -> Any:
        if schema_id not in self._avro:
            named: dict[str, Any] = {}
            for reference in schema.references or ():
                referenced = self.client.get_version(reference.subject, reference.version)
                fastavro.schema.parse_schema(json.loads(referenced.schema.schema_str or "null"),
                                             named_schemas=named)
            self._avro[schema_id] = fastavro.schema.parse_schema(
                json.loads(schema.schema_str or "null"), named_schemas=named)
        return self._avro[schema_id]

    def _protobuf_value(self, schema_id: int, payload: bytes) -> Any:
        if schema_id not in self._protobuf:
            pool = descriptor_pool.DescriptorPool()
            self._protobuf[schema_id] = self._add(
                pool, self.client.get_schema(schema_id, fmt="serialized")), pool
        file, pool = self._protobuf[schema_id]
        indexes, offset = _message_indexes(payload)
        message = file.message_type[indexes[0]]
        name = f"{file.package}.{message.name}" if file.package else message.name
        for index in indexes[1:]:
            message = message.nested_type[index]
            name = f"{name}.{message.name}"
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
        return json_format.MessageToDict(cls.FromString(payload[offset:]))

    def _add(self, pool: descriptor_pool.DescriptorPool,
             schema: Any) -> descriptor_pb2.FileDescriptorProto:
        """Add a schema's file to ``pool``, after the files it imports: referenced
        schemas, or well-known types (protobuf's default pool holds those)."""
        file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(schema.schema_str))
        references = {r.name: r for r in schema.references or ()}
        for dependency in file.dependency:
            reference = references.get(dependency)
            if reference is not None:
                self._add(pool, self.client.get_version(
                    reference.subject, reference.version, fmt="serialized").schema)
            else:
                pool.AddSerializedFile(
                    descriptor_pool.Default().FindFileByName(dependency).serialized_pb)
        pool.Add(file)
        return file


def _message_indexes(payload: bytes) -> tuple[list[int], int]:
    """Which message of the file (a path through nested messages): a zigzag varint
    count, then that many zigzag varints; a count of 0 is the first message."""
    count, offset = _zigzag(payload, 0)
    if count == 0:
        return [0], offset
    indexes = []
    for _ in range(count):
        index, offset = _zigzag(payload, offset)
        indexes.append(index)
    return indexes, offset


def _zigzag(data: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), offset


def _jsonable(value: Any) -> Any:
    """Avro's bytes, decimals, dates and uuids as JSON text (bytes in base64)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (decimal.Decimal, uuid.UUID, datetime.date, datetime.time)):
        return str(value)
    return value
