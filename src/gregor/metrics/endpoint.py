"""The HTTP endpoint Prometheus scrapes, served by the broker's own event loop.

prometheus_client's own server runs in a thread, where a scrape would read the
broker's dicts while the loop changes them. Here the loop accepts the scrape and
copies what it reports (:mod:`.snapshot`: one consistent moment, no lock on the hot
path), then renders the copy on the loop too. A worker thread rendering it costs more
than it saves: while it holds the interpreter lock, the loop, which lets go of the lock
at every send, waits up to a switch interval (5 ms) to get it back after each one, and
1 KiB consumes ran 12-16% slower with a scrape every second
(``bench.metrics_bench``). On the loop a scrape holds clients up once, for as long as it
renders, so it is made cheap (:mod:`.exposition`). The server speaks just what a scraper
needs: GET (or HEAD) of the metrics path, one request per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_LATEST
from prometheus_client.process_collector import ProcessCollector

from gregor.metrics import collector, snapshot
from gregor.metrics.broker_metrics import BrokerMetrics
from gregor.metrics.exposition import Exposition, LineStarts
from gregor.metrics.loop_monitor import LoopMonitor

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

log = logging.getLogger(__name__)

_MAX_HEAD_BYTES = 16 * 1024
_READ_TIMEOUT_S = 10.0
OPENMETRICS = OPENMETRICS_LATEST.split(";")[0]  # application/openmetrics-text


class MetricsServer:
    """``http://host:port/path``: this broker's metrics in Prometheus' text format (or
    OpenMetrics, when the scraper asks for it)."""

    def __init__(self, broker: Broker, metrics: BrokerMetrics,
                 listener: tuple[str, int, str]) -> None:
        self.host, self.port, self.path = listener
        self.broker = broker
        self.metrics = metrics
        self.loop_monitor = LoopMonitor()
        self._server: asyncio.Server | None = None
        # The process's own figures (CPU, memory, file descriptors), as
        # prometheus_client reads them.
        self._process = ProcessCollector(registry=None)
        self._line_starts = LineStarts()

    @property
    def url(self) -> str:
        """Where to scrape (on this machine, when listening on every address)."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}{self.path}"

    async def bind(self) -> None:
        """Bind now (a port in use fails the broker's start), serve from ``start``."""
        self._server = await asyncio.start_server(
            self._serve, self.host or None, self.port, reuse_address=True,
            start_serving=False, limit=_MAX_HEAD_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        assert self._server is not None
        self.loop_monitor.start()
        await self._server.start_serving()
        log.info("serving metrics on %s", self.url)

    async def stop(self) -> None:
        self.loop_monitor.stop()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            writer.write(await self._answer(head))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError):
            pass  # not a scraper, or it left
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, head: bytes) -> bytes:
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        parts = request_line.split()
        if len(parts) != 3 or parts[0] not in ("GET", "HEAD"):
            return _response(405, "text/plain", b"only GET\n")
        if parts[1].split("?", 1)[0] != self.path:
            return _response(404, "text/plain", f"metrics are at {self.path}\n".encode())
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        _, content_type = choose_encoder(headers.get("accept", ""))
        taken = snapshot.take(self.broker, self.metrics, self.loop_monitor)
        body = self._render(taken, content_type.startswith(OPENMETRICS))
        return _response(200, content_type, b"" if parts[0] == "HEAD" else body, len(body))

    def _render(self, taken: snapshot.Snapshot, openmetrics: bool) -> bytes:
        """The text of one scrape: the broker's snapshot, then the process's figures."""
        out = Exposition(openmetrics, self._line_starts)
        collector.write(taken, out)
        for family in self._process.collect():
            out.family(family.name, family.documentation, family.type)
            for sample in family.samples:
                out.sample(sample.name, tuple(sample.labels), tuple(sample.labels.values()),
                           sample.value)
        self._line_starts = out.kept
        return out.text().encode()


def _response(status: int, content_type: str, body: bytes, length: int | None = None) -> bytes:
    reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}[status]
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n"
            "Connection: close\r\n\r\n")
    return head.encode("latin-1") + body
