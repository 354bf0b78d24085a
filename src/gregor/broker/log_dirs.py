"""DescribeLogDirs and AlterReplicaLogDirs: the partitions this broker keeps in its log
directory, each with its size on disk, as ``kafka-log-dirs.sh --describe`` and admin
clients' ``describe_log_dirs`` ask for them (the only way a Kafka client learns a topic's
size), and moves between directories, as ``kafka-reassign-partitions.sh`` asks for them.

gregor keeps every partition in one directory, the first of ``log.dirs``, so a replica
only ever "moves" to where it is, and none is a "future" one. The offset lag is Kafka's
for a current replica: how far the log end lags the high watermark, which it never does
here but for a follower truncated below it.
"""

from __future__ import annotations

import datetime
import os
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from gregor.broker.authorization import allowed
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation, ResourceType

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_KEY = ApiKey.DESCRIBE_LOG_DIRS


async def handle_describe(broker: Broker, request: Request):
    version = request.version
    if not allowed(broker, request, Operation.DESCRIBE, ResourceType.CLUSTER):
        return build(response_schema(_KEY, version), throttle_time=datetime.timedelta(0),
                     error_code=ErrorCode.cluster_authorization_failed, results=())
    hosted = broker.replica_manager.partitions
    asked = request.body.topics
    if asked is None:
        wanted = list(hosted)
    else:  # what is asked and hosted here, as Kafka leaves out the rest
        wanted = [(t.topic, index) for t in asked for index in t.partitions
                  if (t.topic, index) in hosted]
    by_topic: defaultdict[str, list] = defaultdict(list)
    partition_cls = nested(_KEY, version, "DescribeLogDirsPartition")
    for tp in sorted(set(wanted)):
        partition = hosted[tp]
        log = partition.log
        by_topic[tp[0]].append(build(
            partition_cls, partition_index=tp[1], partition_size=log.size,
            offset_lag=max(0, partition.high_watermark - log.log_end_offset),
            is_future_key=False))
    topic_cls = nested(_KEY, version, "DescribeLogDirsTopic")
    log_dir = _log_dir(broker)
    disk = os.statvfs(log_dir)
    result = build(nested(_KEY, version, "DescribeLogDirsResult"), error_code=ErrorCode.none,
                   log_dir=str(log_dir),
                   topics=tuple(build(topic_cls, name=name, partitions=tuple(partitions))
                                for name, partitions in by_topic.items()),
                   total_bytes=disk.f_blocks * disk.f_frsize,
                   usable_bytes=disk.f_bavail * disk.f_frsize)
    return build(response_schema(_KEY, version), throttle_time=datetime.timedelta(0),
                 error_code=ErrorCode.none, results=(result,))


async def handle_alter(broker: Broker, request: Request):
    """As Kafka: an unknown directory is LOG_DIR_NOT_FOUND, a partition not hosted here
    REPLICA_NOT_AVAILABLE, and one already in the directory asked for stays there."""
    key, version = ApiKey.ALTER_REPLICA_LOG_DIRS, request.version
    log_dir, hosted = _log_dir(broker), broker.replica_manager.partitions
    by_topic: defaultdict[str, list] = defaultdict(list)
    partition_cls = nested(key, version, "AlterReplicaLogDirPartitionResult")
    may_alter = allowed(broker, request, Operation.ALTER, ResourceType.CLUSTER)
    for moved in request.body.dirs:
        known = Path(moved.path).resolve() == log_dir
        for topic in moved.topics:
            for index in topic.partitions:
                error = (ErrorCode.cluster_authorization_failed if not may_alter
                         else ErrorCode.log_dir_not_found if not known
                         else ErrorCode.none if (topic.name, index) in hosted
                         else ErrorCode.replica_not_available)
                by_topic[topic.name].append(build(partition_cls, partition_index=index,
                                                  error_code=error))
    topic_cls = nested(key, version, "AlterReplicaLogDirTopicResult")
    return build(response_schema(key, version), throttle_time=datetime.timedelta(0),
                 results=tuple(build(topic_cls, topic_name=name, partitions=tuple(results))
                               for name, results in by_topic.items()))


def _log_dir(broker: Broker) -> Path:
    """The log directory as both APIs name it: its absolute path."""
    return broker.config.log_dir.resolve()
