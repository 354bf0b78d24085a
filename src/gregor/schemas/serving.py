"""The registry's HTTP server: uvicorn (httptools on uvloop), with two changes for the
calls every serializer makes, measured with py-spy and CPU counters under
``bench.schema_registry_bench``'s 64 closed-loop clients:

* A request the registry answers from memory on the spot (:data:`DirectAnswer`:
  ``GET /schemas/ids/{id}``, a lookup of a schema already parsed) is answered by the
  connection's protocol itself once the parser has the whole request: no ASGI task,
  request-response cycle, middleware or router per call. Through uvicorn's ASGI path
  and Starlette's, ``GET /schemas/ids/{id}`` cost the registry about 180 µs of CPU
  (user time) a call, here 50 µs. Every other request goes to the app as before.
* An answer the app gives leaves in one write: uvicorn writes an answer's head and
  its body apart, two sends, two TCP segments on loopback and a client woken twice,
  the first time for nothing. Here a write waits for the one that follows it in the
  same turn of the event loop (an answer's body follows its head).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import httptools
import uvicorn
from starlette.responses import Response
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

DirectAnswer = Callable[[str, str, bytes, bytes], Response | None]
"""The answer to a request (method, path, query string, body) given on the spot, or
None to let the app answer it."""


class _PairedWrites:
    """A transport whose write is held until the next one, or until the event loop's
    next turn if none comes, and then sent together with it."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._held is None:
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
        else:
            held, self._held = self._held, None
            self._transport.write(held + data)

    def write_whole(self, data: bytes) -> None:
        """Send ``data`` now, after what is held: it is a whole answer."""
        held, self._held = self._held or b"", None
        self._transport.write(held + data)

    def _flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _RegistryProtocol(HttpToolsProtocol):
    direct: DirectAnswer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._body: bytearray | None = None
        """The body of a request held back from the app, to be answered on the spot."""
        self._writes: _PairedWrites | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._writes = _PairedWrites(transport, self.loop)
        super().connection_made(self._writes)  # type: ignore[arg-type]

    def on_headers_complete(self) -> None:
        # Only between answers (an earlier request still with the app keeps its turn),
        # on a kept-alive HTTP/1.1 connection, whose answer needs no extra header, and
        # not for a client waiting for "100 Continue", which only the app sends.
        if (self.parser.should_keep_alive() and self.parser.get_http_version() == "1.1"
                and not self.parser.should_upgrade() and not self.expect_100_continue
                and (self.cycle is None or self.cycle.response_complete)):
            self._body = bytearray()
        else:
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._body is None:
            super().on_body(body)
        else:
            self._body += body

    def on_message_complete(self) -> None:
        body, self._body = self._body, None
        if body is None:
            super().on_message_complete()
            return
        url = httptools.parse_url(self.url)
        answer = None if b"%" in url.path else self.direct(
            self.parser.get_method().decode("ascii"), url.path.decode("ascii"),
            url.query or b"", bytes(body))
        if answer is None:
            # The app's turn, as if the request had just arrived whole.
            super().on_headers_complete()
            if body:
                super().on_body(bytes(body))
            super().on_message_complete()
            return
        content: list[bytes | memoryview] = [STATUS_LINE[answer.status_code]]
        for name, value in [*self.server_state.default_headers, *answer.raw_headers]:
            content += [name, b": ", value, b"\r\n"]
        content += [b"\r\n", answer.body]
        assert self._writes is not None
        self._writes.write_whole(b"".join(content))
        self.on_response_complete()


def serve(app: ASGIApp, listener: socket.socket, direct: DirectAnswer) -> None:
    """Serve ``app`` on the bound ``listener`` until SIGINT or SIGTERM, with the
    answers ``direct`` gives answered before the app."""
    protocol = type("RegistryProtocol", (_RegistryProtocol,), {"direct": staticmethod(direct)})
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2,
                            loop="uvloop", http=protocol)
    uvicorn.Server(config).run(sockets=[listener])
