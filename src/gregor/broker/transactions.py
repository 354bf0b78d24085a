"""Transactional producers' requests: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit (InitProducerId with a transactional id is in producer_ids); the
admin's DescribeTransactions and ListTransactions; and WriteTxnMarkers, which
coordinators send to partition leaders (write_txn_markers).
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from gregor.broker import write_txn_markers
from gregor.broker.authorization import (
    allowed,
    group_allowed,
    topic_allowed,
    transactional_id_allowed,
)
from gregor.broker.request import Request
from gregor.broker.router import Route, Router
from gregor.groups.coordinator import now_ms
from gregor.groups.offset_and_metadata import NO_LEADER_EPOCH, OffsetAndMetadata
from gregor.groups.offsets_store import OFFSETS_TOPIC
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation, ResourceType
from gregor.transactions.coordinator import TransactionError, client_error
from gregor.transactions.metadata import TransactionState

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_NO_THROTTLE = datetime.timedelta(0)


async def _error_of(api_key: ApiKey, version: int, action: Awaitable[None]) -> ErrorCode:
    try:
        await action
    except TransactionError as exc:
        return client_error(exc.error, api_key, version)
    return ErrorCode.none


def _partition_exists(broker: Broker, topic: str, index: int) -> bool:
    return (broker.image.partition(topic, index) is not None
            and not broker.image.topics[topic].internal)


async def _add_or_verify(broker: Broker, version: int, transactional_id: str,
                         producer_id: int, producer_epoch: int, asked: list[tuple[str, int]],
                         verify_only: bool) -> dict[tuple[str, int], ErrorCode]:
    """One transaction's partitions: added to it, or (v4's VerifyOnly, from a partition
    leader) checked to be in it."""
    unknown = {tp for tp in asked if not _partition_exists(broker, *tp)}
    if unknown:
        # As in Kafka: nothing is added when any partition is unknown.
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                else ErrorCode.operation_not_attempted for tp in asked}
    coordinator = broker.transaction_coordinator
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch,
                                             asked)
    error = await _error_of(ApiKey.ADD_PARTITIONS_TO_TXN, version, coordinator.add_partitions(
        transactional_id, producer_id, producer_epoch, asked))
    return dict.fromkeys(asked, error)


def _topic_results(version: int, errors: dict[tuple[str, int], ErrorCode]) -> tuple:
    key = ApiKey.ADD_PARTITIONS_TO_TXN
    by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append((index, error))
    partition_cls = nested(key, version, "AddPartitionsToTxnPartitionResult")
    topic_cls = nested(key, version, "AddPartitionsToTxnTopicResult")
    return tuple(build(topic_cls, name=name, results_by_partition=tuple(
                     build(partition_cls, partition_index=index, partition_error_code=error)
                     for index, error in results))
                 for name, results in by_topic.items())


async def handle_add_partitions(broker: Broker, request: Request):
    """v0-3 from producers: one transaction's partitions added. v4 from partition leaders
    (Kafka's brokers send nothing older, its clients nothing newer than v3): a batch of
    transactions, each added or, with VerifyOnly, checked."""
    key, version, body = ApiKey.ADD_PARTITIONS_TO_TXN, request.version, request.body
    if version < 4:
        asked = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
        denied = _add_partitions_denied(broker, request, body.v3_and_below_transactional_id,
                                        asked)
        if denied is not None:
            return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                         results_by_topic_v3_and_below=_topic_results(version, denied))
        errors = await _add_or_verify(
            broker, version, body.v3_and_below_transactional_id,
            body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
            [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions], False)
        return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                     results_by_topic_v3_and_below=_topic_results(version, errors))
    result_cls = nested(key, version, "AddPartitionsToTxnResult")
    if not allowed(broker, request, Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                     error_code=ErrorCode.cluster_authorization_failed,
                     results_by_transaction=())
    results = []
    for txn in body.transactions:
        errors = await _add_or_verify(
            broker, version, txn.transactional_id, txn.producer_id, txn.producer_epoch,
            [(t.name, p) for t in txn.topics for p in t.partitions], txn.verify_only)
        results.append(build(result_cls, transactional_id=txn.transactional_id,
                             topic_results=_topic_results(version, errors)))
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 error_code=ErrorCode.none, results_by_transaction=tuple(results))


def _add_partitions_denied(broker: Broker, request: Request, transactional_id: str,
                           asked: list[tuple[str, int]]
                           ) -> dict[tuple[str, int], ErrorCode] | None:
    """Kafka's answer when the producer may not write the transactional id or a topic
    (the others: OPERATION_NOT_ATTEMPTED), or None."""
    if not transactional_id_allowed(broker, request, transactional_id):
        return dict.fromkeys(asked, ErrorCode.transactional_id_authorization_failed)
    denied = {topic for topic, _ in asked
              if not topic_allowed(broker, request, Operation.WRITE, topic)}
    if not denied:
        return None
    return {tp: ErrorCode.topic_authorization_failed if tp[0] in denied
            else ErrorCode.operation_not_attempted for tp in asked}


async def handle_add_offsets(broker: Broker, request: Request):
    key, version, body = ApiKey.ADD_OFFSETS_TO_TXN, request.version, request.body
    error = await broker.group_coordinator.ensure_store()
    if not transactional_id_allowed(broker, request, body.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed
    elif not group_allowed(broker, request, Operation.READ, body.group_id):
        error = ErrorCode.group_authorization_failed
    if error is None:
        group_partition = broker.group_coordinator.store.partition_for(body.group_id)
        error = await _error_of(key, version, broker.transaction_coordinator.add_partitions(
            body.transactional_id, body.producer_id, body.producer_epoch,
            [(OFFSETS_TOPIC, group_partition)]))
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE, error_code=error)


async def handle_end_txn(broker: Broker, request: Request):
    key, version, body = ApiKey.END_TXN, request.version, request.body
    if not transactional_id_allowed(broker, request, body.transactional_id):
        return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                     error_code=ErrorCode.transactional_id_authorization_failed)
    error = await _error_of(key, version, broker.transaction_coordinator.end_transaction(
        body.transactional_id, body.producer_id, body.producer_epoch, body.committed))
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE, error_code=error)


async def handle_txn_offset_commit(broker: Broker, request: Request):
    key, version, body = ApiKey.TXN_OFFSET_COMMIT, request.version, request.body
    groups = broker.group_coordinator
    now = now_ms()
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    errors: dict[tuple[str, int], ErrorCode] = {}
    refusal = None
    if not transactional_id_allowed(broker, request, body.transactional_id):
        refusal = ErrorCode.transactional_id_authorization_failed
    elif not group_allowed(broker, request, Operation.READ, body.group_id):
        refusal = ErrorCode.group_authorization_failed
    for topic in body.topics:
        topic_denied = not topic_allowed(broker, request, Operation.READ, topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if refusal is not None:
                errors[tp] = refusal
            elif topic_denied:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif _partition_exists(broker, *tp):
                offsets[tp] = OffsetAndMetadata(
                    offset=p.committed_offset,
                    leader_epoch=getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH),
                    metadata=p.committed_metadata or "", commit_timestamp=now)
            else:
                errors[tp] = ErrorCode.unknown_topic_or_partition
    error = refusal or await groups.ensure_store() or (
        broker.transaction_coordinator.check_offsets_producer(
            body.transactional_id, body.producer_id, body.producer_epoch,
            groups.store.partition_for(body.group_id)))
    if error is None:
        error = groups.stage_transactional_offsets(
            body.group_id, (body.producer_id, body.producer_epoch),
            getattr(body, "generation_id", -1), getattr(body, "member_id", ""),
            getattr(body, "group_instance_id", None), offsets)
    if error == ErrorCode.none and offsets:
        error = await groups.store.replicated(body.group_id,
                                              broker.config["offsets.commit.timeout.ms"] / 1000)
    error = client_error(error, key, version)
    errors.update(dict.fromkeys(offsets, error))
    by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
    for (topic, index), code in errors.items():
        by_topic.setdefault(topic, []).append((index, code))
    partition_cls = nested(key, version, "TxnOffsetCommitResponsePartition")
    topic_cls = nested(key, version, "TxnOffsetCommitResponseTopic")
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE, topics=tuple(
        build(topic_cls, name=name, partitions=tuple(
            build(partition_cls, partition_index=index, error_code=code)
            for index, code in results))
        for name, results in by_topic.items()))


async def handle_describe(broker: Broker, request: Request):
    key, version = ApiKey.DESCRIBE_TRANSACTIONS, request.version
    state_cls = nested(key, version, "TransactionState")
    topic_cls = nested(key, version, "TopicData")
    answers = []
    for transactional_id in request.body.transactional_ids:
        try:
            if not allowed(broker, request, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                           transactional_id):
                raise TransactionError(ErrorCode.transactional_id_authorization_failed,
                                       "Transactional Id authorization failed.")
            meta = broker.transaction_coordinator.describe(transactional_id)
        except TransactionError as exc:
            answers.append(build(state_cls, error_code=exc.error,
                                 transactional_id=transactional_id, transaction_state="",
                                 transaction_timeout=_NO_THROTTLE,
                                 transaction_start_time=_time(0), producer_id=0,
                                 producer_epoch=0, topics=()))
            continue  # the other fields zero, as Kafka leaves them
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(index)
        answers.append(build(
            state_cls, error_code=ErrorCode.none, transactional_id=transactional_id,
            transaction_state=meta.state.display_name,
            transaction_timeout=datetime.timedelta(milliseconds=meta.timeout_ms),
            transaction_start_time=_time(meta.start_ms), producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            topics=tuple(build(topic_cls, topic=topic, partitions=tuple(indexes))
                         for topic, indexes in by_topic.items())))
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 transaction_states=tuple(answers))


def _time(ms: int) -> datetime.datetime:
    """Milliseconds since the epoch as kio's timestamp (-1, no transaction begun, survives
    the trip)."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


_STATES = {state.display_name: state for state in TransactionState}


async def handle_list(broker: Broker, request: Request):
    key, version, body = ApiKey.LIST_TRANSACTIONS, request.version, request.body
    unknown = tuple(name for name in body.state_filters if name not in _STATES)
    states = {_STATES[name] for name in body.state_filters if name in _STATES}
    try:
        listed = broker.transaction_coordinator.list(states if body.state_filters else None,
                                                     set(body.producer_id_filters),
                                                     getattr(body, "duration_filter", -1))
        error = ErrorCode.none
    except TransactionError as exc:
        listed, unknown, error = [], (), exc.error
    state_cls = nested(key, version, "TransactionState")
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 error_code=error, unknown_state_filters=unknown,
                 transaction_states=tuple(
                     build(state_cls, transactional_id=meta.transactional_id,
                           producer_id=meta.producer_id,
                           transaction_state=meta.state.display_name)
                     for meta in sorted(listed, key=lambda m: m.transactional_id)
                     # As Kafka: only the transactional ids the client may describe.
                     if allowed(broker, request, Operation.DESCRIBE,
                                ResourceType.TRANSACTIONAL_ID, meta.transactional_id)))


ROUTES: dict[int, Route] = {
    ApiKey.ADD_PARTITIONS_TO_TXN: Route(handle_add_partitions, 0, 4),
    ApiKey.ADD_OFFSETS_TO_TXN: Route(handle_add_offsets, 0, 3),
    ApiKey.END_TXN: Route(handle_end_txn, 0, 3),
    ApiKey.TXN_OFFSET_COMMIT: Route(handle_txn_offset_commit, 0, 3),
    ApiKey.DESCRIBE_TRANSACTIONS: Route(handle_describe, 0, 0),
    # v2's transactional id pattern is a Java regular expression: not offered.
    ApiKey.LIST_TRANSACTIONS: Route(handle_list, 0, 1),
    # v0 is not in kio (Kafka's brokers have sent v1 since 2.8); v2's transaction
    # version (KIP-890's epoch bump per transaction) is not implemented.
    ApiKey.WRITE_TXN_MARKERS: Route(write_txn_markers.handle, 1, 1),
}


def register(router: Router) -> None:
    for api_key, route in ROUTES.items():
        router.add(api_key, route)
