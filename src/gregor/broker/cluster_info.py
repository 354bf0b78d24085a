"""DescribeCluster: the brokers and controller, as admin clients ask for them."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.metadata import authorized_operations, broker_entries, cluster_operations
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_KEY = ApiKey.DESCRIBE_CLUSTER
_BROKER_ENDPOINTS = 1  # EndpointType.BROKER; 2 is CONTROLLER


async def handle(broker: Broker, request: Request):
    version = request.version
    endpoint_type = getattr(request.body, "endpoint_type", _BROKER_ENDPOINTS)
    if endpoint_type != _BROKER_ENDPOINTS:
        # KIP-919: a broker lists brokers; controllers are asked on their own listener.
        return build(response_schema(_KEY, version), throttle_time=datetime.timedelta(0),
                     error_code=ErrorCode.mismatched_endpoint_type,
                     error_message="this is a broker listener: it describes brokers only",
                     endpoint_type=endpoint_type, cluster_id=broker.image.cluster_id,
                     controller_id=-1, brokers=(),
                     cluster_authorized_operations=authorized_operations(False, 0))
    return build(
        response_schema(_KEY, version),
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=endpoint_type,
        cluster_id=broker.image.cluster_id,
        controller_id=broker.image.controller_id,
        brokers=broker_entries(broker, nested(_KEY, version, "DescribeClusterBroker"),
                               request.session.listener),
        cluster_authorized_operations=cluster_operations(
            broker, request, request.body.include_cluster_authorized_operations),
    )
