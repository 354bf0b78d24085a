"""OffsetForLeaderEpoch: where a leader epoch ended in this leader's log.

A follower asks it before fetching from a new leader, and truncates its own log
there (KIP-101), instead of at its high watermark; librdkafka and the Java
consumer ask it after a leader change to detect records they read that the new
leader does not have (KIP-320).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.authorization import allowed, topic_allowed
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation, ResourceType

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
# replica_id -2 (the default of v3+) is a consumer's "debug" request, which Kafka
# serves from followers too; brokers and consumers both go to the leader here.


def _end_offset(broker: Broker, topic: str, wanted) -> dict:
    answer = {"partition": wanted.partition, "leader_epoch": -1, "end_offset": -1}
    partition = broker.replica_manager.get(topic, wanted.partition)
    if partition is None:
        return {**answer, "error_code": ErrorCode.unknown_topic_or_partition}
    current = wanted.current_leader_epoch
    if 0 <= current < partition.leader_epoch:
        return {**answer, "error_code": ErrorCode.fenced_leader_epoch}
    if current > partition.leader_epoch:
        return {**answer, "error_code": ErrorCode.unknown_leader_epoch}
    if not partition.is_leader:
        return {**answer, "error_code": ErrorCode.not_leader_or_follower}
    epoch, end = partition.log.leader_epoch_cache.end_offset_for(
        wanted.leader_epoch, partition.log_end_offset)
    return {**answer, "error_code": ErrorCode.none, "leader_epoch": epoch, "end_offset": end}


async def handle(broker: Broker, request: Request):
    version = request.version
    partition_cls = nested(_KEY, version, "EpochEndOffset")
    topic_cls = nested(_KEY, version, "OffsetForLeaderTopicResult")
    # Followers need CLUSTER_ACTION, consumers (replica id -2) DESCRIBE on the topic.
    follower = getattr(request.body, "replica_id", -1) >= 0
    topics = tuple(
        build(topic_cls, topic=topic.topic, partitions=tuple(
            build(partition_cls, **_end_offset(broker, topic.topic, wanted))
            if _allowed(broker, request, follower, topic.topic) else
            build(partition_cls, partition=wanted.partition, leader_epoch=-1, end_offset=-1,
                  error_code=ErrorCode.topic_authorization_failed)
            for wanted in topic.partitions))
        for topic in request.body.topics)
    return build(response_schema(_KEY, version), throttle_time=datetime.timedelta(0),
                 topics=topics)


def _allowed(broker: Broker, request: Request, follower: bool, topic: str) -> bool:
    if follower:
        return allowed(broker, request, Operation.CLUSTER_ACTION, ResourceType.CLUSTER)
    return topic_allowed(broker, request, Operation.DESCRIBE, topic)
