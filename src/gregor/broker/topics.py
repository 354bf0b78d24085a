"""CreateTopics, DeleteTopics and CreatePartitions: topic administration via the controller."""

from __future__ import annotations

import datetime
from collections import Counter
from typing import TYPE_CHECKING

from gregor.broker.configs import describe_topic_configs
from gregor.broker.request import Request
from gregor.cluster.controller import ControllerError
from gregor.cluster.metadata_image import TopicMetadata
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_module, response_schema
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_NO_THROTTLE = datetime.timedelta(0)


def _create_topic(broker: Broker, topic, validate_only: bool) -> TopicMetadata:
    """Create one CreateTopics entry through the controller (or only validate it).

    A manual replica assignment is accepted when it is the placement the controller
    would choose itself (on one broker, the only possible one); any other placement
    would be silently different from what was asked, so it is refused.
    """
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    if not topic.assignments:
        return broker.controller.create_topic(topic.name, topic.num_partitions,
                                              topic.replication_factor, configs,
                                              validate_only=validate_only)
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        raise ControllerError(ErrorCode.invalid_request, "a replica assignment was given "
                              "together with a partition count or replication factor")
    assignments = sorted(topic.assignments, key=lambda a: a.partition_index)
    if [a.partition_index for a in assignments] != list(range(len(assignments))):
        raise ControllerError(ErrorCode.invalid_replica_assignment,
                              "assigned partitions must be numbered 0, 1, 2, ...")
    wanted = [list(a.broker_ids) for a in assignments]
    planned = broker.controller.create_topic(topic.name, len(wanted), len(wanted[0]), configs,
                                             validate_only=True)
    if [p.replicas for p in planned.partitions] != wanted:
        raise ControllerError(
            ErrorCode.invalid_replica_assignment,
            f"only the controller's own placement can be requested: "
            f"{[p.replicas for p in planned.partitions]}")
    return planned if validate_only else broker.controller.create_topic(
        topic.name, len(wanted), len(wanted[0]), configs)


async def handle_create_topics(broker: Broker, request: Request):
    version = request.version
    key = ApiKey.CREATE_TOPICS
    result_cls = nested(key, version, "CreatableTopicResult")
    # v5+ echo the resulting configs back.
    config_cls = getattr(response_module(key, version), "CreatableTopicConfigs", None)
    # As in Kafka, a name listed twice is refused everywhere it appears.
    listed = Counter(topic.name for topic in request.body.topics)
    results = []
    for topic in request.body.topics:
        error, message, created = ErrorCode.none, None, None
        try:
            if listed[topic.name] > 1:
                raise ControllerError(ErrorCode.invalid_request,
                                      "topic listed more than once in one request")
            created = _create_topic(broker, topic, request.body.validate_only)
        except ControllerError as exc:
            error, message = exc.error, str(exc)
        configs = None
        if created is not None and config_cls is not None:
            configs = tuple(
                build(config_cls, name=e.name, value=e.value, read_only=e.read_only,
                      config_source=e.config_source, is_sensitive=False)
                for e in describe_topic_configs(broker, created.configs, None))
        results.append(build(
            result_cls, name=topic.name,
            topic_id=created.uuid if created is not None else None,
            error_code=error, error_message=message,
            num_partitions=len(created.partitions) if created else -1,
            replication_factor=len(created.partitions[0].replicas) if created else -1,
            configs=configs))
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE, topics=tuple(results))


async def handle_delete_topics(broker: Broker, request: Request):
    version = request.version
    key = ApiKey.DELETE_TOPICS
    result_cls = nested(key, version, "DeletableTopicResult")
    body = request.body
    if hasattr(body, "topic_names"):
        wanted = [(name, None) for name in body.topic_names]
    else:
        by_id = {t.uuid: t.name for t in broker.image.topics.values()}
        wanted = [(t.name if t.name is not None else by_id.get(t.topic_id), t.topic_id)
                  for t in body.topics]
    results = []
    for name, topic_id in wanted:
        error, message = ErrorCode.none, None
        if name is None:
            error, message = ErrorCode.unknown_topic_id, f"unknown topic id {topic_id}"
        else:
            try:
                deleted = broker.controller.delete_topic(name)
                topic_id = deleted.uuid
            except ControllerError as exc:
                error, message = exc.error, str(exc)
        results.append(build(result_cls, name=name, topic_id=topic_id, error_code=error,
                             error_message=message))
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 responses=tuple(results))


async def handle_create_partitions(broker: Broker, request: Request):
    version = request.version
    key = ApiKey.CREATE_PARTITIONS
    result_cls = nested(key, version, "CreatePartitionsTopicResult")
    results = []
    for topic in request.body.topics:
        error, message = ErrorCode.none, None
        try:
            if topic.assignments:
                raise ControllerError(ErrorCode.invalid_replica_assignment,
                                      "manual replica assignment is not supported")
            broker.controller.create_partitions(topic.name, topic.count,
                                                validate_only=request.body.validate_only)
        except ControllerError as exc:
            error, message = exc.error, str(exc)
        results.append(build(result_cls, name=topic.name, error_code=error,
                             error_message=message))
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 results=tuple(results))
