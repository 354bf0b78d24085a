"""OffsetCommit, OffsetFetch and OffsetDelete: a group's committed positions."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gregor.broker.authorization import group_allowed, topic_allowed
from gregor.broker.request import Request
from gregor.groups import records
from gregor.groups.coordinator import now_ms
from gregor.groups.group import TopicPartition
from gregor.groups.offset_and_metadata import (
    NO_EXPIRE_TIMESTAMP,
    NO_LEADER_EPOCH,
    OffsetAndMetadata,
)
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_NO_THROTTLE = datetime.timedelta(0)
_DEFAULT_RETENTION = datetime.timedelta(milliseconds=-1)
_NO_OFFSET = -1
# What OffsetFetch returns as metadata for a partition without a committed offset.
_NO_METADATA = ""
_FIRST_GROUP_ERROR_VERSION = 2
_FIRST_MULTI_GROUP_VERSION = 8


def _grouped(items: Sequence[tuple[TopicPartition, Any]]) -> dict[str, list[tuple[int, Any]]]:
    """``((topic, partition), x)`` pairs grouped by topic, keeping their order."""
    by_topic: dict[str, list] = {}
    for (topic, partition), value in items:
        by_topic.setdefault(topic, []).append((partition, value))
    return by_topic


# -------------------------------------------------------------------- commit
async def handle_commit(broker: Broker, request: Request):
    body = request.body
    version = request.version
    now = now_ms()
    # OffsetCommit v2-4 may ask for its own retention; later versions expire
    # offsets with their group (offsets.retention.minutes, KIP-211).
    retention = getattr(body, "retention_time", _DEFAULT_RETENTION)
    expire = (NO_EXPIRE_TIMESTAMP if retention == _DEFAULT_RETENTION
              else now + int(retention / datetime.timedelta(milliseconds=1)))
    # The record format bounds the metadata string whatever the configuration says.
    max_metadata = min(broker.config["offset.metadata.max.bytes"], records.MAX_STRING_BYTES)
    errors: list[tuple[TopicPartition, ErrorCode]] = []
    valid: dict[TopicPartition, OffsetAndMetadata] = {}
    group_denied = not group_allowed(broker, request, Operation.READ, body.group_id)
    for topic in body.topics:
        topic_denied = not topic_allowed(broker, request, Operation.READ, topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if group_denied:
                errors.append((tp, ErrorCode.group_authorization_failed))
            elif topic_denied:
                errors.append((tp, ErrorCode.topic_authorization_failed))
            elif broker.image.partition(*tp) is None:
                errors.append((tp, ErrorCode.unknown_topic_or_partition))
            elif len(metadata.encode()) > max_metadata:
                errors.append((tp, ErrorCode.offset_metadata_too_large))
            else:
                valid[tp] = OffsetAndMetadata(
                    offset=p.committed_offset,
                    leader_epoch=getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH),
                    metadata=metadata, commit_timestamp=now, expire_timestamp=expire)
                errors.append((tp, ErrorCode.none))
    group_error = ErrorCode.group_authorization_failed
    if not group_denied:
        group_error = await broker.group_coordinator.ensure_store() or (
            broker.group_coordinator.commit_offsets(
                body.group_id, body.generation_id_or_member_epoch, body.member_id,
                getattr(body, "group_instance_id", None), valid))
    if group_error == ErrorCode.none and valid:
        group_error = await broker.group_coordinator.store.replicated(
            body.group_id, broker.config["offsets.commit.timeout.ms"] / 1000)
    errors = [(tp, group_error if tp in valid else error) for tp, error in errors]
    partition_cls = nested(ApiKey.OFFSET_COMMIT, version, "OffsetCommitResponsePartition")
    topic_cls = nested(ApiKey.OFFSET_COMMIT, version, "OffsetCommitResponseTopic")
    return build(response_schema(ApiKey.OFFSET_COMMIT, version), throttle_time=_NO_THROTTLE,
                 topics=tuple(
                     build(topic_cls, name=name, partitions=tuple(
                         build(partition_cls, partition_index=index, error_code=error)
                         for index, error in partitions))
                     for name, partitions in _grouped(errors).items()))


# --------------------------------------------------------------------- fetch
def _fetch_group(broker: Broker, request: Request, group_id: str, topics: Sequence[Any] | None
                 ) -> tuple[ErrorCode, list[tuple[TopicPartition, OffsetAndMetadata | None]]]:
    """One group's answer: its error and, per asked (or committed) partition, the offset."""
    version = request.version
    if not group_allowed(broker, request, Operation.DESCRIBE, group_id):
        return ErrorCode.group_authorization_failed, []
    wanted = None if topics is None else [(t.name, i) for t in topics for i in t.partition_indexes]
    error, committed = broker.group_coordinator.fetch_offsets(group_id, wanted)
    if wanted is None:
        return error, sorted(committed.items())
    if error != ErrorCode.none and version >= _FIRST_GROUP_ERROR_VERSION:
        return error, []
    return error, [(tp, committed.get(tp)) for tp in wanted]


def _unstable(broker: Broker, group_id: str, body: Any,
              entries: Sequence[tuple[TopicPartition, Any]]) -> list[tuple[TopicPartition, Any]]:
    """KIP-447: a consumer asking for stable offsets (require_stable, v7+) gets
    UNSTABLE_OFFSET_COMMIT, and retries, for a partition an open transaction holds an
    offset of."""
    if not getattr(body, "require_stable", False):
        return list(entries)
    pending = broker.group_coordinator.has_pending_offsets
    return [(tp, ErrorCode.unstable_offset_commit if pending(group_id, tp) else offset)
            for tp, offset in entries]


def _fetch_topics(version: int, entries: Sequence[tuple[TopicPartition, Any]],
                  partition_error: ErrorCode, names: tuple[str, str]) -> tuple[Any, ...]:
    """Entries are offsets, None (nothing committed) or a partition's own error."""
    topic_name, partition_name = names
    topic_cls = nested(ApiKey.OFFSET_FETCH, version, topic_name)
    partition_cls = nested(ApiKey.OFFSET_FETCH, version, partition_name)

    def partition(index: int, entry: Any) -> Any:
        if isinstance(entry, ErrorCode):
            return build(partition_cls, partition_index=index, committed_offset=_NO_OFFSET,
                         committed_leader_epoch=NO_LEADER_EPOCH, metadata=_NO_METADATA,
                         error_code=entry)
        return build(partition_cls, partition_index=index,
                     committed_offset=_NO_OFFSET if entry is None else entry.offset,
                     committed_leader_epoch=NO_LEADER_EPOCH if entry is None
                     else entry.leader_epoch,
                     metadata=_NO_METADATA if entry is None else entry.metadata,
                     error_code=partition_error)

    return tuple(
        build(topic_cls, name=name, partitions=tuple(
            partition(index, entry) for index, entry in partitions))
        for name, partitions in _grouped(entries).items())


async def handle_fetch(broker: Broker, request: Request):
    body = request.body
    version = request.version
    schema = response_schema(ApiKey.OFFSET_FETCH, version)
    if version >= _FIRST_MULTI_GROUP_VERSION:
        group_cls = nested(ApiKey.OFFSET_FETCH, version, "OffsetFetchResponseGroup")
        groups = []
        for group in body.groups:
            error, entries = _fetch_group(broker, request, group.group_id, group.topics)
            entries = _unstable(broker, group.group_id, body, entries)
            groups.append(build(group_cls, group_id=group.group_id, error_code=error,
                                topics=_fetch_topics(version, entries, ErrorCode.none, (
                                    "OffsetFetchResponseTopics",
                                    "OffsetFetchResponsePartitions"))))
        return build(schema, throttle_time=_NO_THROTTLE, groups=tuple(groups))
    error, entries = _fetch_group(broker, request, body.group_id, body.topics)
    entries = _unstable(broker, body.group_id, body, entries)
    # Before v2 there is no response-level error: each partition carries the group's.
    partition_error = error if version < _FIRST_GROUP_ERROR_VERSION else ErrorCode.none
    topics = _fetch_topics(version, entries, partition_error,
                           ("OffsetFetchResponseTopic", "OffsetFetchResponsePartition"))
    return build(schema, throttle_time=_NO_THROTTLE, error_code=error, topics=topics)


# -------------------------------------------------------------------- delete
async def handle_delete(broker: Broker, request: Request):
    body = request.body
    version = request.version
    asked = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    # Kafka: DELETE on the group, READ on each topic.
    denied = {tp for tp in asked if not topic_allowed(broker, request, Operation.READ, tp[0])}
    known = [tp for tp in asked if broker.image.partition(*tp) is not None and tp not in denied]
    error, results = ErrorCode.group_authorization_failed, dict[TopicPartition, ErrorCode]()
    if group_allowed(broker, request, Operation.DELETE, body.group_id):
        error, results = broker.group_coordinator.delete_offsets(body.group_id, known)
    entries: list[tuple[TopicPartition, ErrorCode]] = []
    if error == ErrorCode.none:
        entries = [(tp, ErrorCode.topic_authorization_failed if tp in denied
                    else results.get(tp, ErrorCode.unknown_topic_or_partition)) for tp in asked]
    partition_cls = nested(ApiKey.OFFSET_DELETE, version, "OffsetDeleteResponsePartition")
    topic_cls = nested(ApiKey.OFFSET_DELETE, version, "OffsetDeleteResponseTopic")
    return build(response_schema(ApiKey.OFFSET_DELETE, version), throttle_time=_NO_THROTTLE,
                 error_code=error, topics=tuple(
                     build(topic_cls, name=name, partitions=tuple(
                         build(partition_cls, partition_index=index, error_code=code)
                         for index, code in partitions))
                     for name, partitions in _grouped(entries).items()))
