"""Fetch: serve record batches from segment files, long-polling when too little is ready.

Record bytes are never loaded or parsed: each partition's answer is a file region
that the connection sends with ``sendfile``. A fetch that finds fewer than
``min_bytes`` parks in the replica manager's purgatory until an append wakes it
or ``max_wait_ms`` passes, and it always answers by then.

Followers fetch with their broker id as ``replica_id``: they read up to the
leader's log end rather than its high watermark, and the offset they fetch from
is how the leader learns how far each one is (which moves the high watermark and
the ISR). A consumer fetching at read_committed reads up to the last stable
offset instead, and gets the transactions aborted in what it reads, whose
records it drops itself. A fetch naming the epoch of its last fetched records (v12+) whose log
parts from the leader's before its fetch offset gets no records but the
diverging epoch, where the fetcher truncates (KIP-320/595).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from gregor.broker.authorization import may_fetch
from gregor.broker.request import RawResponse, Request
from gregor.metrics.broker_metrics import NONE
from gregor.protocol.errors import ErrorCode
from gregor.protocol.fetch_response import FetchedPartition, encode_fetch_response
from gregor.storage.log import OffsetOutOfRange

if TYPE_CHECKING:
    from gregor.broker.broker import Broker
    from gregor.cluster.partition import Partition

# KIP-227 fetch sessions are optional for a broker: answering session id 0 tells
# the client none was created, and it keeps sending full fetch requests. A request
# is a full fetch when its epoch is INITIAL (0, "open a session") or FINAL (-1,
# "close it, or use none"), whatever session id it names; any other epoch is an
# incremental fetch in a session this broker cannot know.
_NO_SESSION = 0
_FULL_FETCH_EPOCHS = (-1, 0)
READ_COMMITTED = 1


def _read_partitions(broker: Broker, request: Request, replica_id: int,
                     record_fetch: bool) -> tuple[list, int, bool]:
    """Build every partition's answer; return it with the number of record bytes found
    and whether one must be answered at once (an error, a diverging epoch)."""
    body = request.body
    budget = body.max_bytes
    read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    total = 0
    urgent = False
    topics = []
    for topic in body.topics:
        if broker.authorizer is not None and not may_fetch(broker, request, replica_id,
                                                           topic.topic):
            urgent = True
            topics.append((topic.topic, [FetchedPartition(
                wanted.partition, ErrorCode.topic_authorization_failed, -1, -1, -1, None)
                for wanted in topic.partitions]))
            continue
        partitions = []
        for wanted in topic.partitions:
            answer, size = _read_partition(broker, topic.topic, wanted, budget, replica_id,
                                           first=total == 0, record_fetch=record_fetch,
                                           read_committed=read_committed)
            budget -= size
            total += size
            urgent = urgent or answer.error_code != ErrorCode.none or (
                answer.diverging_epoch is not None)
            partitions.append(answer)
        topics.append((topic.topic, partitions))
    return topics, total, urgent


def _refusal(partition: Partition, wanted, replica_id: int) -> ErrorCode | None:
    """Why this partition cannot be read by this fetcher, as Kafka checks it."""
    requested_epoch = getattr(wanted, "current_leader_epoch", -1)
    if 0 <= requested_epoch != partition.leader_epoch:
        return (ErrorCode.fenced_leader_epoch if requested_epoch < partition.leader_epoch
                else ErrorCode.unknown_leader_epoch)
    if not partition.is_leader:
        return ErrorCode.not_leader_or_follower
    if replica_id >= 0 and not partition.is_replica(replica_id):
        # A broker this leader does not count as a replica (yet): with an epoch in the
        # request, Kafka says the pair is not recognised, and the broker retries.
        return (ErrorCode.unknown_leader_epoch if requested_epoch >= 0
                else ErrorCode.not_leader_or_follower)
    return None


def _read_partition(broker: Broker, topic: str, wanted, budget: int, replica_id: int,
                    first: bool, record_fetch: bool, read_committed: bool
                    ) -> tuple[FetchedPartition, int]:
    partition = broker.replica_manager.get(topic, wanted.partition)
    if partition is None:
        return FetchedPartition(wanted.partition, ErrorCode.unknown_topic_or_partition,
                                -1, -1, -1, None), 0
    start = partition.log_start_offset
    error = _refusal(partition, wanted, replica_id)
    if error is not None:
        hw = partition.high_watermark
        return FetchedPartition(wanted.partition, error, hw, hw, start, None), 0
    fetch_offset = wanted.fetch_offset
    # The log end before the read: appends after it do not keep a follower from
    # counting as caught up (Kafka's readRecords).
    leader_end = partition.log_end_offset
    last_fetched_epoch = getattr(wanted, "last_fetched_epoch", -1)
    hw = partition.high_watermark
    lso = partition.log.last_stable_offset(hw)
    committed_only = replica_id < 0 and read_committed
    max_bytes = min(wanted.partition_max_bytes, max(budget, 0))
    try:
        if last_fetched_epoch >= 0:
            diverging = partition.diverging_epoch(last_fetched_epoch, fetch_offset)
            if diverging is not None:
                # Nothing is sent, and the fetch does not count as the follower's
                # position: it is about to truncate.
                return FetchedPartition(wanted.partition, ErrorCode.none, hw, lso, start, None,
                                        diverging_epoch=diverging), 0
        # KIP-74: the first partition with data returns at least one whole batch even
        # if it is larger than the limits, so a consumer can never get stuck.
        region = partition.log.read(
            fetch_offset, max_bytes,
            max_offset=None if replica_id >= 0 else lso if committed_only else hw,
            min_one_batch=first)
    except OffsetOutOfRange:
        return FetchedPartition(wanted.partition, ErrorCode.offset_out_of_range,
                                hw, lso, start, None), 0
    if replica_id >= 0 and record_fetch:
        # Only the fetch as it arrives counts, not its re-reads after a long poll.
        broker.replica_manager.record_follower_fetch(
            partition, replica_id, fetch_offset, getattr(wanted, "log_start_offset", -1),
            leader_end)
        hw = partition.high_watermark  # what the follower just made committed, at once
    size = region.length if region is not None else 0
    aborted = None
    if committed_only and region is not None:
        aborted = [(txn.producer_id, txn.first_offset)
                   for txn in partition.log.aborted_transactions(fetch_offset, lso)]
    return FetchedPartition(wanted.partition, ErrorCode.none, hw, lso, start, region,
                            aborted_transactions=aborted), size


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
    record_fetch = True
    while True:
        topics, total, urgent = _read_partitions(broker, request, replica_id, record_fetch)
        record_fetch = False
        remaining = deadline - time.monotonic()
        if total >= min_bytes or urgent or remaining <= 0 or not watched:
            break
        await broker.replica_manager.wait_for_data(watched, remaining)
    metrics = broker.metrics
    if metrics is not None:
        if urgent or len(topics) != 1:
            metrics.fetch_answered(topics, replica_id >= 0)
        else:
            # One topic, every partition answered NONE: counted inline, without looking at
            # each partition (their bytes are ``total``), as this is once per fetch.
            name, answers = topics[0]
            counters = metrics.topics[name]
            counters.fetch_requests += len(answers)
            metrics.fetch_errors[NONE] += len(answers)
            if replica_id >= 0:
                metrics.replication_bytes_out += total
            else:
                counters.bytes_out += total
    return RawResponse(encode_fetch_response(version, request.header.correlation_id, 0,
                                             ErrorCode.none, _NO_SESSION, topics))
