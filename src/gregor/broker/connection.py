"""One client connection: read size-prefixed frames, dispatch in order, write responses.

Requests on a connection are handled one at a time, in order, as Kafka does, and
answered in that order. One exception: an acks=all produce whose records are
appended and only wait for the followers lets the client's next produce be
handled meanwhile (up to :data:`MAX_WAITING_ANSWERS` waiting), or a producer with
several requests in flight to one partition would have the whole replication
round trip of each between two appends. Any other request is handled only once
every earlier one has been answered, so it sees what they did.

The socket is read only a bounded distance ahead of the handler
(:mod:`gregor.broker.frame_protocol`), so a client that sends without reading is
held back by TCP flow control instead of making the broker buffer its requests or
its answers.

A client over one of its quotas (:mod:`gregor.broker.throttling`) gets its answer with
``throttle_time_ms`` set, and its connection is not read for that long (KIP-219).

Whatever a client sends, the worst outcome is that its own connection is
closed: every other client keeps being served. Refusals are logged through the
broker's rate limiter, so a misbehaving client cannot flood the log either.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from time import perf_counter
from typing import TYPE_CHECKING, Any, NoReturn

from gregor.broker import api_versions
from gregor.broker.authentication import authenticate
from gregor.broker.frame_protocol import ClientGone, FrameProtocol, FrameSizeError
from gregor.broker.request import DelayedResponse, RawResponse, Request
from gregor.broker.throttling import (
    MUTATIONS,
    Charge,
    bounded_fetch,
    waits_for_client,
    with_throttle,
)
from gregor.metrics.broker_metrics import FETCH, BrokerMetrics
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import MalformedRequest, decode_request, encode_response, peek_api
from gregor.protocol.fetch_response import Region
from gregor.security.listeners import Listener
from gregor.security.quotas import ClientQuotas, QuotaManager
from gregor.security.session import Session, certificate_subject, user
from gregor.storage.segment import FileRegion

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

log = logging.getLogger(__name__)

# api key, api version and correlation id: the least needed to route or refuse a request.
MIN_REQUEST_SIZE = 8
# Below this, copying a region through user space is cheaper than sendfile's
# pause-drain-resume dance on the transport.
SENDFILE_THRESHOLD = 64 * 1024
# What a file region is encrypted by at a time: a 256 KiB piece stays in the caches
# through the copies asyncio's TLS makes, and the transport pauses the connection's
# writes (see Connection.__init__) while one waits for the socket.
TLS_WRITE_BYTES = 256 * 1024
# acks=all produce answers a connection may have waiting for replication while it
# handles the next produce. A waiting answer holds its partitions' offsets, not the
# records (appended already), so the bound is loose: a producer lingering 1 ms sends a
# request a millisecond, and with 5 waiting (the in-flight limit of Kafka's idempotent
# producers, used here first) a replication round over 5 ms under load let fewer
# through than arrived. The rest waited in the socket's buffer, seconds' worth at
# 20,000 records/s over 8 partitions, while the brokers' CPU stayed below half a core.
MAX_WAITING_ANSWERS = 100

Response = bytes | RawResponse | DelayedResponse | None


class ConnectionClosed(Exception):
    """Raised to drop the connection: after a protocol violation (already logged), or
    by a handler whose only way to answer is closing it (acks=0 produce errors)."""


class Connection:
    def __init__(self, broker: Broker, frames: FrameProtocol, listener: Listener) -> None:
        self.broker = broker
        self.frames = frames
        assert frames.transport is not None
        self.transport = frames.transport
        peer = self.transport.get_extra_info("peername") or ("?", 0)
        self.client_host, self.client_port = peer[0], peer[1]
        self.session = Session(listener.name, listener.protocol)
        # sendfile writes into the socket itself, below TLS: encrypted connections copy
        # file regions through the TLS transport instead.
        self._zero_copy = not listener.protocol.tls
        if listener.protocol.tls:
            # Paused as soon as a piece waits in the TLS buffer for the socket (asyncio's
            # default, 512 KiB, let encrypted bytes pile up there and be copied again).
            self.transport.set_write_buffer_limits(high=TLS_WRITE_BYTES)
        if listener.protocol.sasl:
            # Until authenticated, frames are held to SASL's size, as Kafka does; set
            # here, before the first bytes are split into frames.
            frames.max_frame = min(frames.max_frame,
                                   broker.config["sasl.server.max.receive.size"])
        if listener.protocol.tls and not listener.protocol.sasl:
            certificate = self.transport.get_extra_info("peercert")
            if certificate:
                self.session.principal = user(certificate_subject(certificate["subject"]))
        # The last request decoded: a Fetch's tells whether a follower sent it.
        self.request: Request | None = None
        self._session_timer: asyncio.TimerHandle | None = None
        # Answers still to send, oldest first, while acks=all produces wait: each a
        # task that sends its answer once ready and once the one before it went out.
        self._answers: deque[asyncio.Task[None]] = deque()
        # The quotas this client is held to, and what they were resolved for (the
        # quotas' version, the client id, the user); and until when (the event loop's
        # clock) the connection is not read, after a throttled answer.
        self._quotas: ClientQuotas | None = None
        self._quotas_for: tuple[int, str | None, str] | None = None
        self._muted_until = 0.0

    async def run(self) -> None:
        """Serve requests until the client leaves, is refused, or the broker stops.

        Never raises, not even when cancelled by the broker's shutdown: whatever
        happens, only this connection ends.
        """
        metrics = self.broker.metrics
        try:
            if self.session.protocol.sasl:
                await authenticate(self)
                self.session.end = self._end_session
                self._watch_session()
            while True:
                if self._muted_until:
                    await self._unmuted()
                frame = await self.read_frame()
                api_key, version, correlation_id = peek_api(frame)
                if self._answers:
                    produce = api_key == ApiKey.PRODUCE
                    await self._answered(MAX_WAITING_ANSWERS - 1 if produce else 0)
                if metrics is None:
                    response = await self.dispatch(frame, api_key, version, correlation_id)
                    if isinstance(response, DelayedResponse) or self._answers:
                        self._answer_later(response, None)
                    elif response is not None:
                        await self.send(response)
                    continue
                # Counted as Kafka's RequestMetrics do: the time from arrival to the answer
                # sent, of which the wait behind earlier requests. Measured here rather
                # than in a coroutine of its own (one fewer per request), and what is
                # counted is read now, from the frame's header while it is in the caches:
                # read back from the decoded request once answered, it cost several times
                # as much.
                started = perf_counter()
                received = self.frames.received_at
                response = await self.dispatch(frame, api_key, version, correlation_id)
                if isinstance(response, DelayedResponse) or self._answers:
                    self._answer_later(response, self._counter(metrics, api_key, version,
                                                               received, started))
                    continue
                if response is not None:
                    await self.send(response)
                follower = False
                if api_key == FETCH:
                    request = self.request
                    assert request is not None  # a Fetch is always decoded
                    follower = getattr(request.body, "replica_id", -1) >= 0
                metrics.request_completed(api_key, version, follower, received, started,
                                          perf_counter())
        except (ConnectionError, TimeoutError, ConnectionClosed):
            pass  # the client left (possibly mid-frame), or was refused and that was logged
        except asyncio.CancelledError:
            pass  # broker shutdown
        except Exception as exc:
            self.broker.warn_once(f"send-{type(exc).__name__}", "closing %s:%s: sending failed",
                                  self.client_host, self.client_port, exc_info=exc)
        finally:
            for task in self._answers:
                task.cancel()
            if self._session_timer is not None:
                self._session_timer.cancel()
            self.transport.close()

    def _watch_session(self) -> None:
        """Close the connection once its SASL session has ended unrenewed (KIP-368); a
        re-authentication moves the end, and the timer follows it."""
        expires_at = self.session.expires_at
        if expires_at is None:
            return
        loop = asyncio.get_running_loop()
        if self._session_timer is not None:
            self._session_timer.cancel()
        if expires_at > loop.time():
            self._session_timer = loop.call_at(expires_at, self._watch_session)
            return
        self._session_timer = None
        self.broker.warn_once("sasl-expired", "closing %s:%s: its SASL session ended",
                              self.client_host, self.client_port)
        self.transport.close()

    def _end_session(self) -> None:
        """End the session now (a failed re-authentication), once the answer saying so,
        written in this task step, is on its way."""
        self.session.expires_at = 0.0
        asyncio.get_running_loop().call_soon(self._watch_session)

    @staticmethod
    def _counter(metrics: BrokerMetrics, api_key: int, version: int, received: float,
                 started: float) -> Callable[[], None]:
        """What counts an answer sent later, as ``run`` counts one sent at once."""
        return lambda: metrics.request_completed(api_key, version, False, received, started,
                                                 perf_counter())

    def _answer_later(self, response: Response, sent: Callable[[], None] | None) -> None:
        """Send ``response`` once it is ready and the answers before it went out; then
        call ``sent``."""
        previous = self._answers[-1] if self._answers else None
        task = asyncio.get_running_loop().create_task(self._send_later(response, previous, sent))
        self._answers.append(task)
        task.add_done_callback(self._answers.remove)

    async def _send_later(self, response: Response, previous: asyncio.Task[None] | None,
                          sent: Callable[[], None] | None) -> None:
        # A failure ends the connection, as it would have in ``run``.
        try:
            if isinstance(response, DelayedResponse):
                response = await response.answer
                assert not isinstance(response, DelayedResponse)  # _encoded's answer
            if previous is not None and not previous.done():
                await asyncio.wait([previous])
            if self.transport.is_closing():
                return
            if response is not None:
                await self.send(response)
            if sent is not None:
                sent()
        except (ConnectionError, TimeoutError, ConnectionClosed):
            self.transport.close()
        except Exception as exc:
            self.broker.warn_once(f"send-{type(exc).__name__}", "closing %s:%s: sending failed",
                                  self.client_host, self.client_port, exc_info=exc)
            self.transport.close()

    async def _answered(self, keep: int) -> None:
        """Wait until at most ``keep`` answers are still to be sent."""
        while len(self._answers) > keep:
            await asyncio.wait([self._answers[0]])
        if self.transport.is_closing():
            raise ConnectionClosed

    async def read_frame(self) -> bytes | memoryview:
        try:
            return await self.frames.read_frame()
        except FrameSizeError as exc:
            # Checked before reading (or allocating) anything of the body, as Kafka does.
            self.refuse("frame-size", "request size %d outside [%d, socket.request.max.bytes=%d]",
                         exc.size, self.frames.min_frame, self.frames.max_frame)

    async def dispatch(self, frame: bytes | memoryview, api_key: int, version: int,
                       correlation_id: int) -> Response:
        """Handle one request frame (its header's first fields already read: ``peek_api``);
        return the response to send, if any."""
        router = self.broker.router
        route = router.route(api_key, version)
        if route is None:
            if api_key == ApiKey.API_VERSIONS:
                return api_versions.unsupported_version_response(
                    correlation_id, router.supported_versions())
            # One log kind per served API (plus one for all unknown keys), so that
            # random keys and versions cannot mint unbounded rate-limiter entries.
            known = api_key in router.routes
            self.refuse(f"unsupported-version-{api_key}" if known else "unknown-api-key",
                         "unsupported api key %d version %d", api_key, version)
        try:
            header, body = decode_request(frame)
        except MalformedRequest as exc:
            log.debug("malformed frame starts %s", frame[:512].hex())
            self.refuse(f"malformed-{api_key}", "%s", exc)
        request = self.request = Request(header, body, self.client_host, self.client_port,
                                         self.session)
        charge = None
        quotas = self.broker.quotas
        if quotas.active:
            client = self._client_quotas(quotas, header.client_id)
            if client is not None:
                if api_key == ApiKey.FETCH:
                    request = bounded_fetch(client, request)
                charge = Charge(client, api_key, request, len(frame))
                if api_key == ApiKey.FETCH:
                    request = self.request = dataclasses.replace(
                        request, fetch_quota=self._fetch_quota(charge))
                elif api_key in MUTATIONS and client.mutation is not None:
                    request = self.request = dataclasses.replace(
                        request, mutation_quota=client.mutation)
        return await self._encoded(api_key, version, correlation_id,
                                   route.handler(self.broker, request), charge)

    def _client_quotas(self, quotas: QuotaManager, client_id: str | None
                       ) -> ClientQuotas | None:
        """The quotas this client is held to, resolved again only when the quotas, the
        client id or the principal changed."""
        user = self.session.principal.name
        key = (quotas.version, client_id, user)
        if key != self._quotas_for:
            self._quotas_for = key
            self._quotas = quotas.for_client(user, client_id or "",
                                             asyncio.get_running_loop().time() * 1000)
        return self._quotas

    @staticmethod
    def _fetch_quota(charge: Charge) -> Callable[[int], int]:
        loop = asyncio.get_running_loop()
        return lambda size: charge.fetch_answer(size, loop.time() * 1000)

    async def _throttled(self, charge: Charge, api_key: int, version: int,
                         result: Any) -> Any:
        """Record the request against its client's quotas. Over them, the answer says
        how long to wait and the connection is not read for that long; a client too old
        to wait by itself gets its answer only then (KIP-219)."""
        loop = asyncio.get_running_loop()
        throttle_ms = charge.throttle_ms(result, loop.time() * 1000)
        if not throttle_ms:
            return result
        self._muted_until = max(self._muted_until, loop.time() + throttle_ms / 1000)
        if not waits_for_client(api_key, version):
            await asyncio.sleep(throttle_ms / 1000)
        return with_throttle(api_key, version, result, throttle_ms)

    async def _unmuted(self) -> None:
        delay = self._muted_until - asyncio.get_running_loop().time()
        self._muted_until = 0.0
        if delay > 0:
            await asyncio.sleep(delay)

    async def _encoded(self, api_key: int, version: int, correlation_id: int,
                       handled: Awaitable[Any], charge: Charge | None = None) -> Response:
        """The handler's answer, encoded; a delayed one is encoded when it comes."""
        try:
            result = await handled
            if charge is not None:
                charge.handled()
            if isinstance(result, DelayedResponse):
                return DelayedResponse(self._encoded(api_key, version, correlation_id,
                                                     result.answer, charge))
            if charge is not None:
                result = await self._throttled(charge, api_key, version, result)
            if result is None or isinstance(result, RawResponse):
                return result
            metrics = self.broker.metrics
            if metrics is not None:
                # Produce and Fetch count their answers per partition; most others
                # carry one error code.
                error_code = getattr(result, "error_code", None)
                if error_code is not None:
                    metrics.answered(api_key, error_code)
            return encode_response(api_key, version, correlation_id, result)
        except ConnectionClosed:
            raise  # a handler's deliberate way to answer (acks=0 produce errors)
        except Exception as exc:
            # A broker bug, but one request's: log it (with its traceback) and drop
            # only this connection, whose client will reconnect and retry.
            self.broker.warn_once(f"failed-{api_key}-{type(exc).__name__}",
                                  "closing %s:%s: api key %d version %d failed",
                                  self.client_host, self.client_port, api_key, version,
                                  exc_info=exc)
            raise ConnectionClosed from None

    async def send(self, response: bytes | RawResponse) -> None:
        transport = self.transport
        if isinstance(response, bytes):
            transport.write(response)
        else:
            # Consecutive small pieces (a fetch's headers and the record sets too small
            # to sendfile) go out in one write: one per piece made a send, and a wakeup
            # of the client, each.
            loop = asyncio.get_running_loop()
            pending: list[bytes] = []
            size = 0
            for chunk in response.chunks:
                if isinstance(chunk, bytes):
                    piece = chunk
                elif isinstance(chunk, FileRegion) and chunk.length >= SENDFILE_THRESHOLD:
                    if pending:
                        transport.write(b"".join(pending))
                        pending, size = [], 0
                    with self._region_read(chunk):
                        if self._zero_copy:
                            await self._send_region(loop, chunk)
                        else:
                            await self._encrypt_region(chunk)
                    continue
                else:
                    with self._region_read(chunk):
                        piece = chunk.read()
                pending.append(piece)
                size += len(piece)
                if size >= SENDFILE_THRESHOLD:
                    # A fetch may hold many small regions: never buffer more than the
                    # transport's high-water mark of them for a client that is not reading.
                    transport.write(b"".join(pending))
                    pending, size = [], 0
                    await self.frames.drain()
            if pending:
                transport.write(b"".join(pending))
        await self.frames.drain()

    @contextlib.contextmanager
    def _region_read(self, region: Region) -> Iterator[None]:
        """A read error from a segment as its bytes go out (``sendfile`` or ``pread``:
        EIO from a failed disk) fails its log directory, as one in finding the bytes
        does (KIP-112); the answer is cut short, so the connection closes and the
        client fetches again, from another leader once the controller moved it."""
        try:
            yield
        except OSError as exc:
            if (isinstance(exc, ConnectionError) or exc.errno != errno.EIO
                    or not isinstance(region, FileRegion)):
                raise  # the socket's: the client left
            self.broker.log_manager.file_failed(region.file.name, exc)
            raise ConnectionClosed from None

    async def _send_region(self, loop: asyncio.AbstractEventLoop, region: FileRegion) -> None:
        """Zero-copy a file region to the client.

        When nothing is queued on the transport, ``os.sendfile`` goes straight into
        the socket; the loop's ``sendfile`` (pause reading, wait for a drain event,
        resume) is only needed for what the socket buffer cannot take at once.
        """
        transport = self.transport
        if transport.is_closing():
            raise ClientGone("the client left")  # sendfile would raise
        position, remaining = region.position, region.length
        sock = transport.get_extra_info("socket")
        if sock is not None and transport.get_write_buffer_size() == 0:
            with contextlib.suppress(BlockingIOError):
                while remaining:
                    sent = os.sendfile(sock.fileno(), region.file.fileno(), position,
                                       remaining)
                    if sent == 0:
                        break
                    position += sent
                    remaining -= sent
        if remaining:
            await loop.sendfile(transport, region.file, position, remaining)

    async def _encrypt_region(self, region: FileRegion) -> None:
        """Copy a file region through the TLS transport, :data:`TLS_WRITE_BYTES` at a
        time, each read once it has room.

        Read whole, a region of a megabyte went through memory five times after being
        read (joined to the pieces before it, encrypted into a TLS memory buffer that
        grew and was zeroed as it grew, read out of it, copied into the socket
        transport's buffer): perf gave copying and zeroing 20% of the broker's samples,
        the cipher 27%. Pieces that stay in the CPU's caches cost little each pass.
        """
        fd = region.file.fileno()
        position, end = region.position, region.position + region.length
        while position < end:
            piece = os.pread(fd, min(TLS_WRITE_BYTES, end - position), position)
            if not piece:
                # The segment shrank under the fetch: the answer's sizes no longer hold.
                raise ConnectionClosed
            self.transport.write(piece)
            position += len(piece)
            await self.frames.drain()

    def refuse(self, kind: str, message: str, *args: object) -> NoReturn:
        """Log (rate-limited, by ``kind``) and close the connection."""
        self.broker.warn_once(kind, "closing %s:%s: " + message, self.client_host,
                              self.client_port, *args)
        raise ConnectionClosed
