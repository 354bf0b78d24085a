"""Fetch: serve record batches from segment files, long-polling when too little is ready.

Record bytes are never loaded or parsed: each partition's answer is a file region
that the connection sends with ``sendfile``. A fetch that finds fewer than
``min_bytes`` parks in the replica manager's purgatory until an append wakes it
or ``max_wait_ms`` passes, and it always answers by then.

Followers fetch with their broker id as ``replica_id``: they read up to the
leader's log end rather than its high watermark, and the offset they fetch from
is how the leader learns how far each one is (which moves the high watermark and
the ISR).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from gregor.broker.request import RawResponse, Request
from gregor.protocol.errors import ErrorCode
from gregor.protocol.fetch_response import FetchedPartition, encode_fetch_response
from gregor.storage.log import OffsetOutOfRange

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

# KIP-227 fetch sessions are optional for a broker: answering session id 0 tells
# the client none was created, and it keeps sending full fetch requests. A request
# is a full fetch when its epoch is INITIAL (0, "open a session") or FINAL (-1,
# "close it, or use none"), whatever session id it names; any other epoch is an
# incremental fetch in a session this broker cannot know.
_NO_SESSION = 0
_FULL_FETCH_EPOCHS = (-1, 0)


def _read_partitions(broker: Broker, request: Request, replica_id: int) -> tuple[list, int]:
    """Build every partition's answer; return it with the number of record bytes found."""
    body = request.body
    budget = body.max_bytes
    total = 0
    topics = []
    for topic in body.topics:
        partitions = []
        for wanted in topic.partitions:
            answer, size = _read_partition(broker, topic.topic, wanted, budget, replica_id,
                                           first=total == 0)
            budget -= size
            total += size
            partitions.append(answer)
        topics.append((topic.topic, partitions))
    return topics, total


def _read_partition(broker: Broker, topic: str, wanted, budget: int, replica_id: int,
                    first: bool) -> tuple[FetchedPartition, int]:
    partition = broker.replica_manager.get(topic, wanted.partition)
    if partition is None:
        return FetchedPartition(wanted.partition, ErrorCode.unknown_topic_or_partition,
                                -1, -1, -1, None), 0
    start = partition.log_start_offset
    requested_epoch = getattr(wanted, "current_leader_epoch", -1)
    error = None
    if 0 <= requested_epoch != partition.leader_epoch:
        error = (ErrorCode.fenced_leader_epoch if requested_epoch < partition.leader_epoch
                 else ErrorCode.unknown_leader_epoch)
    elif not partition.is_leader:
        error = ErrorCode.not_leader_or_follower
    elif replica_id >= 0:
        broker.replica_manager.record_follower_fetch(partition, replica_id, wanted.fetch_offset)
    hw = partition.high_watermark
    if error is not None:
        return FetchedPartition(wanted.partition, error, hw, hw, start, None), 0
    max_bytes = min(wanted.partition_max_bytes, max(budget, 0))
    try:
        # KIP-74: the first partition with data returns at least one whole batch even
        # if it is larger than the limits, so a consumer can never get stuck.
        region = partition.log.read(wanted.fetch_offset, max_bytes,
                                    max_offset=None if replica_id >= 0 else hw,
                                    min_one_batch=first)
    except OffsetOutOfRange:
        return FetchedPartition(wanted.partition, ErrorCode.offset_out_of_range,
                                hw, hw, start, None), 0
    size = region.length if region is not None else 0
    return FetchedPartition(wanted.partition, ErrorCode.none, hw, hw, start, region), size


async def handle(broker: Broker, request: Request):
    body = request.body
    version = request.version
    if getattr(body, "session_epoch", -1) not in _FULL_FETCH_EPOCHS:
        chunks = encode_fetch_response(version, request.header.correlation_id, 0,
                                       ErrorCode.fetch_session_id_not_found, _NO_SESSION, [])
        return RawResponse(chunks)

    deadline = time.monotonic() + body.max_wait.total_seconds()
    # As in Kafka, min_bytes <= 0 asks for an immediate answer, even an empty one.
    min_bytes = body.min_bytes
    watched = [(t.topic, p.partition) for t in body.topics for p in t.partitions]
    replica_id = getattr(body, "replica_id", -1)
    while True:
        topics, total = _read_partitions(broker, request, replica_id)
        remaining = deadline - time.monotonic()
        has_error = any(p.error_code for _, parts in topics for p in parts)
        if total >= min_bytes or has_error or remaining <= 0 or not watched:
            break
        await broker.replica_manager.wait_for_data(watched, remaining)
    return RawResponse(encode_fetch_response(version, request.header.correlation_id, 0,
                                             ErrorCode.none, _NO_SESSION, topics))
