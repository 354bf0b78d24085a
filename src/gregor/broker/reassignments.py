"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455): moving
partitions' replicas between brokers, as ``kafka-reassign-partitions.sh``, admin
clients' ``alter_partition_reassignments`` and ``gregor cluster reassign`` ask for it.

Clients send both to the controller; another broker answers NOT_CONTROLLER, as
Kafka's does. The controller's part is ``cluster.reassignment``. Alone, the broker
is every partition's only possible replica: a move to itself needs nothing, any
other is INVALID_REPLICA_ASSIGNMENT, and none is ever in progress.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import TYPE_CHECKING

from gregor.broker.authorization import allowed
from gregor.broker.request import Request
from gregor.cluster.reassignment import OK, Ongoing, Result, TopicPartition
from gregor.cluster.zk_controller import NotController
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation, ResourceType

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_ALTER = ApiKey.ALTER_PARTITION_REASSIGNMENTS
_LIST = ApiKey.LIST_PARTITION_REASSIGNMENTS
_NO_THROTTLE = datetime.timedelta(0)


def _not_controller(broker: Broker) -> str:
    return f"broker {broker.broker_id} is not the controller"


async def handle_alter(broker: Broker, request: Request):
    version, body = request.version, request.body
    schema = response_schema(_ALTER, version)
    extra = {"allow_replication_factor_change": body.allow_replication_factor_change} \
        if version >= 1 else {}
    targets = {(t.name, p.partition_index): None if p.replicas is None else tuple(p.replicas)
               for t in body.topics for p in t.partitions}
    error, message = ErrorCode.none, None
    results: dict[TopicPartition, Result] = {}
    if not allowed(broker, request, Operation.ALTER, ResourceType.CLUSTER):
        error = ErrorCode.cluster_authorization_failed
    elif broker.cluster is None:
        results = {tp: _alone(broker, tp, target) for tp, target in targets.items()}
    elif not broker.cluster.controller.is_active:
        error, message = ErrorCode.not_controller, _not_controller(broker)
    else:
        controller = broker.cluster.controller
        try:
            results = await controller.reassignments.alter(
                targets, allow_replication_factor_change=extra.get(
                    "allow_replication_factor_change", True))
        except NotController:
            controller.resign()
            error, message, results = ErrorCode.not_controller, _not_controller(broker), {}
    if error != ErrorCode.none:
        results = {}  # a top-level error alone, as Kafka answers it
    by_topic: defaultdict[str, list] = defaultdict(list)
    partition_cls = nested(_ALTER, version, "ReassignablePartitionResponse")
    for (topic, index), (code, text) in results.items():
        by_topic[topic].append(build(partition_cls, partition_index=index, error_code=code,
                                     error_message=text))
    topic_cls = nested(_ALTER, version, "ReassignableTopicResponse")
    return build(schema, throttle_time=_NO_THROTTLE, error_code=error, error_message=message,
                 responses=tuple(build(topic_cls, name=topic, partitions=tuple(partitions))
                                 for topic, partitions in by_topic.items()), **extra)


def _alone(broker: Broker, tp: TopicPartition, target: tuple[int, ...] | None) -> Result:
    if broker.image.partition(*tp) is None:
        return ErrorCode.unknown_topic_or_partition, "The partition does not exist."
    if target is None:
        return ErrorCode.no_reassignment_in_progress, "no reassignment is in progress"
    if target != (broker.broker_id,):
        return (ErrorCode.invalid_replica_assignment,
                f"Replica(s) {[r for r in target if r != broker.broker_id]} are not live "
                "brokers")
    return OK


async def handle_list(broker: Broker, request: Request):
    version, body = request.version, request.body
    schema = response_schema(_LIST, version)
    if not allowed(broker, request, Operation.DESCRIBE, ResourceType.CLUSTER):
        return build(schema, throttle_time=_NO_THROTTLE,
                     error_code=ErrorCode.cluster_authorization_failed, error_message=None,
                     topics=())
    ongoing: dict[TopicPartition, Ongoing] = {}
    if broker.cluster is not None:
        if not broker.cluster.controller.is_active:
            return build(schema, throttle_time=_NO_THROTTLE, error_code=ErrorCode.not_controller,
                         error_message=_not_controller(broker), topics=())
        asked = None if body.topics is None else [
            (t.name, index) for t in body.topics for index in t.partition_indexes]
        ongoing = broker.cluster.controller.reassignments.list(asked)
    by_topic: defaultdict[str, list] = defaultdict(list)
    partition_cls = nested(_LIST, version, "OngoingPartitionReassignment")
    for (topic, index), reassignment in sorted(ongoing.items()):
        by_topic[topic].append(build(
            partition_cls, partition_index=index, replicas=reassignment.replicas,
            adding_replicas=reassignment.adding, removing_replicas=reassignment.removing))
    topic_cls = nested(_LIST, version, "OngoingTopicReassignment")
    return build(schema, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none,
                 error_message=None,
                 topics=tuple(build(topic_cls, name=topic, partitions=tuple(partitions))
                              for topic, partitions in by_topic.items()))
