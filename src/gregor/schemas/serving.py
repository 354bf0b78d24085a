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
* A bodiless ``GET`` that arrives whole in one read while the connection is between
  requests (what a serializer's client sends, one request at a time) is answered
  before httptools and uvicorn see it: its request line and the few headers that
  change how it is answered are looked at, the rest is not, and an answer's head and
  body are kept encoded (until the ``date`` header changes, once a second). httptools'
  callbacks, uvicorn's scope, a Starlette request and its query string, and arming a
  keep-alive timer per request cost the registry about 45 µs of CPU a call, an id lookup
  there (in-process, load 13); here it is about 5 µs. Anything else, or anything
  unusual in such a request (a body, ``Expect``, ``Upgrade``, ``Connection`` other than
  keep-alive, an escaped path), takes the parser's path.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
from collections.abc import Callable
from typing import Any

import httptools
import uvicorn
from starlette.responses import JSONResponse, Response
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


_UNUSUAL_HEADER = re.compile(
    rb"\r\n(?:content-length|transfer-encoding|expect|upgrade|connection(?!: keep-alive\r\n))"
    rb"[ \t]*:", re.IGNORECASE)
"""A header that makes a GET more than a question answered from memory (a body, a
client waiting for "100 Continue", a protocol switch, a connection to close)."""


class KeptAnswer(JSONResponse):
    """An answer the app keeps and gives again and again (an id's schema, which never
    changes): the server keeps its bytes on the wire too."""


class _EncodedAnswers:
    """Answers as the bytes that go on the wire, a :class:`KeptAnswer`'s kept while the
    server's default headers (its ``date``) stay the same list."""

    def __init__(self) -> None:
        self._defaults: list[tuple[bytes, bytes]] | None = None
        self._encoded: dict[int, tuple[Response, bytes]] = {}

    def encoded(self, answer: Response, defaults: list[tuple[bytes, bytes]]) -> bytes:
        """``answer`` after the status line and ``defaults``, the server's headers."""
        if defaults is not self._defaults:
            self._defaults, self._encoded = defaults, {}
        keep = isinstance(answer, KeptAnswer)
        kept = self._encoded.get(id(answer)) if keep else None
        if kept is not None and kept[0] is answer:
            return kept[1]
        content: list[bytes | memoryview] = [STATUS_LINE[answer.status_code]]
        for name, value in [*defaults, *answer.raw_headers]:
            content += [name, b": ", value, b"\r\n"]
        content += [b"\r\n", answer.body]
        whole = b"".join(content)
        if keep and len(self._encoded) < 100_000:
            # Holding the answer keeps its id(): no other answer can take it meanwhile.
            self._encoded[id(answer)] = (answer, whole)
        return whole


class _RegistryProtocol(HttpToolsProtocol):
    direct: DirectAnswer
    answers: _EncodedAnswers
    """The server's, shared by its connections."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._body: bytearray | None = None
        """The body of a request held back from the app, to be answered on the spot."""
        self._writes: _PairedWrites | None = None
        self._in_request = False
        """The parser has begun a request and not yet seen all of it."""
        self._active_at = 0.0
        """When the last request answered before the parser arrived (loop time)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._writes = _PairedWrites(transport, self.loop)
        super().connection_made(self._writes)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        if (not self._in_request and (self.cycle is None or self.cycle.response_complete)
                and not self.pipeline and data.endswith(b"\r\n\r\n")
                and self._answer_whole_get(data)):
            return
        super().data_received(data)

    def _answer_whole_get(self, data: bytes) -> bool:
        """Answer ``data``, one whole bodiless HTTP/1.1 GET, if the app answers it from
        memory; False (nothing done) to leave it to the parser."""
        line_end = data.find(b"\r\n")
        if (data.find(b"\r\n\r\n") != len(data) - 4 or not data.startswith(b"GET /")
                or data[line_end - 9:line_end] != b" HTTP/1.1"):
            return False
        target = data[4:line_end - 9]
        if _UNUSUAL_HEADER.search(data, line_end) is not None:
            return False
        path, _, query = target.partition(b"?")
        if not path.isascii() or b"%" in path or b"#" in target or b" " in target:
            return False
        answer = self.direct("GET", path.decode("ascii"), query, b"")
        if answer is None:
            return False
        assert self._writes is not None
        self._writes.write_whole(self.answers.encoded(answer, self.server_state.default_headers))
        self.server_state.total_requests += 1
        # The keep-alive timeout counts from here: the armed timer looks again when it
        # fires, rather than being cancelled and armed again for every request.
        self._active_at = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler)
        return True

    def timeout_keep_alive_handler(self) -> None:
        idle = self.loop.time() - self._active_at
        if idle < self.timeout_keep_alive:
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive - idle, self.timeout_keep_alive_handler)
            return
        super().timeout_keep_alive_handler()

    def on_message_begin(self) -> None:
        self._in_request = True
        super().on_message_begin()

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
        self._in_request = False
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
        assert self._writes is not None
        self._writes.write_whole(self.answers.encoded(answer, self.server_state.default_headers))
        self.on_response_complete()


def serve(app: ASGIApp, listener: socket.socket, direct: DirectAnswer) -> None:
    """Serve ``app`` on the bound ``listener`` until SIGINT or SIGTERM, with the
    answers ``direct`` gives answered before the app."""
    protocol = type("RegistryProtocol", (_RegistryProtocol,),
                    {"direct": staticmethod(direct), "answers": _EncodedAnswers()})
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2,
                            loop="uvloop", http=protocol)
    # uvicorn stops on SIGTERM, then raises it again once its own handler is gone: with
    # the default handler that ends the process before the caller's clean-up, which
    # leaves the primary's group so that another instance takes over at once (not
    # after the session timeout). SIGTERM then ends this call as SIGINT does.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(0)
