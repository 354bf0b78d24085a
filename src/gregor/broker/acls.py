"""DescribeAcls, CreateAcls and DeleteAcls, answered as Kafka answers them when no
authorizer is configured (``authorizer.class.name`` unset, its default): every call
fails with SECURITY_DISABLED. gregor has no authorizer, so this is its whole
behaviour, and admin clients (``kafka-acls.sh``, confluent-kafka's ``describe_acls``)
report "no authorizer" in those words instead of an unsupported API.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_NO_THROTTLE = datetime.timedelta(0)
# Kafka's own words (KafkaApis), which clients show.
_NO_AUTHORIZER = "No Authorizer is configured on the broker"


async def handle_describe(broker: Broker, request: Request):
    return build(response_schema(ApiKey.DESCRIBE_ACLS, request.version),
                 throttle_time=_NO_THROTTLE, error_code=ErrorCode.security_disabled,
                 error_message=_NO_AUTHORIZER, resources=())


async def handle_create(broker: Broker, request: Request):
    key, version = ApiKey.CREATE_ACLS, request.version
    result_cls = nested(key, version, "AclCreationResult")
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 results=tuple(build(result_cls, error_code=ErrorCode.security_disabled,
                                     error_message=_NO_AUTHORIZER)
                               for _ in request.body.creations))


async def handle_delete(broker: Broker, request: Request):
    key, version = ApiKey.DELETE_ACLS, request.version
    result_cls = nested(key, version, "DeleteAclsFilterResult")
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 filter_results=tuple(build(result_cls, error_code=ErrorCode.security_disabled,
                                            error_message=_NO_AUTHORIZER, matching_acls=())
                                      for _ in request.body.filters))
