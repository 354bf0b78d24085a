"""DescribeCluster: the brokers and controller, as admin clients ask for them."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.metadata import CLUSTER_OPERATIONS, authorized_operations, broker_entries
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_KEY = ApiKey.DESCRIBE_CLUSTER


async def handle(broker: Broker, request: Request):
    version = request.version
    return build(
        response_schema(_KEY, version),
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=getattr(request.body, "endpoint_type", 1),
        cluster_id=broker.image.cluster_id,
        controller_id=broker.broker_id,
        brokers=broker_entries(broker, nested(_KEY, version, "DescribeClusterBroker")),
        cluster_authorized_operations=authorized_operations(
            request.body.include_cluster_authorized_operations, CLUSTER_OPERATIONS),
    )
