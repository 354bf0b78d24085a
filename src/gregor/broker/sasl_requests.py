"""SaslHandshake and SaslAuthenticate after a connection's first authentication.

They are advertised on every listener, as Kafka does, and served by
:mod:`gregor.broker.authentication` while a SASL client first authenticates. Later, on
a SASL listener whose sessions expire (``connections.max.reauth.ms``, KIP-368), they
re-authenticate the client on its connection: the same mechanism, the same user, a new
session. At any other time -- on a plaintext or TLS listener, or when sessions do not
expire -- Kafka answers ILLEGAL_SASL_STATE, and so does this.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from gregor.broker.authentication import failure_answer, session_lifetime, start_session
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.sasl import AuthenticationFailed
from gregor.security.session import user

if TYPE_CHECKING:
    from gregor.broker.broker import Broker


async def handle_handshake(broker: Broker, request: Request):
    key, version, session = ApiKey.SASL_HANDSHAKE, request.version, request.session
    if session.expires_at is None:
        return build(response_schema(key, version), error_code=ErrorCode.illegal_sasl_state,
                     mechanisms=())
    settings = broker.sasl[session.listener]
    mechanism = request.body.mechanism
    if mechanism != session.mechanism:
        # Kafka: "SASL mechanism changed during re-authentication": the connection ends.
        assert session.end is not None
        session.end()
        return build(response_schema(key, version),
                     error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=settings.names)
    session.reauthentication = settings.mechanisms[mechanism]()
    return build(response_schema(key, version), error_code=ErrorCode.none,
                 mechanisms=settings.names)


async def handle_authenticate(broker: Broker, request: Request):
    key, version, session = ApiKey.SASL_AUTHENTICATE, request.version, request.session
    server = session.reauthentication
    if server is None:
        return build(response_schema(key, version), error_code=ErrorCode.illegal_sasl_state,
                     error_message="SaslAuthenticate request received after successful "
                                   "authentication",
                     auth_bytes=b"", session_lifetime=datetime.timedelta(0))
    try:
        challenge = server.evaluate(request.body.auth_bytes)
        if server.complete and user(server.authorization_id) != session.principal:
            raise AuthenticationFailed(f"Cannot change principals during re-authentication "
                                       f"from {session.principal}")
    except (AuthenticationFailed, ValueError, LookupError) as exc:
        session.reauthentication = None
        message = await failure_answer(broker, session.mechanism or "", exc)
        assert session.end is not None
        session.end()
        return build(response_schema(key, version),
                     error_code=ErrorCode.sasl_authentication_failed, error_message=message,
                     auth_bytes=b"", session_lifetime=datetime.timedelta(0))
    lifetime = datetime.timedelta(0)
    if server.complete:
        session.reauthentication = None
        start_session(broker, session)
        lifetime = session_lifetime(broker, session)
    return build(response_schema(key, version), error_code=ErrorCode.none, error_message=None,
                 auth_bytes=challenge, session_lifetime=lifetime)
