"""InitProducerId: hand idempotent producers an id and epoch."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, response_schema
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_MAX_EPOCH = 32767


async def handle(broker: Broker, request: Request):
    body = request.body
    schema = response_schema(ApiKey.INIT_PRODUCER_ID, request.version)
    if body.transactional_id is not None:
        # Transactions need a transaction coordinator, which gregor does not have yet.
        return build(schema, throttle_time=datetime.timedelta(0),
                     error_code=ErrorCode.unsupported_version, producer_id=-1, producer_epoch=-1)
    producer_id = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < _MAX_EPOCH:
        # KIP-360: a producer that lost track of its sequences asks for an epoch bump
        # of the id it has, so the broker can tell its new batches from old retries.
        producer_id, epoch = producer_id, epoch + 1
    else:
        producer_id, epoch = await broker.controller.allocate_producer_id(), 0
    return build(schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                 producer_id=producer_id, producer_epoch=epoch)
