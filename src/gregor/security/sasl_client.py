"""The client's side of Kafka's SASL exchange, written once for gregor's two kinds of
connection to a broker: the blocking client connection (:mod:`gregor.client.connection`:
the Spark source, the registry's election) and a broker's asyncio channel to another
(:mod:`gregor.cluster.broker_channel`: replication, the controller's requests).

SaslHandshake v1 names the mechanism, then SaslAuthenticate v2 carries its tokens, as
Kafka's clients do: PLAIN's one token, or SCRAM's two rounds, whose server signature is
checked (a broker that does not know the password cannot pass for one that does). The
exchange is a generator of the requests to send (api key, version, request), each
answer sent back into it, so that a blocking caller and an asyncio one drive the same
steps with their own I/O. A refusal raises :class:`AuthenticationFailed`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.security.sasl import AuthenticationFailed
from gregor.security.sasl_mechanisms import PLAIN
from gregor.security.scram import ScramClient

Request = tuple[int, int, Any]
"""A request of the exchange: api key, version, body."""
Exchange = Generator[Request, Any, None]


def exchange(mechanism: str, username: str, password: str) -> Exchange:
    """The requests that authenticate ``username`` with ``mechanism``, each followed by
    its answer (sent into the generator)."""
    answer = yield ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism)
    if answer.error_code != ErrorCode.none:
        raise AuthenticationFailed(f"mechanism {mechanism} not enabled there")
    if mechanism == PLAIN:
        yield from _token(f"\0{username}\0{password}".encode())
        return
    client = ScramClient(mechanism, username, password)
    server_first = yield from _token(client.first_message())
    client.check_server_final((yield from _token(client.final_message(server_first))))


def _token(token: bytes) -> Generator[Request, Any, bytes]:
    answer = yield ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token)
    if answer.error_code != ErrorCode.none:
        raise AuthenticationFailed(answer.error_message or "authentication failed")
    return bytes(answer.auth_bytes)


def authenticate(steps: Exchange, request: Callable[[int, int, Any], Any]) -> None:
    """Run ``steps`` over a blocking ``request`` (api key, version, body -> answer)."""
    try:
        step = next(steps)
        while True:
            step = steps.send(request(*step))
    except StopIteration:
        return


async def authenticate_async(steps: Exchange,
                             request: Callable[[int, int, Any], Awaitable[Any]]) -> None:
    """Run ``steps`` over an asyncio ``request``."""
    try:
        step = next(steps)
        while True:
            step = steps.send(await request(*step))
    except StopIteration:
        return
