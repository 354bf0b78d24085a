"""ApiVersions: tell the client exactly which API versions this broker implements."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.request import RawResponse, Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, encode_response, nested, response_schema
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_NO_THROTTLE = datetime.timedelta(0)


def _body(version: int, error: ErrorCode, ranges: dict[int, tuple[int, int]]):
    api_version = nested(ApiKey.API_VERSIONS, version, "ApiVersion")
    return build(
        response_schema(ApiKey.API_VERSIONS, version),
        error_code=error,
        api_keys=tuple(build(api_version, api_key=k, min_version=lo, max_version=hi)
                       for k, (lo, hi) in sorted(ranges.items())),
        throttle_time=_NO_THROTTLE,
    )


async def handle(broker: Broker, request: Request):
    return _body(request.version, ErrorCode.none, broker.router.supported_versions())


def unsupported_version_response(correlation_id: int,
                                 ranges: dict[int, tuple[int, int]]) -> RawResponse:
    """Answer an ApiVersions version we do not know with error 35 and a v0 body.

    The client then retries with the highest version we list, which is how a newer
    client negotiates down to this broker.
    """
    body = _body(0, ErrorCode.unsupported_version, ranges)
    return RawResponse([encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)])
