"""Metadata: brokers, controller and topic/partition leadership; auto-creates topics."""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING

from gregor.broker.request import Request
from gregor.cluster.controller import ControllerError
from gregor.cluster.metadata_image import TopicMetadata
from gregor.cluster.topic_names import invalid_topic_reason
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

log = logging.getLogger(__name__)

_KEY = ApiKey.METADATA
_UNKNOWN_OPERATIONS = -(2**31)


def broker_entries(broker: Broker, cls: type) -> tuple:
    host, port = broker.advertised_address
    return (build(cls, node_id=broker.broker_id, broker_id=broker.broker_id, host=host,
                  port=port, rack=None),)


def _topic_entry(broker: Broker, version: int, topic: TopicMetadata):
    partition_cls = nested(_KEY, version, "MetadataResponsePartition")
    partitions = []
    for index, assignment in enumerate(topic.partitions):
        partition = broker.replica_manager.get(topic.name, index)
        leader_epoch = partition.leader_epoch if partition else assignment.leader_epoch
        partitions.append(build(
            partition_cls, error_code=ErrorCode.none, partition_index=index,
            leader_id=assignment.leader, leader_epoch=leader_epoch,
            replica_nodes=tuple(assignment.replicas),
            isr_nodes=tuple(partition.isr if partition else assignment.isr),
            offline_replicas=()))
    return build(nested(_KEY, version, "MetadataResponseTopic"), error_code=ErrorCode.none,
                 name=topic.name, topic_id=topic.uuid, is_internal=topic.internal,
                 partitions=tuple(partitions), topic_authorized_operations=_UNKNOWN_OPERATIONS)


def _error_entry(version: int, name: str | None, error: ErrorCode):
    return build(nested(_KEY, version, "MetadataResponseTopic"), error_code=error, name=name,
                 topic_id=None, is_internal=False, partitions=(),
                 topic_authorized_operations=_UNKNOWN_OPERATIONS)


def _requested_names(broker: Broker, request: Request) -> list[str | None] | None:
    """Requested topic names, or None for "all topics" (null in v1+, empty in v0)."""
    topics = request.body.topics
    if topics is None or (request.version == 0 and not topics):
        return None
    by_id = {t.uuid: t.name for t in broker.image.topics.values()}
    names: list[str | None] = []
    for topic in topics:
        name = topic.name
        if name is None and getattr(topic, "topic_id", None) is not None:
            name = by_id.get(topic.topic_id)
        names.append(name)
    return names


async def handle(broker: Broker, request: Request):
    version = request.version
    names = _requested_names(broker, request)
    allow_auto_create = getattr(request.body, "allow_auto_topic_creation", True) and (
        broker.config["auto.create.topics.enable"])
    entries = []
    if names is None:
        entries = [_topic_entry(broker, version, t) for t in broker.image.topics.values()]
    else:
        for name in names:
            topic = broker.image.topics.get(name) if name is not None else None
            if topic is None and name is not None and allow_auto_create:
                topic = _auto_create(broker, name)
            if topic is not None:
                entries.append(_topic_entry(broker, version, topic))
            elif name is not None and invalid_topic_reason(name):
                entries.append(_error_entry(version, name, ErrorCode.invalid_topic_exception))
            else:
                entries.append(_error_entry(version, name, ErrorCode.unknown_topic_or_partition))
    return build(
        response_schema(_KEY, version),
        throttle_time=datetime.timedelta(0),
        brokers=broker_entries(broker, nested(_KEY, version, "MetadataResponseBroker")),
        cluster_id=broker.image.cluster_id,
        controller_id=broker.broker_id,
        topics=tuple(entries),
        cluster_authorized_operations=_UNKNOWN_OPERATIONS,
    )


def _auto_create(broker: Broker, name: str) -> TopicMetadata | None:
    if invalid_topic_reason(name):
        return None
    try:
        return broker.controller.create_topic(name)
    except ControllerError as exc:
        log.info("auto-creating topic %r failed: %s", name, exc)
        return None
