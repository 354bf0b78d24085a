"""Metadata: brokers, controller and topic/partition leadership; auto-creates topics."""

from __future__ import annotations

import datetime
import logging
import uuid
from typing import TYPE_CHECKING, Any

from gregor.broker.authorization import may_create_topic, topic_allowed
from gregor.broker.request import Request
from gregor.cluster.controller import ControllerError
from gregor.cluster.metadata_image import TopicMetadata
from gregor.cluster.topic_names import invalid_topic_reason
from gregor.groups.offsets_store import OFFSETS_TOPIC, StoreError
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

log = logging.getLogger(__name__)

_KEY = ApiKey.METADATA
_UNKNOWN_OPERATIONS = -(2**31)
# Without an authorizer Kafka allows every operation a resource supports, and says so
# when asked (bit i set for ACL operation code i): READ 3, WRITE 4, CREATE 5, DELETE 6,
# ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11,
# IDEMPOTENT_WRITE 12.
TOPIC_OPERATIONS = sum(1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << code for code in (5, 7, 8, 9, 10, 11, 12))


_TOPIC_ACL_OPERATIONS = tuple(Operation(code) for code in (3, 4, 5, 6, 7, 8, 10, 11))
_CLUSTER_ACL_OPERATIONS = tuple(Operation(code) for code in (5, 7, 8, 9, 10, 11, 12))


def authorized_operations(requested: bool, operations: int) -> int:
    """The authorized-operations field: the allowed set if the client asked, else unknown."""
    return operations if requested else _UNKNOWN_OPERATIONS


def broker_entries(broker: Broker, cls: type, listener: str) -> tuple:
    """Every live broker, as registered (in a cluster: in ZooKeeper), at its address on
    the listener the client came in on; as in Kafka, a broker without that listener is
    left out."""
    entries: list[Any] = []
    for _, registration in sorted(broker.image.brokers.items()):
        endpoint = registration.endpoint(listener)
        if endpoint is not None:
            entries.append(build(cls, node_id=registration.broker_id,
                                 broker_id=registration.broker_id, host=endpoint[0],
                                 port=endpoint[1], rack=registration.rack))
    return tuple(entries)


def _topic_entry(broker: Broker, version: int, topic: TopicMetadata, operations: int):
    partition_cls = nested(_KEY, version, "MetadataResponsePartition")
    live = broker.image.brokers
    partitions = []
    for index, state in enumerate(topic.partitions):
        # LEADER_NOT_AVAILABLE while no replica may lead (the whole ISR is down and
        # unclean election is off): clients retry until one returns.
        error = (ErrorCode.none if state.leader in live
                 else ErrorCode.leader_not_available)
        partitions.append(build(
            partition_cls, error_code=error, partition_index=index,
            leader_id=state.leader if error == ErrorCode.none else -1,
            leader_epoch=state.leader_epoch, replica_nodes=state.replicas,
            isr_nodes=state.isr,
            offline_replicas=tuple(r for r in state.replicas if r not in live)))
    return build(nested(_KEY, version, "MetadataResponseTopic"), error_code=ErrorCode.none,
                 name=topic.name, topic_id=topic.uuid, is_internal=topic.internal,
                 partitions=tuple(partitions), topic_authorized_operations=operations)


def _error_entry(version: int, name: str | None, error: ErrorCode,
                 topic_id: uuid.UUID | None = None, operations: int = _UNKNOWN_OPERATIONS):
    """A topic that cannot be described. Asked by name, it still gets the operations
    asked for, as Kafka sets them on every named entry (clients decode them: kafka-python
    2.3 fails on the "omitted" value's bit 31); asked by an unknown id, they stay omitted."""
    return build(nested(_KEY, version, "MetadataResponseTopic"), error_code=error, name=name,
                 topic_id=topic_id, is_internal=False, partitions=(),
                 topic_authorized_operations=operations)


def _requested_topics(broker: Broker, request: Request
                      ) -> list[tuple[str | None, uuid.UUID | None]] | None:
    """Requested ``(name, topic id)`` pairs, names resolved from ids (v10+), or None for
    "all topics" (null in v1+, empty in v0)."""
    topics = request.body.topics
    if topics is None or (request.version == 0 and not topics):
        return None
    by_id = {t.uuid: t.name for t in broker.image.topics.values()}
    wanted: list[tuple[str | None, uuid.UUID | None]] = []
    for topic in topics:
        name, topic_id = topic.name, getattr(topic, "topic_id", None)
        if name is None and topic_id is not None:
            name = by_id.get(topic_id)
        wanted.append((name, topic_id))
    return wanted


async def handle(broker: Broker, request: Request):
    version = request.version
    wanted = _requested_topics(broker, request)
    body = request.body
    want_operations = getattr(body, "include_topic_authorized_operations", False)
    topic_operations = authorized_operations(want_operations, TOPIC_OPERATIONS)
    allow_auto_create = getattr(body, "allow_auto_topic_creation", True) and (
        broker.config["auto.create.topics.enable"])
    authorizer = broker.authorizer

    def operations(name: str) -> int:
        """The operations the client may do on the topic (all, without an authorizer)."""
        if authorizer is None or not want_operations:
            return topic_operations
        return authorizer.authorized_operations(
            str(request.session.principal), request.client_host, ResourceType.TOPIC, name,
            _TOPIC_ACL_OPERATIONS)

    entries = []
    if wanted is None:
        # As in Kafka, topics the client may not describe are left out.
        entries = [_topic_entry(broker, version, t, operations(t.name))
                   for t in broker.image.topics.values()
                   if topic_allowed(broker, request, Operation.DESCRIBE, t.name)]
    else:
        for name, topic_id in wanted:
            if name is None:
                # Asked by id (v10+) for a topic that does not exist (any more).
                entries.append(_error_entry(version, None, ErrorCode.unknown_topic_id, topic_id))
                continue
            if not topic_allowed(broker, request, Operation.DESCRIBE, name):
                entries.append(_error_entry(version, name, ErrorCode.topic_authorization_failed,
                                            operations=operations(name)))
                continue
            topic = broker.image.topics.get(name)
            if topic is None and allow_auto_create:
                if not may_create_topic(broker, request, name):
                    entries.append(_error_entry(version, name,
                                                ErrorCode.topic_authorization_failed,
                                                operations=operations(name)))
                    continue
                topic = await _auto_create(broker, name)
            if topic is not None:
                entries.append(_topic_entry(broker, version, topic, operations(name)))
            elif invalid_topic_reason(name):
                entries.append(_error_entry(version, name, ErrorCode.invalid_topic_exception,
                                            operations=operations(name)))
            else:
                entries.append(_error_entry(version, name, ErrorCode.unknown_topic_or_partition,
                                            operations=operations(name)))
    want_cluster = getattr(body, "include_cluster_authorized_operations", False)
    return build(
        response_schema(_KEY, version),
        throttle_time=datetime.timedelta(0),
        brokers=broker_entries(broker, nested(_KEY, version, "MetadataResponseBroker"),
                               request.session.listener),
        cluster_id=broker.image.cluster_id,
        controller_id=broker.image.controller_id,
        topics=tuple(entries),
        cluster_authorized_operations=cluster_operations(broker, request, want_cluster),
    )


def cluster_operations(broker: Broker, request: Request, wanted: bool) -> int:
    """The cluster's authorized-operations field (Metadata, DescribeCluster)."""
    authorizer = broker.authorizer
    if authorizer is None or not wanted:
        return authorized_operations(wanted, CLUSTER_OPERATIONS)
    return authorizer.authorized_operations(
        str(request.session.principal), request.client_host, ResourceType.CLUSTER,
        CLUSTER_NAME, _CLUSTER_ACL_OPERATIONS)


async def _auto_create(broker: Broker, name: str) -> TopicMetadata | None:
    if invalid_topic_reason(name):
        return None
    if name == OFFSETS_TOPIC:
        # Asked for before any group used it (tools do): as in Kafka it is created with
        # its own settings -- internal, compacted, offsets.topic.num.partitions -- since
        # the group coordinator would otherwise inherit a client's defaults for good.
        try:
            await broker.group_coordinator.store.ensure_topic()
        except StoreError as exc:
            log.info("auto-creating topic %r failed: %s", name, exc)
        return broker.image.topics.get(name)
    try:
        return await broker.controller.create_topic(name)
    except ControllerError as exc:
        log.info("auto-creating topic %r failed: %s", name, exc)
        return None
