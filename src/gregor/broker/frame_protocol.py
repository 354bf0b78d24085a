"""The socket side of a client connection: size-prefixed frames in, bytes out.

asyncio's streams copy a request three times before a handler sees it (``recv`` into a
new ``bytes``, ``feed_data`` into the reader's buffer, ``readexactly`` out of it); on
produce that was a fifth of the broker's CPU. Here the kernel writes each request
into the buffer it will live in: small requests arrive together in a staging buffer
(one ``recv`` for several of them) and are copied out once, and the body of a large
request (a produce of a megabyte) is received straight into a buffer of its own, so
it is copied by the kernel only. Those large buffers are reused from one request to
the next: a fresh megabyte costs the kernel 256 page faults and zeroed pages, which
measured more than the copies saved. A frame above ``own_buffer_max`` (by default
:data:`OWN_BUFFER_MAX_BYTES`, which no produce request of the default sizes comes near)
is gathered from staging as it arrives instead, so that a client announcing 100 MB
and sending nothing holds no more of the broker's memory than it sent. A broker's
channel to its peers raises it: there the frames are answers to its own requests,
sized by what it asked for.

Reading runs ahead of the handlers by at most :data:`READ_AHEAD_BYTES` of complete
frames; beyond that the transport stops reading and TCP flow control holds the
client back. Writing follows the transport's high and low water marks, as
``StreamWriter.drain`` does.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections import deque
from collections.abc import Callable

_SIZE = struct.Struct(">i")
_STAGING_BYTES = 64 * 1024
# A frame this large gets a buffer of its own instead of passing through staging.
_OWN_BUFFER_BYTES = _STAGING_BYTES // 2
_OWN_BUFFER_ROUNDING = 256 * 1024
# A frame up to this size is received into a buffer of its own, and a connection keeps
# one spare such buffer for its next large frame.
OWN_BUFFER_MAX_BYTES = 8 * 1024 * 1024
READ_AHEAD_BYTES = 4 * 1024 * 1024


class FrameSizeError(Exception):
    """A size prefix outside the allowed range: nothing of the body is read."""

    def __init__(self, size: int) -> None:
        super().__init__(f"frame size {size}")
        self.size = size


class ClientGone(ConnectionError):
    """The client closed its side or the connection broke."""


class FrameProtocol(asyncio.BufferedProtocol):
    """Split a byte stream into request frames (without their size prefix).

    A frame is handed out as ``bytes`` or as a writable ``memoryview`` of a buffer that
    is reused once the next frame is asked for: the handler must be done with it by
    then. Writable, so that a produce request's batches are stamped with their offsets
    where they arrived (kio, which takes read-only buffers only, gets a read-only view).
    """

    def __init__(self, min_frame: int, max_frame: int,
                 on_connect: Callable[[FrameProtocol], None],
                 own_buffer_max: int = OWN_BUFFER_MAX_BYTES) -> None:
        self.min_frame = min_frame
        self.max_frame = max_frame
        self.own_buffer_max = own_buffer_max
        self._on_connect = on_connect
        self.transport: asyncio.Transport | None = None
        self._staging = bytearray(_STAGING_BYTES)
        self._start = 0  # first byte in staging not yet part of a handed-out frame
        self._end = 0  # end of the bytes received into staging
        self._large: memoryview | None = None  # a large frame being received into its own buffer
        self._large_buffer = bytearray()
        self._large_filled = 0
        self._huge: bytearray | None = None  # a frame above own_buffer_max, as received
        self._huge_size = 0
        self._spare: bytearray | None = None
        self._lent: bytearray | None = None  # the buffer behind the frame last handed out
        # Each frame with the time its last byte arrived (time.perf_counter()).
        self._frames: deque[tuple[bytes | memoryview, bytearray | None, float]] = deque()
        # When the frame last handed out arrived: where its request queue time starts.
        self.received_at = 0.0
        self._queued_bytes = 0
        self._reading_paused = False
        self._error: BaseException | None = None
        self._frame_waiter: asyncio.Future[None] | None = None
        self._writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None

    # ------------------------------------------------------------ asyncio side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._on_connect(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._large is not None:
            return self._large[self._large_filled:]
        return memoryview(self._staging)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._large is not None:
            self._large_filled += nbytes
            if self._large_filled == len(self._large):
                self._push(self._large, self._large_buffer)
                self._large = None
            return
        if self._huge is not None:
            # Received at the start of staging; what lies past the frame is the next one.
            taken = min(nbytes, self._huge_size - len(self._huge))
            self._huge += memoryview(self._staging)[:taken]
            if len(self._huge) == self._huge_size:
                self._push(memoryview(self._huge), None)
                self._huge = None
            self._start, self._end = taken, nbytes
        else:
            self._end += nbytes
        self._split_staging()

    def eof_received(self) -> bool:
        self._fail(ClientGone("the client closed the connection"))
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ClientGone(str(exc) if exc else "connection closed"))
        self._writing_paused = False
        _wake(self._drain_waiter)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        _wake(self._drain_waiter)

    # ------------------------------------------------------------ handler side
    async def read_frame(self) -> bytes | memoryview:
        """The next request frame; raises :class:`FrameSizeError` or :class:`ClientGone`
        once the frames received before the failure have been handed out."""
        if self._lent is not None:
            if len(self._lent) <= self.own_buffer_max and (
                    self._spare is None or len(self._spare) < len(self._lent)):
                self._spare = self._lent
            self._lent = None
        while not self._frames:
            if self._error is not None:
                raise self._error
            self._frame_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._frame_waiter
            finally:
                self._frame_waiter = None
        frame, self._lent, self.received_at = self._frames.popleft()
        self._queued_bytes -= len(frame)
        if self._reading_paused and self._queued_bytes < READ_AHEAD_BYTES and self._error is None:
            self._reading_paused = False
            assert self.transport is not None
            self.transport.resume_reading()
        return frame

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its low water mark."""
        assert self.transport is not None
        while self._writing_paused:
            self._drain_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._drain_waiter
            finally:
                self._drain_waiter = None
        if self.transport.is_closing():
            raise ClientGone("the connection is closing")

    # --------------------------------------------------------------- internals
    def _split_staging(self) -> None:
        staging = self._staging
        while self._end - self._start >= _SIZE.size:
            (size,) = _SIZE.unpack_from(staging, self._start)
            if not self.min_frame <= size <= self.max_frame:
                self._fail(FrameSizeError(size))
                return
            body = self._start + _SIZE.size
            received = self._end - body
            if received >= size:
                self._push(bytes(memoryview(staging)[body : body + size]), None)
                self._start = body + size
            elif size > self.own_buffer_max:
                self._huge = bytearray(memoryview(staging)[body : self._end])
                self._huge_size = size
                self._start = self._end = 0
                return
            elif size >= _OWN_BUFFER_BYTES:
                self._large_buffer = self._buffer_for(size)
                self._large = memoryview(self._large_buffer)[:size]
                self._large[:received] = memoryview(staging)[body : self._end]
                self._large_filled = received
                self._start = self._end = 0
                return
            else:
                break
        # Keep the partial frame, if any, at the front: a small one then always fits.
        if self._start == self._end:
            self._start = self._end = 0
        elif self._start > 0:
            pending = self._end - self._start
            staging[:pending] = memoryview(staging)[self._start : self._end]
            self._start, self._end = 0, pending

    def _buffer_for(self, size: int) -> bytearray:
        spare = self._spare
        if spare is not None and len(spare) >= size:
            self._spare = None
            return spare
        return bytearray(-(-size // _OWN_BUFFER_ROUNDING) * _OWN_BUFFER_ROUNDING)

    def _push(self, frame: bytes | memoryview, buffer: bytearray | None) -> None:
        self._frames.append((frame, buffer, time.perf_counter()))
        self._queued_bytes += len(frame)
        if self._queued_bytes >= READ_AHEAD_BYTES and not self._reading_paused:
            self._reading_paused = True
            assert self.transport is not None
            self.transport.pause_reading()
        _wake(self._frame_waiter)

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
            if self.transport is not None and not self.transport.is_closing():
                self.transport.pause_reading()
                self._reading_paused = True
        _wake(self._frame_waiter)


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
