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

Fetch v7+ may open an incremental fetch session (KIP-227, ``cluster.fetch_sessions``):
its later fetches name only what changed, are answered with only what changed,
and read only the partitions touched since the last answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gregor.broker.authorization import may_fetch
from gregor.broker.request import RawResponse, Request
from gregor.cluster.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    NO_SESSION,
    FetchSession,
    next_epoch,
)
from gregor.metrics.broker_metrics import NONE
from gregor.protocol.errors import ErrorCode
from gregor.protocol.fetch_response import FetchedPartition, encode_fetch_response
from gregor.storage.log import OffsetOutOfRange
from gregor.storage.log_manager import TopicPartition

if TYPE_CHECKING:
    from gregor.broker.broker import Broker
    from gregor.cluster.partition import Partition

READ_COMMITTED = 1
SESSIONS_FROM_VERSION = 7

# A partition to read: its topic, what the fetcher asked of it, and whether this read
# counts as a follower's fetch of it (only a fetch's first read, not its re-reads
# after a long poll).
Wanted = tuple[str, Any, bool]


class _Read:
    """One pass over the partitions a fetch reads: their answers, in order."""

    __slots__ = ("answers", "total", "urgent", "held")

    def __init__(self) -> None:
        self.answers: list[tuple[str, FetchedPartition, int]] = []
        self.total = 0
        self.urgent = False  # an error or a diverging epoch: answered at once
        # Partitions sent nothing for the leader's replication throttle: read again.
        self.held: set[TopicPartition] = set()


def _read(broker: Broker, request: Request, parts: Iterable[Wanted], replica_id: int
          ) -> _Read:
    body = request.body
    read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    result = _Read()
    budget = body.max_bytes
    # With an authorizer, each topic read is checked once per pass (an incremental
    # fetch's too: ACLs may have changed since the session took the partition).
    refused: dict[str, bool] = {}
    for topic, wanted, record in parts:
        if broker.authorizer is not None:
            if topic not in refused:
                refused[topic] = not may_fetch(broker, request, replica_id, topic)
            if refused[topic]:
                result.urgent = True
                result.answers.append((topic, FetchedPartition(
                    wanted.partition, ErrorCode.topic_authorization_failed, -1, -1, -1, None),
                    0))
                continue
        throttled = replica_id >= 0 and _throttled(broker, topic, wanted.partition, replica_id)
        held = throttled and broker.replica_manager.leader_quota.exceeded()
        if held:
            result.held.add((topic, wanted.partition))
        answer, size = _read_partition(broker, topic, wanted, 0 if held else budget,
                                       replica_id, first=result.total == 0 and not held,
                                       record_fetch=record, read_committed=read_committed)
        if throttled and size:
            broker.replica_manager.leader_quota.record(size)
        budget -= size
        result.total += size
        result.urgent = result.urgent or answer.error_code != ErrorCode.none or (
            answer.diverging_epoch is not None)
        result.answers.append((topic, answer, size))
    return result


def _throttled(broker: Broker, topic: str, index: int, replica_id: int) -> bool:
    """Whether the leader's replication throttle applies to this follower's fetch of the
    partition: a throttled replica, the follower out of its ISR (looked up only while
    a throttle rate is set)."""
    if not broker.replica_manager.leader_quota.limited:
        return False
    partition = broker.replica_manager.get(topic, index)
    return (partition is not None and partition.leader_throttled
            and replica_id not in partition.isr)


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
        return FetchedPartition(wanted.partition,
                                broker.replica_manager.missing_error(topic, wanted.partition),
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
    except OSError as exc:  # a read error: its log directory failed (KIP-112)
        broker.replica_manager.storage_failed(partition, exc)
        return FetchedPartition(wanted.partition, ErrorCode.kafka_storage_error,
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
    session_id = getattr(body, "session_id", NO_SESSION)
    epoch = getattr(body, "session_epoch", FINAL_EPOCH)
    sessions = broker.replica_manager.fetch_sessions
    replica_id = getattr(body, "replica_id", -1)
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        # A full fetch: it ends the session it names, and may open a new one.
        if session_id != NO_SESSION:
            sessions.close(session_id)
        session = (sessions.open(replica_id) if epoch == INITIAL_EPOCH
                   and request.version >= SESSIONS_FROM_VERSION else None)
        return await _full_fetch(broker, request, replica_id, session)
    session = sessions.get(session_id)
    if session is None:
        return _refused(request, ErrorCode.fetch_session_id_not_found)
    if epoch != session.epoch:
        return _refused(request, ErrorCode.invalid_fetch_session_epoch)
    session.epoch = next_epoch(epoch)
    return await _incremental_fetch(broker, request, replica_id, session)


def _refused(request: Request, error: ErrorCode) -> RawResponse:
    return RawResponse(encode_fetch_response(request.version, request.header.correlation_id,
                                             0, error, NO_SESSION, []))


async def _full_fetch(broker: Broker, request: Request, replica_id: int,
                      session: FetchSession | None) -> RawResponse:
    """Every partition named, answered; a new session holds them all."""
    body = request.body
    parts = [(t.topic, p) for t in body.topics for p in t.partitions]
    if session is not None:
        for topic, wanted in parts:
            broker.replica_manager.fetch_sessions.update(session, (topic, wanted.partition),
                                                         wanted)
    deadline = time.monotonic() + body.max_wait.total_seconds()
    watched = [(topic, wanted.partition) for topic, wanted in parts]
    record = True
    while True:
        if session is not None:
            session.wakeup.clear()
        result = _read(broker, request, [(t, w, record) for t, w in parts], replica_id)
        record = False
        remaining = deadline - time.monotonic()
        # As in Kafka, min_bytes <= 0 asks for an immediate answer, even an empty one.
        if result.total >= body.min_bytes or result.urgent or remaining <= 0 or not watched:
            break
        remaining = _until_unheld(broker, result, remaining)
        if session is None:
            await broker.replica_manager.wait_for_data(watched, remaining)
        else:
            await _wait(session, remaining)
    grouped = _grouped(result)
    response = _encoded(request, grouped, NO_SESSION if session is None else session.id)
    throttle = _over_quota(request, replica_id, response)
    if throttle:
        # As Kafka's throttled full fetch: no session is created, nothing is sent.
        if session is not None:
            broker.replica_manager.fetch_sessions.close(session.id)
        return _quota_answer(request, throttle, NO_SESSION)
    if session is not None:
        session.marked = dict.fromkeys(result.held)  # held back: read at the next fetch
        for topic, answer, _ in result.answers:
            _answered(session, (topic, answer.index), answer)
    _count(broker, replica_id, result, grouped)
    return response


async def _incremental_fetch(broker: Broker, request: Request, replica_id: int,
                             session: FetchSession) -> RawResponse:
    """Only what the request changed, and what changed since the last answer, is read;
    only what has news is answered."""
    body = request.body
    cache = broker.replica_manager.fetch_sessions
    cache.forget(session, [(t.topic, index) for t in body.forgotten_topics_data
                           for index in t.partitions])
    named: dict[TopicPartition, None] = {}
    for t in body.topics:
        for wanted in t.partitions:
            tp = (t.topic, wanted.partition)
            cache.update(session, tp, wanted)
            named[tp] = None
    deadline = time.monotonic() + body.max_wait.total_seconds()
    first = True
    while True:
        session.wakeup.clear()
        candidates = [tp for tp in {**named, **session.marked} if tp in session.partitions]
        # A partition the fetcher did not name is where it was (KIP-227): its cached
        # offset is the follower's position now, and counts as fetched, as Kafka's
        # leader counts every partition of the session at each fetch.
        result = _read(broker, request, [(tp[0], session.partitions[tp].wanted, first)
                                         for tp in candidates], replica_id)
        first = False
        remaining = deadline - time.monotonic()
        if result.total >= body.min_bytes or result.urgent or remaining <= 0:
            break
        await _wait(session, _until_unheld(broker, result, remaining))
    starved = result.total >= body.max_bytes
    news = _Read()
    told: list[TopicPartition] = []
    for (topic, answer, size), tp in zip(result.answers, candidates, strict=True):
        cached = session.partitions[tp]
        if size or answer.error_code != ErrorCode.none or answer.diverging_epoch is not None \
                or cached.changed(answer.high_watermark, answer.last_stable_offset,
                                  answer.log_start_offset):
            news.answers.append((topic, answer, size))
            news.total += size
            news.urgent = news.urgent or answer.error_code != ErrorCode.none
            told.append(tp)
    grouped = _grouped(news)
    response = _encoded(request, grouped, session.id)
    throttle = _over_quota(request, replica_id, response)
    if throttle:
        # Kafka's throttled incremental fetch: the session goes on, told nothing, and
        # what had news is read again at the next fetch.
        session.marked.update(dict.fromkeys(told))
        return _quota_answer(request, throttle, session.id)
    for (_, answer, _), tp in zip(news.answers, told, strict=True):
        _answered(session, tp, answer)
    for (_, _, size), tp in zip(result.answers, candidates, strict=True):
        # Records sent, or none for want of room: read again at the next fetch, whether
        # or not the fetcher names it (one that does not is sent the same again, as by
        # Kafka).
        if not size and not starved:
            session.marked.pop(tp, None)
    # Held back by the throttle: read again at the next fetch, as the fetcher will not
    # name them (it was sent nothing).
    session.marked.update(dict.fromkeys(result.held))
    _count(broker, replica_id, news, grouped)
    return response


def _answered(session: FetchSession, tp: TopicPartition, answer: FetchedPartition) -> None:
    cached = session.partitions.get(tp)
    if cached is not None:
        cached.answered(answer.high_watermark, answer.last_stable_offset,
                        answer.log_start_offset)


def _until_unheld(broker: Broker, result: _Read, remaining: float) -> float:
    """How long a fetch waits before reading again: until the leader's throttle would
    let a partition it held back through, if sooner than its deadline."""
    if not result.held:
        return remaining
    return min(remaining, max(broker.replica_manager.leader_quota.delay_s(), 0.01))


async def _wait(session: FetchSession, timeout: float) -> None:
    """Until the session is woken, or ``timeout`` seconds passed (which wake it too: its
    fetch reads again, and answers as its deadline has come). A plain loop timer: a
    follower's fetch parks once per round, and ``asyncio.timeout`` cost twice as much."""
    timer = asyncio.get_running_loop().call_later(timeout, session.wakeup.set)
    try:
        await session.wakeup.wait()
    finally:
        timer.cancel()


def _grouped(result: _Read) -> list[tuple[str, list[FetchedPartition]]]:
    topics: dict[str, list[FetchedPartition]] = {}
    for topic, answer, _ in result.answers:
        topics.setdefault(topic, []).append(answer)
    return list(topics.items())


def _encoded(request: Request, grouped: list[tuple[str, list[FetchedPartition]]],
             session_id: int) -> RawResponse:
    return RawResponse(encode_fetch_response(request.version, request.header.correlation_id, 0,
                                             ErrorCode.none, session_id, grouped))


def _over_quota(request: Request, replica_id: int, response: RawResponse) -> int:
    """The throttle time a consumer's answer earns against its quotas (0 without
    quotas, and for followers, whose fetches the replication quotas throttle)."""
    if request.fetch_quota is None or replica_id >= 0:
        return 0
    return request.fetch_quota(
        sum(len(c) if isinstance(c, bytes) else c.length for c in response.chunks))


def _quota_answer(request: Request, throttle_ms: int, session_id: int) -> RawResponse:
    """Kafka's answer to a fetch over its quota (``getThrottledResponse``): no
    partition, the throttle time, the session id of an incremental fetch."""
    return RawResponse(encode_fetch_response(request.version, request.header.correlation_id,
                                             throttle_ms, ErrorCode.none, session_id, []))


def _count(broker: Broker, replica_id: int, result: _Read,
           grouped: list[tuple[str, list[FetchedPartition]]]) -> None:
    """The answer's partitions and bytes in the broker's metrics."""
    metrics = broker.metrics
    if metrics is None:
        return
    if result.urgent or len(grouped) != 1:
        metrics.fetch_answered(grouped, replica_id >= 0)
        return
    # One topic, every partition answered NONE: counted inline, without looking at
    # each partition (their bytes are the total), as this is once per fetch.
    name, answers = grouped[0]
    counters = metrics.topics[name]
    counters.fetch_requests += len(answers)
    metrics.fetch_errors[NONE] += len(answers)
    if replica_id >= 0:
        metrics.replication_bytes_out += result.total
    else:
        counters.bytes_out += result.total
