"""Produce: append record batches to partition leaders.

acks=all answers once every in-sync replica has the records: the request waits
in the delayed-produce purgatory until each partition's high watermark covers
what was appended, the partition stops being led here, or the request's timeout
passes, and all its partitions are answered together. On a single broker the
high watermark moves with the append, so nothing waits. A partition whose
``flush.messages`` or ``flush.ms`` made the append due for an fsync is answered
once that is done (on the broker's flusher thread), whatever the acks.

A request naming a transactional id may write transactional batches, into the
partitions its producer's ongoing transaction added: checked for every batch when the
transaction coordinator is this broker, and otherwise asked of the coordinator before a
producer's first batch in a partition where it has no transaction open (KIP-890,
:mod:`gregor.transactions.verification`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gregor.broker.authorization import topic_allowed, transactional_refusal
from gregor.broker.connection import ConnectionClosed
from gregor.broker.request import DelayedResponse, RawResponse, Request
from gregor.metrics.broker_metrics import NONE
from gregor.protocol import record_batch
from gregor.protocol.codec import RequestHeader
from gregor.protocol.errors import ErrorCode
from gregor.protocol.produce_response import encode_produce_response
from gregor.protocol.record_batch import InvalidRecordBatch
from gregor.security.acls import Operation
from gregor.storage.log import AppendOrigin, LogAppendError

if TYPE_CHECKING:
    from gregor.broker.broker import Broker
    from gregor.cluster.delayed_produce import DelayedProduce
    from gregor.cluster.partition import Partition


_VALID_ACKS = (-1, 0, 1)


@dataclass(slots=True)
class _PartitionResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: tuple[tuple[int, str], ...] = ()  # the records at fault, by batch index


def _refusal(broker: Broker, body) -> tuple[ErrorCode, str] | None:
    """An error that refuses every partition of the request, or None."""
    if body.acks not in _VALID_ACKS:
        return ErrorCode.invalid_required_acks, f"acks must be -1, 0 or 1, not {body.acks}"
    return None


# A partition's verification by the transaction's coordinator elsewhere: the Produce
# error it came to, and the guard it was asked under.
_Verified = dict[tuple[str, int], tuple[ErrorCode, object]]


def _append(broker: Broker, request: Request, topic: str, data, verified: _Verified
            ) -> tuple[_PartitionResult, Partition | None, int]:
    """Append one partition's batches; return the answer, with the partition and the
    offset its high watermark must reach for acks=all (None, -1 if refused)."""
    metadata = broker.image.topics.get(topic)
    if broker.authorizer is not None and not topic_allowed(broker, request, Operation.WRITE,
                                                           topic):
        return _PartitionResult(ErrorCode.topic_authorization_failed), None, -1
    partition = broker.replica_manager.get(topic, data.index)
    if partition is None or metadata is None:
        return _PartitionResult(broker.replica_manager.missing_error(topic, data.index)
                                ), None, -1
    if metadata.internal:
        # As in Kafka, internal topics (__consumer_offsets) are written by the broker
        # only: a client's record there could corrupt every group's state.
        return _PartitionResult(ErrorCode.invalid_topic_exception,
                                f"cannot append to internal topic {topic}"), None, -1
    if data.records is None:
        return _PartitionResult(ErrorCode.invalid_record, "null record set"), None, -1
    origin = AppendOrigin.CLIENT
    transactional_id = request.body.transactional_id
    if transactional_id is not None:
        refused = _unverified(broker, transactional_id, topic, data, partition, verified)
        if refused is not None:
            return refused, None, -1
        origin = AppendOrigin.TRANSACTIONAL_CLIENT
    try:
        result = partition.append_as_leader(data.records, request.body.acks, origin)
    except LogAppendError as exc:
        broker.log_rejection(request, topic, data.index, exc)
        return _PartitionResult(exc.error, str(exc), record_errors=exc.record_errors), None, -1
    except OSError as exc:  # its log directory failed (KIP-112)
        broker.replica_manager.storage_failed(partition, exc)
        return _PartitionResult(ErrorCode.kafka_storage_error, str(exc)), None, -1
    metrics = broker.metrics
    if result.duplicate:
        if metrics is not None:
            metrics.appended(topic, 0, 0)
    else:
        broker.replica_manager.notify((topic, data.index))
        if metrics is not None:
            # The record count is the batch headers' (the log never reads records).
            metrics.appended(topic, result.record_count, len(data.records))
    answer = _PartitionResult(base_offset=result.first_offset,
                              log_append_time_ms=result.log_append_time,
                              log_start_offset=partition.log_start_offset)
    return answer, partition, result.last_offset + 1


def _unverified(broker: Broker, transactional_id: str, topic: str, data,
                partition: Partition, verified: _Verified) -> _PartitionResult | None:
    """Refuse transactional batches into a partition their transaction has not added:
    no marker would ever end them there, and the partition's LSO would stall."""
    try:
        header = record_batch.read_header(data.records)
    except InvalidRecordBatch as exc:
        return _PartitionResult(ErrorCode.corrupt_message, str(exc))
    if not header.is_transactional:
        return None
    if header.is_control:
        return _PartitionResult(ErrorCode.invalid_record,
                                "control batches are written by the broker only")
    answer = verified.get((topic, data.index))
    if answer is None:
        error = broker.transaction_coordinator.verify_partition(
            transactional_id, header.producer_id, header.producer_epoch, (topic, data.index))
    else:
        error, guard = answer
        ongoing = partition.log.producer_state.transactions
        if error == ErrorCode.none and not ongoing.guarded(header.producer_id, guard):
            # A marker of the producer came in while the coordinator was asked: the
            # transaction it answered about is over.
            error = ErrorCode.invalid_txn_state
        if error != ErrorCode.none:
            ongoing.drop_guard(header.producer_id, guard)
    if error is None or error == ErrorCode.none:
        return None
    producer = f"producer {header.producer_id} epoch {header.producer_epoch}"
    if error == ErrorCode.not_enough_replicas:
        return _PartitionResult(error, f"the transaction coordinator of {producer} could not "
                                       f"say yet whether {topic}-{data.index} is in its "
                                       "transaction")
    return _PartitionResult(error, f"{topic}-{data.index} is not in an ongoing transaction of "
                                   f"{producer}")


async def _verify_elsewhere(broker: Broker, body) -> _Verified:
    """Ask the transaction's coordinator, when it is another broker, about each partition
    led here whose batch is the producer's first there since its last transaction ended
    (with a transaction open in it, the partition is known to be in it)."""
    coordinator = broker.transaction_coordinator
    transactional_id = body.transactional_id
    if coordinator.coordinates(transactional_id):
        return {}
    asked: dict[tuple[str, int], object] = {}
    producers: set[tuple[int, int]] = set()
    for topic in body.topic_data:
        for data in topic.partition_data:
            partition = broker.replica_manager.get(topic.name, data.index)
            if partition is None or not partition.is_leader or data.records is None:
                continue
            try:
                header = record_batch.read_header(data.records)
            except InvalidRecordBatch:
                continue
            ongoing = partition.log.producer_state.transactions
            if (not header.is_transactional or header.is_control
                    or header.producer_id in ongoing.first_offsets):
                continue
            producers.add((header.producer_id, header.producer_epoch))
            asked[(topic.name, data.index)] = ongoing.guard(header.producer_id)
    if not asked:
        return {}
    if len(producers) > 1:
        # One transactional id has one producer: Kafka refuses such a request whole.
        return {tp: (ErrorCode.invalid_producer_id_mapping, guard)
                for tp, guard in asked.items()}
    ((producer_id, producer_epoch),) = producers
    errors = await coordinator.verifier.verify(transactional_id, producer_id, producer_epoch,
                                               list(asked))
    return {tp: (errors[tp], guard) for tp, guard in asked.items()}


def _settle(waits: list[tuple[_PartitionResult, Partition, int]], errors: list[ErrorCode]
            ) -> None:
    for (result, _, _), error in zip(waits, errors, strict=True):
        if error != ErrorCode.none:
            result.error, result.message = error, None


async def _answer_when_replicated(broker: Broker, header: RequestHeader,
                                  appended: list[tuple[str, list[tuple[int, _PartitionResult]]]],
                                  waits: list[tuple[_PartitionResult, Partition, int]],
                                  operation: DelayedProduce, flushes: list[asyncio.Future[None]]):
    """acks=all: the answer once each partition's high watermark covers its append (or
    the request timed out), and the fsyncs it made due are done."""
    _settle(waits, await broker.replica_manager.delayed_produce.answers(operation))
    if flushes:
        await asyncio.gather(*flushes)
    return _response(broker, header, -1, appended)


async def _answer_when_flushed(broker: Broker, header: RequestHeader, acks: int,
                               appended: list[tuple[str, list[tuple[int, _PartitionResult]]]],
                               flushes: list[asyncio.Future[None]]):
    await asyncio.gather(*flushes)
    return _response(broker, header, acks, appended)


async def handle(broker: Broker, request: Request):
    body = request.body
    metrics = broker.metrics
    refusal = _refusal(broker, body)
    if refusal is None and broker.authorizer is not None:
        refusal = transactional_refusal(broker, request)
    verified: _Verified = {}
    if body.transactional_id is not None and refusal is None:
        verified = await _verify_elsewhere(broker, body)
    appended: list[tuple[str, list[tuple[int, _PartitionResult]]]] = []
    waits = []
    flushes = []
    for topic in body.topic_data:
        results = []
        for data in topic.partition_data:
            if refusal is not None:
                result, partition = _PartitionResult(*refusal), None
            else:
                result, partition, required = _append(broker, request, topic.name, data,
                                                      verified)
            if partition is not None:
                if body.acks == -1:
                    waits.append((result, partition, required))
                flush = partition.log.pending_flush
                if flush is not None and not flush.done():
                    flushes.append(flush)
            elif metrics is not None:
                metrics.produce_refused(topic.name, result.error)
            results.append((data.index, result))
        appended.append((topic.name, results))
    if waits:
        operation = broker.replica_manager.delayed_produce.watch(
            [(partition, required) for _, partition, required in waits],
            body.timeout.total_seconds())
        if operation.future is not None:
            # Appended: what is left is waiting for the followers, and the connection
            # may append the producer's next request meanwhile.
            return DelayedResponse(_answer_when_replicated(
                broker, request.header, appended, waits, operation, flushes))
        _settle(waits, operation.result())  # on one broker, always at once
    if flushes and body.acks != 0:
        return DelayedResponse(_answer_when_flushed(broker, request.header, body.acks,
                                                    appended, flushes))
    return _response(broker, request.header, body.acks, appended)


def _response(broker: Broker, header: RequestHeader, acks: int,
              appended: list[tuple[str, list[tuple[int, _PartitionResult]]]]
              ) -> RawResponse | None:
    failed = any(result.error != ErrorCode.none for _, results in appended
                 for _, result in results)
    answered = sum(len(results) for _, results in appended)
    metrics = broker.metrics
    if metrics is not None:
        # The answer's errors, one per partition as Kafka's ErrorsPerSec counts them.
        if failed:
            metrics.produce_failed(result.error for _, results in appended
                                   for _, result in results)
        else:
            metrics.produce_errors[NONE] += answered
    if acks == 0:
        # acks=0 producers read no response; sending one would desync their stream.
        # An error is signalled as Kafka does, by closing the connection: the client
        # notices, refreshes its metadata (a moved leader, a deleted topic) and goes on.
        if failed:
            raise ConnectionClosed
        return None
    return RawResponse([encode_produce_response(header.api_version, header.correlation_id, 0,
                                                appended)])
