"""FrameProtocol over real loopback sockets: however TCP cuts the byte stream, the
handler gets exactly the frames that were sent, in order, and a client that sends
without waiting is held back once the read-ahead is full."""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import Awaitable, Callable

import psutil
import pytest

from gregor.broker.frame_protocol import (
    READ_AHEAD_BYTES,
    ClientGone,
    FrameProtocol,
    FrameSizeError,
)

MAX_FRAME = 192 * 1024 * 1024


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


Scenario = Callable[[asyncio.StreamWriter, FrameProtocol], Awaitable[None]]


def run_connected(scenario: Scenario) -> None:
    """Run ``scenario`` with a client (its writer) connected to a server speaking
    FrameProtocol (the server's side of that connection), then close both."""
    async def main() -> None:
        connected: asyncio.Queue[FrameProtocol] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: FrameProtocol(8, MAX_FRAME, connected.put_nowait), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await scenario(writer, await connected.get())
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


async def read_all(frames: FrameProtocol, count: int) -> list[bytes]:
    # Copied at once: a frame's buffer may be reused after the next read_frame().
    return [bytes(await frames.read_frame()) for _ in range(count)]


def bodies(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    sizes = [8, 9, 100, 31 * 1024, 32 * 1024, 70 * 1024, 1_000_000, 12, 3 * 1024 * 1024, 5000,
             9 * 1024 * 1024, 11, 20 * 1024 * 1024]
    sizes += [rng.choice([8, 200, 20_000, 40_000, 600_000]) for _ in range(60)]
    return [rng.randbytes(size) for size in sizes]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_frames_arrive_whole_and_in_order_however_the_stream_is_cut(seed: int) -> None:
    async def scenario(writer: asyncio.StreamWriter, frames: FrameProtocol) -> None:
        sent = bodies(seed)
        stream = b"".join(map(framed, sent))
        rng = random.Random(seed)
        reader_task = asyncio.create_task(read_all(frames, len(sent)))
        position = 0
        while position < len(stream):
            step = rng.choice([1, 3, 4, 5, 17, 4096, 65_536, 300_000])
            writer.write(stream[position : position + step])
            await writer.drain()
            position += step
            if rng.random() < 0.3:
                await asyncio.sleep(0)  # let the server receive this piece on its own
        received = await asyncio.wait_for(reader_task, 30)
        assert [len(b) for b in received] == [len(b) for b in sent]
        assert received == sent

    run_connected(scenario)


def test_a_size_outside_the_limits_fails_after_the_frames_before_it() -> None:
    async def scenario(writer: asyncio.StreamWriter, frames: FrameProtocol) -> None:
        writer.write(framed(b"a" * 10) + struct.pack(">i", MAX_FRAME + 1) + b"x" * 100)
        await writer.drain()
        assert bytes(await frames.read_frame()) == b"a" * 10
        with pytest.raises(FrameSizeError) as refused:
            await asyncio.wait_for(frames.read_frame(), 5)
        assert refused.value.size == MAX_FRAME + 1

    run_connected(scenario)


def test_an_announced_frame_holds_only_the_memory_of_what_was_sent() -> None:
    """A client may announce up to socket.request.max.bytes and then send nothing."""
    async def scenario(writer: asyncio.StreamWriter, frames: FrameProtocol) -> None:
        before = psutil.Process().memory_info().rss
        writer.write(struct.pack(">i", MAX_FRAME) + b"x" * 1000)
        await writer.drain()
        reading = asyncio.create_task(frames.read_frame())
        await asyncio.sleep(0.2)  # nothing to wait for: the frame never completes
        assert not reading.done()
        assert psutil.Process().memory_info().rss - before < MAX_FRAME // 4
        reading.cancel()

    run_connected(scenario)


def test_the_client_leaving_mid_frame_ends_the_frames() -> None:
    async def scenario(writer: asyncio.StreamWriter, frames: FrameProtocol) -> None:
        writer.write(framed(b"whole frame") + framed(b"b" * 100_000)[:5000])
        await writer.drain()
        writer.close()
        assert bytes(await frames.read_frame()) == b"whole frame"
        with pytest.raises(ClientGone):
            await asyncio.wait_for(frames.read_frame(), 5)

    run_connected(scenario)


def test_reading_pauses_once_the_read_ahead_is_full_and_resumes_when_consumed() -> None:
    async def scenario(writer: asyncio.StreamWriter, frames: FrameProtocol) -> None:
        body = b"p" * 1_000_000
        count = 8 * READ_AHEAD_BYTES // len(body)  # beyond what socket buffers hold
        sending = asyncio.create_task(_send(writer, [framed(body)] * count))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        assert frames.transport is not None
        while frames.transport.is_reading():
            assert loop.time() < deadline, "reading never paused"
            await asyncio.sleep(0.01)
        assert not sending.done()  # the sender is held back by TCP, not buffered by us
        for _ in range(count):
            assert bytes(await asyncio.wait_for(frames.read_frame(), 10)) == body
        await asyncio.wait_for(sending, 10)
        assert frames.transport.is_reading()

    run_connected(scenario)


async def _send(writer: asyncio.StreamWriter, chunks: list[bytes]) -> None:
    for chunk in chunks:
        writer.write(chunk)
        await writer.drain()
