"""ListOffsets: earliest, latest, max-timestamp and by-timestamp offset lookups.

At read_committed (isolation level 1) the log ends, for these lookups, at the last
stable offset rather than the high watermark, as a read_committed fetch does.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.authorization import topic_allowed
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation

if TYPE_CHECKING:
    from gregor.broker.broker import Broker
    from gregor.cluster.partition import Partition

_KEY = ApiKey.LIST_OFFSETS
# Kafka's replica id for tools that may read any replica's offsets; clients send -1
# and are answered by the leader only (its high watermark is the one that counts).
DEBUGGING_REPLICA_ID = -2
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
READ_COMMITTED = 1


def lookup(partition: Partition, timestamp: int, read_committed: bool = False
           ) -> tuple[int, int]:
    """``(offset, timestamp)`` answering one ListOffsets query, (-1, -1) if nothing matches."""
    end = partition.high_watermark
    if read_committed:
        end = partition.log.last_stable_offset(end)
    if timestamp == LATEST:
        return end, -1
    if timestamp == EARLIEST:
        return partition.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        found = partition.log.max_timestamp_offset()
    else:
        found = partition.log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= end:
        return -1, -1
    return found


async def handle(broker: Broker, request: Request):
    version = request.version
    partition_cls = nested(_KEY, version, "ListOffsetsPartitionResponse")
    topic_cls = nested(_KEY, version, "ListOffsetsTopicResponse")
    topics = []
    read_committed = getattr(request.body, "isolation_level", 0) == READ_COMMITTED
    leader_only = getattr(request.body, "replica_id", -1) != DEBUGGING_REPLICA_ID
    for topic in request.body.topics:
        partitions = []
        described = topic_allowed(broker, request, Operation.DESCRIBE, topic.name)
        for query in topic.partitions:
            partition = broker.replica_manager.get(topic.name, query.partition_index)
            error, offset, timestamp, epoch = ErrorCode.none, -1, -1, -1
            requested_epoch = getattr(query, "current_leader_epoch", -1)
            if not described:
                error = ErrorCode.topic_authorization_failed
            elif partition is None:
                error = broker.replica_manager.missing_error(topic.name, query.partition_index)
            elif 0 <= requested_epoch != partition.leader_epoch:
                error = (ErrorCode.fenced_leader_epoch
                         if requested_epoch < partition.leader_epoch
                         else ErrorCode.unknown_leader_epoch)
            elif leader_only and not partition.is_leader:
                error = ErrorCode.not_leader_or_follower
            else:
                offset, timestamp = lookup(partition, query.timestamp, read_committed)
                epoch = partition.leader_epoch
            partitions.append(build(partition_cls, partition_index=query.partition_index,
                                    error_code=error, timestamp=timestamp, offset=offset,
                                    leader_epoch=epoch))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(partitions)))
    return build(response_schema(_KEY, version), throttle_time=datetime.timedelta(0),
                 topics=tuple(topics))
