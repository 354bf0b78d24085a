"""InitProducerId: hand idempotent producers an id and epoch; transactional ones get
theirs from the transaction coordinator."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.authorization import may_write_idempotently, transactional_id_allowed
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.transactions.coordinator import TransactionError, client_error

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_NO_PRODUCER = -1


async def handle(broker: Broker, request: Request):
    body = request.body
    schema = response_schema(ApiKey.INIT_PRODUCER_ID, request.version)
    producer_id = getattr(body, "producer_id", _NO_PRODUCER)
    epoch = getattr(body, "producer_epoch", _NO_PRODUCER)
    if (producer_id == _NO_PRODUCER) != (epoch == _NO_PRODUCER):
        # As Kafka answers (KafkaApis): an id without an epoch, or the reverse.
        return build(schema, throttle_time=datetime.timedelta(0),
                     error_code=ErrorCode.invalid_request, producer_id=_NO_PRODUCER,
                     producer_epoch=_NO_PRODUCER)
    if body.transactional_id is not None:
        if not transactional_id_allowed(broker, request, body.transactional_id):
            return build(schema, throttle_time=datetime.timedelta(0),
                         error_code=ErrorCode.transactional_id_authorization_failed,
                         producer_id=_NO_PRODUCER, producer_epoch=_NO_PRODUCER)
        return await _transactional(broker, request, producer_id, epoch)
    if not may_write_idempotently(broker, request):
        return build(schema, throttle_time=datetime.timedelta(0),
                     error_code=ErrorCode.cluster_authorization_failed,
                     producer_id=_NO_PRODUCER, producer_epoch=_NO_PRODUCER)
    # Without a transactional id Kafka hands out a new id at epoch 0, whatever id and
    # epoch the producer names (KIP-360's bump of a named id is the coordinator's, for
    # transactional ids): the new id's sequences start afresh, clear of old retries.
    return build(schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                 producer_id=await broker.controller.allocate_producer_id(), producer_epoch=0)


async def _transactional(broker: Broker, request: Request, producer_id: int, epoch: int):
    schema = response_schema(ApiKey.INIT_PRODUCER_ID, request.version)
    body = request.body
    error = ErrorCode.none
    try:
        producer_id, epoch = await broker.transaction_coordinator.init_producer_id(
            body.transactional_id, int(body.transaction_timeout.total_seconds() * 1000),
            producer_id, epoch)
    except TransactionError as exc:
        error = client_error(exc.error, ApiKey.INIT_PRODUCER_ID, request.version)
    if error != ErrorCode.none:
        producer_id, epoch = -1, -1
    return build(schema, throttle_time=datetime.timedelta(0), error_code=error,
                 producer_id=producer_id, producer_epoch=epoch)
