"""InitProducerId: hand idempotent producers an id and epoch; transactional ones get
theirs from the transaction coordinator."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.transactions.coordinator import TransactionError, client_error

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_MAX_EPOCH = 32767


async def handle(broker: Broker, request: Request):
    body = request.body
    schema = response_schema(ApiKey.INIT_PRODUCER_ID, request.version)
    producer_id = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if body.transactional_id is not None:
        return await _transactional(broker, request, producer_id, epoch)
    if producer_id >= 0 and 0 <= epoch < _MAX_EPOCH:
        # KIP-360: a producer that lost track of its sequences asks for an epoch bump
        # of the id it has, so the broker can tell its new batches from old retries.
        producer_id, epoch = producer_id, epoch + 1
    else:
        producer_id, epoch = await broker.controller.allocate_producer_id(), 0
    return build(schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                 producer_id=producer_id, producer_epoch=epoch)


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
