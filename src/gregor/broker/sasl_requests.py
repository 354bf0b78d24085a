"""SaslHandshake and SaslAuthenticate outside an authentication exchange.

They are advertised on every listener, as Kafka does, and served by
:mod:`gregor.broker.authentication` while a SASL client authenticates. Sent at any other
time -- on a plaintext or TLS listener, or once authenticated -- Kafka answers
ILLEGAL_SASL_STATE, and so does this.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, response_schema
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.broker.broker import Broker


async def handle_handshake(broker: Broker, request: Request):
    return build(response_schema(ApiKey.SASL_HANDSHAKE, request.version),
                 error_code=ErrorCode.illegal_sasl_state, mechanisms=())


async def handle_authenticate(broker: Broker, request: Request):
    return build(response_schema(ApiKey.SASL_AUTHENTICATE, request.version),
                 error_code=ErrorCode.illegal_sasl_state,
                 error_message="SaslAuthenticate request received after successful "
                               "authentication",
                 auth_bytes=b"", session_lifetime=datetime.timedelta(0))
