"""DescribeLogDirs and AlterReplicaLogDirs: each of this broker's log directories with
the partitions it keeps there and their sizes on disk, as ``kafka-log-dirs.sh
--describe`` and admin clients' ``describe_log_dirs`` ask for them (the only way a
Kafka client learns a topic's size), and moves between directories, as
``kafka-reassign-partitions.sh`` asks for them with a plan's ``log_dirs``.

As in Kafka: an offline directory (KIP-112) is answered KAFKA_STORAGE_ERROR; a replica
moving shows twice, in its current directory and, as a *future* replica, in its
destination, whose offset lag is how far the copy is behind the current log; a current
replica's lag is how far its log end is below the high watermark (only for a follower
truncated below it).
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
from gregor.storage.log_manager import LogDir

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_KEY = ApiKey.DESCRIBE_LOG_DIRS


async def handle_describe(broker: Broker, request: Request):
    version = request.version
    if not allowed(broker, request, Operation.DESCRIBE, ResourceType.CLUSTER):
        return build(response_schema(_KEY, version), throttle_time=datetime.timedelta(0),
                     error_code=ErrorCode.cluster_authorization_failed, results=())
    manager = broker.log_manager
    asked = request.body.topics
    wanted = None if asked is None else {(t.topic, index) for t in asked
                                         for index in t.partitions}
    results = tuple(_describe_dir(broker, d, version, wanted) for d in manager.dirs.values())
    return build(response_schema(_KEY, version), throttle_time=datetime.timedelta(0),
                 error_code=ErrorCode.none, results=results)


def _describe_dir(broker: Broker, d: LogDir, version: int,
                  wanted: set[tuple[str, int]] | None):
    result_cls = nested(_KEY, version, "DescribeLogDirsResult")
    if not d.online:
        return build(result_cls, error_code=ErrorCode.kafka_storage_error, log_dir=str(d.path),
                     topics=(), total_bytes=-1, usable_bytes=-1)
    manager, hosted = broker.log_manager, broker.replica_manager.partitions
    by_topic: defaultdict[str, list] = defaultdict(list)
    partition_cls = nested(_KEY, version, "DescribeLogDirsPartition")
    for logs, future in ((manager.logs, False), (manager.futures, True)):
        for tp, lg in sorted(logs.items()):
            if manager.dir_of(lg) != d.path or (wanted is not None and tp not in wanted):
                continue
            partition = hosted.get(tp)
            if partition is None:
                lag = -1
            elif future:
                lag = max(0, partition.log_end_offset - lg.log_end_offset)
            else:
                lag = max(0, partition.high_watermark - lg.log_end_offset)
            by_topic[tp[0]].append(build(partition_cls, partition_index=tp[1],
                                         partition_size=lg.size, offset_lag=lag,
                                         is_future_key=future))
    topic_cls = nested(_KEY, version, "DescribeLogDirsTopic")
    try:
        disk = os.statvfs(d.path)
        total, usable = disk.f_blocks * disk.f_frsize, disk.f_bavail * disk.f_frsize
    except OSError:
        total = usable = -1
    return build(result_cls, error_code=ErrorCode.none, log_dir=str(d.path),
                 topics=tuple(build(topic_cls, name=name, partitions=tuple(partitions))
                              for name, partitions in by_topic.items()),
                 total_bytes=total, usable_bytes=usable)


async def handle_alter(broker: Broker, request: Request):
    """Each partition's answer is ``ReplicaManager.alter_log_dir``'s, Kafka's rules."""
    key, version = ApiKey.ALTER_REPLICA_LOG_DIRS, request.version
    by_topic: defaultdict[str, list] = defaultdict(list)
    partition_cls = nested(key, version, "AlterReplicaLogDirPartitionResult")
    may_alter = allowed(broker, request, Operation.ALTER, ResourceType.CLUSTER)
    for moved in request.body.dirs:
        destination = _directory(moved.path)
        for topic in moved.topics:
            for index in topic.partitions:
                error = (ErrorCode.cluster_authorization_failed if not may_alter
                         else ErrorCode.log_dir_not_found if destination is None
                         else broker.replica_manager.alter_log_dir((topic.name, index),
                                                                   destination))
                by_topic[topic.name].append(build(partition_cls, partition_index=index,
                                                  error_code=error))
    topic_cls = nested(key, version, "AlterReplicaLogDirTopicResult")
    return build(response_schema(key, version), throttle_time=datetime.timedelta(0),
                 results=tuple(build(topic_cls, topic_name=name, partitions=tuple(results))
                               for name, results in by_topic.items()))


def _directory(path: str) -> Path | None:
    """The absolute directory a client named; None for a path no directory can have
    (an embedded NUL byte)."""
    try:
        return Path(path).resolve()
    except (ValueError, OSError):
        return None
