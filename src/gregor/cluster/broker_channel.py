"""BrokerChannel: one connection from this broker to another, as a Kafka client.

Followers fetch from leaders over it with Kafka's own requests (Fetch with a
replica id, OffsetForLeaderEpoch), encoded and decoded by kio like any client's but
for the follower's Fetch, which has a hand-written codec
(:mod:`gregor.protocol.replica_fetch`) that leaves the records in the received frame. It
connects to the other broker's inter-broker listener with that listener's security
(:mod:`gregor.security.inter_broker`): TLS, and SASL (PLAIN or SCRAM, whose server
signature is checked) right after connecting, before the first request.
One request is in flight at a time, which is all a fetcher needs; a failed
connection is dropped and opened again by the next request.

Answers are read as the broker reads requests (:class:`FrameProtocol`): a fetch
answer of a megabyte is received straight into a buffer reused from one answer to
the next, and the follower appends the records from it. asyncio's streams copied it
three times (``recv`` into new ``bytes``, into the reader's buffer, out of it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gregor.broker.frame_protocol import FrameProtocol, FrameSizeError
from gregor.protocol.codec import decode_response, encode_request
from gregor.security import sasl_client
from gregor.security.inter_broker import ChannelSecurity
from gregor.security.sasl import AuthenticationFailed

CLIENT_ID = "gregor-replica-fetcher"
# An answer's size prefix: at least its correlation id, at most what the prefix can say
# (a fetch answer's first batch may exceed every limit the request set, as in Kafka).
_MIN_ANSWER_BYTES = 4
_MAX_ANSWER_BYTES = 2**31 - 1
# Answers up to this size are received straight into a buffer reused from one to the
# next. A follower's fetch answer is as large as it asked (replica.fetch.response.max.bytes,
# 10 MiB by default: a leader with ten partitions to catch up fills it), above the 8 MiB a
# client's connection allows; gathered 64 KiB at a time into a new buffer instead, a
# 10 MiB answer cost the loop 0.37-0.45 ms of CPU a MB against 0.08 (loopback, 150 answers).
_ANSWER_OWN_BUFFER_BYTES = 64 * 1024 * 1024


# A correlation id -> the size-prefixed request frame.
Encode = Callable[[int], bytes]
# An answer frame (no size prefix) -> its correlation id and the answer.
Decode = Callable[[bytes | memoryview], tuple[int, Any]]


def _kio(api_key: int, version: int, body: Any) -> tuple[Encode, Decode]:
    return (lambda correlation_id: encode_request(api_key, version, correlation_id,
                                                  CLIENT_ID, body),
            lambda frame: decode_response(api_key, version, frame))


class ChannelError(Exception):
    """The other broker could not be reached or answered nothing usable."""


class BrokerChannel:
    def __init__(self, broker_id: int, address: Callable[[int], tuple[str, int] | None],
                 timeout_s: float, source_address: str | None = None,
                 security: ChannelSecurity | None = None) -> None:
        self.broker_id = broker_id
        self._address = address
        self._local = None if source_address is None else (source_address, 0)
        self.timeout_s = timeout_s
        self._security = security
        self._protocol: FrameProtocol | None = None
        self._correlation_id = 0

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        """A request built with kio, and kio's decoding of its answer."""
        return await self.exchange(*_kio(api_key, version, body))

    async def exchange(self, encode: Encode, decode: Decode) -> Any:
        """One request framed by ``encode`` and its answer read by ``decode``: kio's, or a
        hand-written codec's where a profile asked for one (the follower's Fetch), whose
        answer may view the received frame until the channel's next exchange."""
        try:
            # asyncio.timeout rather than wait_for: Python 3.11's wait_for can swallow a
            # cancellation that arrives as the request fails, leaving a fetcher that
            # cannot be stopped.
            async with asyncio.timeout(self.timeout_s):
                protocol = self._protocol or await self._connect()
                return await self._round_trip(protocol, encode, decode)
        except (OSError, TimeoutError, FrameSizeError, ValueError) as exc:
            self.close()
            raise ChannelError(f"broker {self.broker_id}: {exc or type(exc).__name__}") from exc

    async def _connect(self) -> FrameProtocol:
        address = self._address(self.broker_id)
        if address is None:
            raise ChannelError(f"broker {self.broker_id} is not live")
        security = self._security
        context = None if security is None else security.ssl_context
        _, protocol = await asyncio.get_running_loop().create_connection(
            lambda: FrameProtocol(_MIN_ANSWER_BYTES, _MAX_ANSWER_BYTES, _connected,
                                  _ANSWER_OWN_BUFFER_BYTES),
            *address, local_addr=self._local, ssl=context,
            server_hostname=address[0] if context is not None else None)
        self._protocol = protocol
        if security is not None and security.sasl_mechanism is not None:
            await self._authenticate(protocol, security, security.sasl_mechanism)
        return protocol

    async def _authenticate(self, protocol: FrameProtocol, security: ChannelSecurity,
                            mechanism: str) -> None:
        """SaslHandshake v1 and SaslAuthenticate, as a Kafka client authenticates; a
        refusal closes the channel (the next request tries again)."""

        async def request(api_key: int, version: int, body: Any) -> Any:
            return await self._round_trip(protocol, *_kio(api_key, version, body))

        try:
            await sasl_client.authenticate_async(sasl_client.exchange(
                mechanism, security.username, security.password), request)
        except AuthenticationFailed as exc:
            self.close()
            raise ChannelError(f"broker {self.broker_id}: SASL {mechanism}: {exc}") from None

    async def _round_trip(self, protocol: FrameProtocol, encode: Encode, decode: Decode) -> Any:
        assert protocol.transport is not None
        self._correlation_id += 1
        protocol.transport.write(encode(self._correlation_id))
        # The frame's buffer is reused by the next answer: kio's decoding copies what it
        # keeps; a view of it is valid until the next read_frame.
        correlation_id, answer = decode(await protocol.read_frame())
        if correlation_id != self._correlation_id:
            raise ValueError(f"answer {correlation_id} to request {self._correlation_id}")
        return answer

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None


def _connected(_: FrameProtocol) -> None:
    """Nothing to start: the channel reads its answers itself."""


class BrokerChannels:
    """A channel to each other broker, opened on first use, with one request at a time
    on each: for a broker's own requests to the others besides fetching (a
    coordinator's markers, a leader's questions to transaction coordinators)."""

    def __init__(self, address: Callable[[int], tuple[str, int] | None], timeout_s: float,
                 source_address: str | None = None,
                 security: ChannelSecurity | None = None) -> None:
        self._address = address
        self.timeout_s = timeout_s
        self._source_address = source_address
        self._security = security
        self._channels: dict[int, tuple[BrokerChannel, asyncio.Lock]] = {}

    async def request(self, broker_id: int, api_key: int, version: int, body: Any) -> Any:
        """The answer of broker ``broker_id``; ChannelError if it gave none."""
        entry = self._channels.get(broker_id)
        if entry is None:
            entry = (BrokerChannel(broker_id, self._address, self.timeout_s,
                                   self._source_address, self._security), asyncio.Lock())
            self._channels[broker_id] = entry
        channel, lock = entry
        async with lock:
            return await channel.request(api_key, version, body)

    def close(self) -> None:
        for channel, _ in self._channels.values():
            channel.close()
        self._channels.clear()
