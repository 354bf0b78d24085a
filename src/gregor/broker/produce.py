"""Produce: append record batches to partition leaders."""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING

from gregor.broker.connection import ConnectionClosed
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.storage.log import LogAppendError

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

log = logging.getLogger(__name__)

_KEY = ApiKey.PRODUCE


async def handle(broker: Broker, request: Request):
    version = request.version
    body = request.body
    partition_cls = nested(_KEY, version, "PartitionProduceResponse")
    topic_cls = nested(_KEY, version, "TopicProduceResponse")
    if body.transactional_id is not None:
        error = ErrorCode.transactional_id_authorization_failed
        topics = tuple(
            build(topic_cls, name=t.name, partition_responses=tuple(
                build(partition_cls, index=p.index, error_code=error, base_offset=-1,
                      log_start_offset=-1, record_errors=(),
                      error_message="transactions are not supported") for p in t.partition_data))
            for t in body.topic_data)
        return build(response_schema(_KEY, version), responses=topics,
                     throttle_time=datetime.timedelta(0))

    replica_manager = broker.replica_manager
    responses = []
    for topic in body.topic_data:
        partition_responses = []
        for data in topic.partition_data:
            error = ErrorCode.none
            message = None
            base_offset = -1
            append_time = None
            log_start = -1
            partition = replica_manager.get(topic.name, data.index)
            if partition is None:
                error = ErrorCode.unknown_topic_or_partition
            elif data.records is None:
                error = ErrorCode.invalid_record
            else:
                try:
                    result = partition.append_as_leader(data.records, body.acks)
                except LogAppendError as exc:
                    error, message = exc.error, str(exc)
                    broker.log_rejection(request, topic.name, data.index, exc)
                else:
                    base_offset = result.first_offset
                    log_start = partition.log_start_offset
                    if result.log_append_time >= 0:
                        append_time = datetime.datetime.fromtimestamp(
                            result.log_append_time / 1000, tz=datetime.UTC)
                    if not result.duplicate:
                        replica_manager.notify((topic.name, data.index))
            partition_responses.append(build(
                partition_cls, index=data.index, error_code=error, base_offset=base_offset,
                log_append_time=append_time, log_start_offset=log_start, record_errors=(),
                error_message=message))
        responses.append(build(topic_cls, name=topic.name,
                               partition_responses=tuple(partition_responses)))
    if body.acks == 0:
        # acks=0 producers read no response; sending one would desync their stream.
        # An error is signalled as Kafka does, by closing the connection: the client
        # notices, refreshes its metadata (a moved leader, a deleted topic) and goes on.
        if any(p.error_code for t in responses for p in t.partition_responses):
            raise ConnectionClosed
        return None
    return build(response_schema(_KEY, version), responses=tuple(responses),
                 throttle_time=datetime.timedelta(0))
