"""CreateTopics, DeleteTopics and CreatePartitions: topic administration via the controller.

Under ``controller_mutation_rate`` (KIP-599) each created or deleted partition is recorded
against the client's token bucket as it is made; from CreateTopics v6, CreatePartitions
v3 and DeleteTopics v5 on, a topic is refused with THROTTLING_QUOTA_EXCEEDED while the
client owes mutations (the one that goes over is still made, as in Kafka), and older
versions are served and only throttled (:mod:`gregor.broker.throttling` sets the answer's
``throttle_time_ms`` and holds the connection).
"""

from __future__ import annotations

import asyncio
import datetime
from collections import Counter
from typing import TYPE_CHECKING

from gregor.broker.authorization import may_create_topic, topic_allowed
from gregor.broker.configs import describe_topic_configs
from gregor.broker.request import Request
from gregor.broker.throttling import MUTATIONS
from gregor.cluster.controller import ControllerError
from gregor.cluster.metadata_image import TopicMetadata
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_module, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_NO_THROTTLE = datetime.timedelta(0)
_DENIED = "Authorization failed."
_OVER_QUOTA = "The throttling quota has been exceeded."


def _refuse_over_quota(request: Request, key: ApiKey) -> None:
    """KIP-599's strict quota: a topic is refused while the client owes mutations."""
    quota = request.mutation_quota
    if quota is not None and request.version >= MUTATIONS[key] and quota.exceeded(_now_ms()):
        raise ControllerError(ErrorCode.throttling_quota_exceeded, _OVER_QUOTA)


def _mutated(request: Request, partitions: int) -> None:
    quota = request.mutation_quota
    if quota is not None and partitions > 0:
        quota.record(partitions, _now_ms())


def _now_ms() -> float:
    """The clock the connection's quotas are measured by."""
    return asyncio.get_running_loop().time() * 1000


async def _create_topic(broker: Broker, topic, validate_only: bool) -> TopicMetadata:
    """Create one CreateTopics entry through the controller (or only validate it),
    with the replica assignment it names, if any."""
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    assignment = None
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise ControllerError(ErrorCode.invalid_request, "a replica assignment was given "
                                  "together with a partition count or replication factor")
        ordered = sorted(topic.assignments, key=lambda a: a.partition_index)
        if [a.partition_index for a in ordered] != list(range(len(ordered))):
            raise ControllerError(ErrorCode.invalid_replica_assignment,
                                  "assigned partitions must be numbered 0, 1, 2, ...")
        assignment = [tuple(a.broker_ids) for a in ordered]
    return await broker.controller.create_topic(topic.name, topic.num_partitions,
                                                topic.replication_factor, configs,
                                                assignment=assignment,
                                                validate_only=validate_only)


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
            if not may_create_topic(broker, request, topic.name):
                raise ControllerError(ErrorCode.topic_authorization_failed, _DENIED)
            _refuse_over_quota(request, key)
            created = await _create_topic(broker, topic, request.body.validate_only)
            if not request.body.validate_only:
                _mutated(request, len(created.partitions))
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
        elif not topic_allowed(broker, request, Operation.DELETE, name):
            error, message = ErrorCode.topic_authorization_failed, _DENIED
        else:
            try:
                _refuse_over_quota(request, key)
                deleted = await broker.controller.delete_topic(
                    name, body.timeout.total_seconds())
                topic_id = deleted.uuid
                _mutated(request, len(deleted.partitions))
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
        # An empty list is no assignment, as kafka-python before 3.0.10 sends it.
        assignment = [tuple(a.broker_ids) for a in topic.assignments or ()] or None
        try:
            if not topic_allowed(broker, request, Operation.ALTER, topic.name):
                raise ControllerError(ErrorCode.topic_authorization_failed, _DENIED)
            _refuse_over_quota(request, key)
            existing = broker.image.topics.get(topic.name)
            before = len(existing.partitions) if existing is not None else topic.count
            await broker.controller.create_partitions(topic.name, topic.count, assignment,
                                                      validate_only=request.body.validate_only)
            if not request.body.validate_only:
                _mutated(request, topic.count - before)
        except ControllerError as exc:
            error, message = exc.error, str(exc)
        results.append(build(result_cls, name=topic.name, error_code=error,
                             error_message=message))
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 results=tuple(results))
