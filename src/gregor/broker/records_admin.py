"""DeleteRecords: move partitions' log start offsets forward.

The answer goes out once the new log start offsets are on disk (written off the event
loop), so that deleted records cannot come back after a crash.
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

_KEY = ApiKey.DELETE_RECORDS
_TO_HIGH_WATERMARK = -1


async def handle(broker: Broker, request: Request):
    version = request.version
    partition_cls = nested(_KEY, version, "DeleteRecordsPartitionResult")
    topic_cls = nested(_KEY, version, "DeleteRecordsTopicResult")
    topics = []
    moved = False
    for topic in request.body.topics:
        results = []
        for item in topic.partitions:
            partition = broker.replica_manager.get(topic.name, item.partition_index)
            error, low_watermark = ErrorCode.none, -1
            if not topic_allowed(broker, request, Operation.DELETE, topic.name):
                error = ErrorCode.topic_authorization_failed
            elif partition is None:
                error = ErrorCode.unknown_topic_or_partition
            else:
                target = (partition.high_watermark if item.offset == _TO_HIGH_WATERMARK
                          else item.offset)
                if target < 0 or target > partition.high_watermark:
                    error = ErrorCode.offset_out_of_range
                else:
                    if partition.log.advance_log_start_offset(target):
                        moved = True
                        broker.replica_manager.notify((topic.name, item.partition_index))
                    low_watermark = partition.log_start_offset
            results.append(build(partition_cls, partition_index=item.partition_index,
                                 low_watermark=low_watermark, error_code=error))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(results)))
    if moved:
        await broker.log_manager.log_starts_written()
    return build(response_schema(_KEY, version), throttle_time=datetime.timedelta(0),
                 topics=tuple(topics))
