"""One client connection: read size-prefixed frames, dispatch in order, write responses.

Requests on a connection are handled one at a time, in order, as Kafka does, so
responses never need reordering. Anything malformed closes only this connection.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import TYPE_CHECKING, Any

from gregor.broker import api_versions
from gregor.broker.request import RawResponse, Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import MalformedRequest, decode_request, encode_response, peek_api
from gregor.storage.segment import FileRegion

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# Below this, copying a region through user space is cheaper than sendfile's
# pause-drain-resume dance on the transport.
SENDFILE_THRESHOLD = 64 * 1024


class ConnectionClosed(Exception):
    """Raised to drop a connection after a protocol violation (already logged)."""


class Connection:
    def __init__(self, broker: Broker, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername") or ("?", 0)
        self.client_host, self.client_port = peer[0], peer[1]
        self.max_request_size = broker.config["socket.request.max.bytes"]

    async def run(self) -> None:
        try:
            while True:
                prefix = await self.reader.readexactly(4)
                (size,) = _SIZE.unpack(prefix)
                if size < 8 or size > self.max_request_size:
                    self.broker.warn_once("frame-size", "closing %s:%s: request size %d outside "
                                          "[8, socket.request.max.bytes=%d]", self.client_host,
                                          self.client_port, size, self.max_request_size)
                    return
                frame = await self.reader.readexactly(size)
                response = await self.dispatch(frame)
                if response is not None:
                    await self.send(response)
        except (asyncio.IncompleteReadError, ConnectionError, ConnectionClosed):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connection from %s:%s failed", self.client_host, self.client_port)
        finally:
            self.writer.close()

    async def dispatch(self, frame: bytes) -> Any:
        try:
            api_key, version, correlation_id = peek_api(frame)
        except MalformedRequest:
            self.broker.warn_once("short-header", "closing %s: header too short", self.client_host)
            raise ConnectionClosed from None
        router = self.broker.router
        route = router.route(api_key, version)
        if route is None:
            if api_key == ApiKey.API_VERSIONS and version > 0:
                return api_versions.unsupported_version_response(
                    correlation_id, router.supported_versions())
            self.broker.warn_once(f"unsupported-{api_key}-{version}",
                                  "closing %s: unsupported api key %d version %d",
                                  self.client_host, api_key, version)
            raise ConnectionClosed
        try:
            header, body = decode_request(frame)
        except MalformedRequest as exc:
            self.broker.warn_once(f"malformed-{api_key}", "closing %s: %s", self.client_host, exc)
            log.debug("malformed frame starts %s", frame[:512].hex())
            raise ConnectionClosed from None
        request = Request(header, body, self.client_host, self.client_port)
        result = await route.handler(self.broker, request)
        if result is None or isinstance(result, RawResponse):
            return result
        return encode_response(api_key, version, correlation_id, result)

    async def send(self, response: bytes | RawResponse) -> None:
        writer = self.writer
        if isinstance(response, bytes):
            writer.write(response)
        else:
            loop = asyncio.get_running_loop()
            for chunk in response.chunks:
                if isinstance(chunk, bytes):
                    writer.write(chunk)
                elif isinstance(chunk, FileRegion) and chunk.length >= SENDFILE_THRESHOLD:
                    await loop.sendfile(writer.transport, chunk.file, chunk.position,
                                        chunk.length)
                else:
                    writer.write(chunk.read())
        await writer.drain()
