"""SASL authentication of a connection on a SASL listener, before any other request.

As Kafka's SaslServerAuthenticator: until the client has authenticated, only
ApiVersions, SaslHandshake and then SaslAuthenticate are served; anything else closes
the connection. SaslHandshake v1 is followed by SaslAuthenticate requests carrying the
mechanism's tokens; v0 (older clients) by the bare tokens, each a size-prefixed frame
answered by a size-prefixed frame. A failure is answered with SASL_AUTHENTICATION_FAILED
(v1 framing; v0 has no way to say it) after ``connection.failed.authentication.delay.ms``,
and the connection is closed: guessing passwords costs a connection and that delay each.

All of it runs once, when the connection starts: once authenticated, the connection's
request loop is the same as on a plaintext listener. With ``connections.max.reauth.ms``
the session expires (KIP-368): the client re-authenticates on the same connection with
SaslHandshake and SaslAuthenticate among its other requests
(:mod:`gregor.broker.sasl_requests`), and the connection is closed when the session ends
unrenewed -- by a timer, so requests carry no check.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
from typing import TYPE_CHECKING, NoReturn

from gregor.broker.request import DelayedResponse, Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import MalformedRequest, build, decode_request, encode_response
from gregor.protocol.codec import response_schema as schema_of
from gregor.protocol.errors import ErrorCode
from gregor.security.sasl import AuthenticationFailed, SaslServer
from gregor.security.scram import ScramCredential
from gregor.security.session import Session, user

if TYPE_CHECKING:
    from gregor.broker.broker import Broker
    from gregor.broker.connection import Connection

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_HANDSHAKE_VERSIONS = range(0, 2)
_AUTHENTICATE_VERSIONS = range(0, 3)


def scram_credential(broker: Broker, username: str, mechanism: str) -> ScramCredential | None:
    """A user's stored SCRAM credential for ``mechanism``, as the metadata holds it now."""
    text = broker.image.user_configs.get(username, {}).get(mechanism)
    if text is None:
        return None
    try:
        return ScramCredential.decode(text)
    except (ValueError, KeyError):
        broker.warn_once("bad-scram-credential", "the %s credential of a user is unreadable",
                         mechanism)
        return None


async def authenticate(connection: Connection) -> None:
    """Run the exchange; on success the connection's session names the user. Raises
    ConnectionClosed (or the frame errors) when the client does not authenticate."""
    frames = connection.frames
    settings = connection.broker.sasl[connection.session.listener]
    server: SaslServer | None = None
    mechanism = ""
    bare_tokens = False  # after SaslHandshake v0
    # Connection set the SASL-sized limit; the listener's own comes back once authenticated.
    limits = frames.min_frame, connection.broker.config["socket.request.max.bytes"]
    while server is None or not server.complete:
        frame = await connection.read_frame()
        if bare_tokens:
            assert server is not None
            try:
                challenge = server.evaluate(bytes(frame))
            except (AuthenticationFailed, ValueError, LookupError) as exc:
                await _failed(connection, mechanism, exc, None)
            connection.transport.write(_SIZE.pack(len(challenge)) + challenge)
            continue
        try:
            header, body = decode_request(frame)
        except MalformedRequest as exc:
            connection.refuse("sasl-malformed", "before authentication: %s", exc)
        api_key, version = header.api_key, header.api_version
        if api_key == ApiKey.API_VERSIONS:
            response = await connection.dispatch(frame, api_key, version, header.correlation_id)
            if response is not None and not isinstance(response, DelayedResponse):
                await connection.send(response)
        elif api_key == ApiKey.SASL_HANDSHAKE and server is None and (
                version in _HANDSHAKE_VERSIONS):
            mechanism = body.mechanism
            factory = settings.mechanisms.get(mechanism)
            error = ErrorCode.none if factory else ErrorCode.unsupported_sasl_mechanism
            answer = build(schema_of(api_key, version), error_code=error,
                           mechanisms=settings.names)
            await connection.send(encode_response(api_key, version, header.correlation_id,
                                                  answer))
            if factory is None:
                connection.refuse("sasl-mechanism", "SASL mechanism not enabled (asked: %.40r)",
                                  mechanism)
            server = factory()
            if version == 0:
                bare_tokens = True
                frames.min_frame = 0  # a token may be shorter than any request header
        elif (api_key == ApiKey.SASL_AUTHENTICATE and server is not None
              and version in _AUTHENTICATE_VERSIONS):
            request = Request(header, body, connection.client_host, connection.client_port,
                              connection.session)
            try:
                challenge = server.evaluate(body.auth_bytes)
            except (AuthenticationFailed, ValueError, LookupError) as exc:
                await _failed(connection, mechanism, exc, request)
            answer = build(schema_of(api_key, version), error_code=ErrorCode.none,
                           error_message=None, auth_bytes=challenge,
                           session_lifetime=session_lifetime(connection.broker, connection.session)
                           if server.complete else datetime.timedelta(0))
            await connection.send(encode_response(api_key, version, header.correlation_id,
                                                  answer))
        else:
            # Kafka: "Unexpected Kafka request of type ... during SASL handshake".
            connection.refuse("sasl-unexpected", "api key %d v%d before SASL authentication",
                              api_key, version)
    frames.min_frame, frames.max_frame = limits
    connection.session.principal = user(server.authorization_id)
    connection.session.mechanism = mechanism
    start_session(connection.broker, connection.session)


def session_lifetime(broker: Broker, session: Session) -> datetime.timedelta:
    """What SaslAuthenticate v1+ tells the client: connections.max.reauth.ms (KIP-368),
    after which it must have re-authenticated; 0 when sessions do not expire."""
    return datetime.timedelta(
        milliseconds=broker.config.for_listener(session.listener, "connections.max.reauth.ms"))


def start_session(broker: Broker, session: Session) -> None:
    """A session begins: it expires after the listener's connections.max.reauth.ms."""
    lifetime = session_lifetime(broker, session).total_seconds()
    session.expires_at = (asyncio.get_running_loop().time() + lifetime) if lifetime else None


async def failure_answer(broker: Broker, mechanism: str, exc: Exception) -> str:
    """Hold a failure for connection.failed.authentication.delay.ms; the words the
    client is told."""
    await asyncio.sleep(broker.config["connection.failed.authentication.delay.ms"] / 1000)
    return str(exc) if isinstance(exc, AuthenticationFailed) else f"Invalid {mechanism} message"


async def _failed(connection: Connection, mechanism: str, exc: Exception,
                  request: Request | None) -> NoReturn:
    """Hold the failure for the configured delay, tell the client (SaslAuthenticate
    only) and close the connection."""
    message = await failure_answer(connection.broker, mechanism, exc)
    if request is not None:
        key, version = ApiKey.SASL_AUTHENTICATE, request.version
        answer = build(schema_of(key, version), error_code=ErrorCode.sasl_authentication_failed,
                       error_message=message, auth_bytes=b"",
                       session_lifetime=datetime.timedelta(0))
        connection.transport.write(encode_response(key, version, request.header.correlation_id,
                                                   answer))
    connection.refuse("sasl-failed", "SASL %s authentication failed: %s", mechanism, message)
