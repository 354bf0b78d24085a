"""BrokerChannel: one connection from this broker to another, as a Kafka client.

Followers fetch from leaders over it with Kafka's own requests (Fetch with a
replica id, OffsetForLeaderEpoch), encoded and decoded by kio like any client's.
One request is in flight at a time, which is all a fetcher needs; a failed
connection is dropped and opened again by the next request.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any

from gregor.protocol.codec import decode_response, encode_request

_SIZE = struct.Struct(">i")
CLIENT_ID = "gregor-replica-fetcher"


class ChannelError(Exception):
    """The other broker could not be reached or answered nothing usable."""


class BrokerChannel:
    def __init__(self, broker_id: int, address: Callable[[int], tuple[str, int] | None],
                 timeout_s: float, source_address: str | None = None) -> None:
        self.broker_id = broker_id
        self._address = address
        self._local = None if source_address is None else (source_address, 0)
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        try:
            # asyncio.timeout rather than wait_for: Python 3.11's wait_for can swallow a
            # cancellation that arrives as the request fails, leaving a fetcher that
            # cannot be stopped.
            async with asyncio.timeout(self.timeout_s):
                return await self._exchange(api_key, version, body)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            self.close()
            raise ChannelError(f"broker {self.broker_id}: {exc or type(exc).__name__}") from exc

    async def _exchange(self, api_key: int, version: int, body: Any) -> Any:
        if self._writer is None:
            address = self._address(self.broker_id)
            if address is None:
                raise ChannelError(f"broker {self.broker_id} is not live")
            self._reader, self._writer = await asyncio.open_connection(
                *address, local_addr=self._local)
        assert self._reader is not None
        self._correlation_id += 1
        self._writer.write(encode_request(api_key, version, self._correlation_id, CLIENT_ID,
                                          body))
        (size,) = _SIZE.unpack(await self._reader.readexactly(_SIZE.size))
        frame = await self._reader.readexactly(size)
        correlation_id, answer = decode_response(api_key, version, frame)
        if correlation_id != self._correlation_id:
            raise ValueError(f"answer {correlation_id} to request {self._correlation_id}")
        return answer

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
