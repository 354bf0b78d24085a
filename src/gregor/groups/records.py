"""The records of ``__consumer_offsets``, byte for byte in Kafka's own format.

Each record's key and value start with a big-endian int16 version followed by the
fields of that version, as defined by Kafka's coordinator schemas
(``group-coordinator/src/main/resources/common/message/{OffsetCommit,GroupMetadata}
{Key,Value}.json``). Keeping Kafka's format means a topic written by gregor reads
like Kafka's to any tool that decodes it, and the schema tables below can be checked
line by line against those files. The classes are generated for kio, whose codecs
already implement the protocol's primitive types.

The key version says what the record is: 0 and 1 are an offset commit, 2 a group's
metadata. A record with no value is a tombstone: the offset or group was deleted.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field, make_dataclass
from functools import cache
from types import GenericAlias
from typing import Any

from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i16

from gregor.groups.offset_and_metadata import NO_EXPIRE_TIMESTAMP, OffsetAndMetadata

OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
_OFFSET_COMMIT_KEY_WRITE_VERSION = 1
# Kafka writes v1 only for commits with an explicit expire timestamp, v3 otherwise.
_OFFSET_VALUE_WITH_EXPIRY = 1
_OFFSET_VALUE_CURRENT = 3
_GROUP_VALUE_WRITE_VERSION = 3
_MAX_VALUE_VERSION = 4
_FIRST_FLEXIBLE_VALUE_VERSION = 4

_VERSION = struct.Struct(">h")

_PYTHON_TYPES: dict[str, type] = {"int32": int, "int64": int, "string": str, "bytes": bytes}


# Non-flexible records store strings with an int16 length.
MAX_STRING_BYTES = 2**15 - 1


class InvalidRecord(ValueError):
    """A ``__consumer_offsets`` record that cannot be read, or values that do not fit
    Kafka's record format (a string over MAX_STRING_BYTES)."""


@dataclass(frozen=True, slots=True)
class _Field:
    """One field of a schema, with the versions it exists in (inclusive)."""

    name: str
    kafka_type: str
    first: int = 0
    last: int = _MAX_VALUE_VERSION
    nullable: bool = False


_OFFSET_COMMIT_KEY = (
    _Field("group", "string"),
    _Field("topic", "string"),
    _Field("partition", "int32"),
)
_GROUP_METADATA_KEY = (_Field("group", "string"),)
_OFFSET_COMMIT_VALUE = (
    _Field("offset", "int64"),
    _Field("leader_epoch", "int32", first=3),
    _Field("metadata", "string"),
    _Field("commit_timestamp", "int64"),
    _Field("expire_timestamp", "int64", first=1, last=1),
)
_MEMBER_METADATA = (
    _Field("member_id", "string"),
    _Field("group_instance_id", "string", first=3, nullable=True),
    _Field("client_id", "string"),
    _Field("client_host", "string"),
    _Field("rebalance_timeout", "int32", first=1),
    _Field("session_timeout", "int32"),
    _Field("subscription", "bytes"),
    _Field("assignment", "bytes"),
)
_GROUP_METADATA_VALUE = (
    _Field("protocol_type", "string"),
    _Field("generation", "int32"),
    _Field("protocol", "string", nullable=True),
    _Field("leader", "string", nullable=True),
    _Field("current_state_timestamp", "int64", first=2),
    # "members" ([]MemberMetadata) is appended by _group_value_schema.
)


def _make_schema(name: str, version: int, fields: tuple[_Field, ...], kind: EntityType,
                 flexible: bool, extra: list[tuple[str, Any, Any]] | None = None) -> type:
    spec: list[tuple[str, Any, Any]] = []
    for f in fields:
        if f.first <= version <= f.last:
            python_type: Any = _PYTHON_TYPES[f.kafka_type]
            if f.nullable:
                python_type = python_type | None
            spec.append((f.name, python_type, field(metadata={"kafka_type": f.kafka_type})))
    spec.extend(extra or [])
    return make_dataclass(
        f"{name}V{version}", spec, frozen=True, slots=True, kw_only=True,
        namespace={"__type__": kind, "__version__": i16(version), "__flexible__": flexible})


@cache
def _key_schema(version: int) -> type:
    if version in OFFSET_COMMIT_KEY_VERSIONS:
        return _make_schema("OffsetCommitKey", 0, _OFFSET_COMMIT_KEY, EntityType.data, False)
    return _make_schema("GroupMetadataKey", 0, _GROUP_METADATA_KEY, EntityType.data, False)


@cache
def _offset_value_schema(version: int) -> type:
    return _make_schema("OffsetCommitValue", version, _OFFSET_COMMIT_VALUE, EntityType.data,
                        version >= _FIRST_FLEXIBLE_VALUE_VERSION)


@cache
def _member_schema(version: int) -> type:
    return _make_schema("MemberMetadata", version, _MEMBER_METADATA, EntityType.nested,
                        version >= _FIRST_FLEXIBLE_VALUE_VERSION)


@cache
def _group_value_schema(version: int) -> type:
    flexible = version >= _FIRST_FLEXIBLE_VALUE_VERSION
    # ``tuple[member class, ...]`` spelled as the object it makes: the member class only
    # exists at run time, so it cannot appear in a type expression.
    members = ("members", GenericAlias(tuple, (_member_schema(version), ...)),
               field(metadata={}))
    return _make_schema("GroupMetadataValue", version, _GROUP_METADATA_VALUE, EntityType.data,
                        flexible, extra=[members])


def _write(version: int, schema: type, values: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(version))
    try:
        entity_writer(schema)(buffer, schema(**values))
    except Exception as exc:  # kio's OutOfBoundValue and friends
        raise InvalidRecord(f"cannot encode {schema.__name__}: {exc}") from exc
    return buffer.getvalue()


def _read(data: bytes, schema_for: Any, max_version: int) -> tuple[int, Any]:
    if len(data) < _VERSION.size:
        raise InvalidRecord("record shorter than its version")
    (version,) = _VERSION.unpack_from(data)
    if not 0 <= version <= max_version:
        raise InvalidRecord(f"unknown record version {version}")
    try:
        value, _ = entity_reader(schema_for(version))(data, _VERSION.size)
    except Exception as exc:  # kio raises assorted errors on truncated or garbled input
        raise InvalidRecord(f"cannot decode version {version}: {exc}") from exc
    return version, value


# ----------------------------------------------------------------------- keys
@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _write(_OFFSET_COMMIT_KEY_WRITE_VERSION, _key_schema(_OFFSET_COMMIT_KEY_WRITE_VERSION),
                  {"group": group, "topic": topic, "partition": partition})


def group_metadata_key(group: str) -> bytes:
    return _write(GROUP_METADATA_KEY_VERSION, _key_schema(GROUP_METADATA_KEY_VERSION),
                  {"group": group})


def read_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey:
    """Decode a key; other coordinators' record types (KIP-848 and later) are InvalidRecord."""
    version, key = _read(data, _key_schema, GROUP_METADATA_KEY_VERSION)
    if version in OFFSET_COMMIT_KEY_VERSIONS:
        return OffsetCommitKey(key.group, key.topic, key.partition)
    return GroupMetadataKey(key.group)


# --------------------------------------------------------------------- values
def offset_commit_value(offset: OffsetAndMetadata) -> bytes:
    if offset.expire_timestamp != NO_EXPIRE_TIMESTAMP:
        version = _OFFSET_VALUE_WITH_EXPIRY
        values = {"offset": offset.offset, "metadata": offset.metadata,
                  "commit_timestamp": offset.commit_timestamp,
                  "expire_timestamp": offset.expire_timestamp}
    else:
        version = _OFFSET_VALUE_CURRENT
        values = {"offset": offset.offset, "leader_epoch": offset.leader_epoch,
                  "metadata": offset.metadata, "commit_timestamp": offset.commit_timestamp}
    return _write(version, _offset_value_schema(version), values)


def read_offset_commit_value(data: bytes) -> OffsetAndMetadata:
    _, value = _read(data, _offset_value_schema, _MAX_VALUE_VERSION)
    return OffsetAndMetadata(
        offset=value.offset, leader_epoch=getattr(value, "leader_epoch", -1),
        metadata=value.metadata, commit_timestamp=value.commit_timestamp,
        expire_timestamp=getattr(value, "expire_timestamp", NO_EXPIRE_TIMESTAMP))


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A group's persisted state: enough to resume a Stable group after a restart."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...]


def group_metadata_value(group: GroupRecord) -> bytes:
    version = _GROUP_VALUE_WRITE_VERSION
    schema = _group_value_schema(version)
    member_cls = _member_schema(version)
    members = tuple(member_cls(
        member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
        client_host=m.client_host, rebalance_timeout=m.rebalance_timeout,
        session_timeout=m.session_timeout, subscription=m.subscription,
        assignment=m.assignment) for m in group.members)
    return _write(version, schema, {
        "protocol_type": group.protocol_type, "generation": group.generation,
        "protocol": group.protocol, "leader": group.leader,
        "current_state_timestamp": group.current_state_timestamp, "members": members})


def read_group_metadata_value(data: bytes) -> GroupRecord:
    _, value = _read(data, _group_value_schema, _MAX_VALUE_VERSION)
    members = tuple(MemberRecord(
        member_id=m.member_id, group_instance_id=getattr(m, "group_instance_id", None),
        client_id=m.client_id, client_host=m.client_host,
        rebalance_timeout=getattr(m, "rebalance_timeout", m.session_timeout),
        session_timeout=m.session_timeout, subscription=m.subscription,
        assignment=m.assignment) for m in value.members)
    return GroupRecord(
        protocol_type=value.protocol_type, generation=value.generation, protocol=value.protocol,
        leader=value.leader,
        current_state_timestamp=getattr(value, "current_state_timestamp", -1), members=members)
