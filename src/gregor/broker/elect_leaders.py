"""ElectLeaders (KIP-460): preferred or unclean leader elections an admin asks for, as
``kafka-leader-election.sh`` and admin clients' ``elect_leaders`` send them.

In a cluster the active controller decides and writes them (``ZkController.elect_leaders``)
and any other broker answers NOT_CONTROLLER, as clients send the request to the
controller. Alone, the broker leads every partition, so no election is ever needed.
Asked for every partition (a null list), the answer leaves out those that needed none,
as Kafka's does.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import TYPE_CHECKING

from gregor.broker.authorization import allowed
from gregor.broker.request import Request
from gregor.cluster.election import PREFERRED
from gregor.cluster.zk_controller import UNKNOWN_PARTITION, ElectionResult, NotController
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation, ResourceType

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_KEY = ApiKey.ELECT_LEADERS


async def handle(broker: Broker, request: Request):
    version, body = request.version, request.body
    election_type = getattr(body, "election_type", PREFERRED)  # v0: preferred only
    asked = None if body.topic_partitions is None else [
        (t.topic, index) for t in body.topic_partitions for index in t.partitions]
    if not allowed(broker, request, Operation.ALTER, ResourceType.CLUSTER):
        return build(response_schema(_KEY, version), throttle_time=datetime.timedelta(0),
                     error_code=ErrorCode.cluster_authorization_failed,
                     replica_election_results=())
    if broker.cluster is not None:
        controller = broker.cluster.controller
        try:
            results = await controller.elect_leaders(election_type, asked,
                                                     body.timeout.total_seconds())
        except NotController:
            controller.resign()
            results = dict.fromkeys(asked or [], (ErrorCode.not_controller, None))
    else:
        results = {tp: _alone(broker, tp) for tp in asked or []}
    if asked is None:
        results = {tp: r for tp, r in results.items() if r[0] != ErrorCode.election_not_needed}
    by_topic: defaultdict[str, list] = defaultdict(list)
    partition_cls = nested(_KEY, version, "PartitionResult")
    for (topic, index), (error, message) in results.items():
        by_topic[topic].append(build(partition_cls, partition_id=index, error_code=error,
                                     error_message=message))
    topic_cls = nested(_KEY, version, "ReplicaElectionResult")
    return build(response_schema(_KEY, version), throttle_time=datetime.timedelta(0),
                 error_code=ErrorCode.none,
                 replica_election_results=tuple(
                     build(topic_cls, topic=topic, partition_result=tuple(partitions))
                     for topic, partitions in by_topic.items()))


def _alone(broker: Broker, tp: tuple[str, int]) -> ElectionResult:
    if broker.image.partition(*tp) is None:
        return UNKNOWN_PARTITION
    return ErrorCode.election_not_needed, None
