"""A Produce sink: answers every produce request at once and keeps nothing.

A broker's records/s is its own only if the load could have sent more: the same
``bench.saturate`` producers, pointed at this sink instead, show the most they can
send on this machine (the load's ceiling), against which a broker's figure is read.
It reads each request into a reused buffer and answers from the request's own
partitions, with error 0 and base offset 0, never looking at the records.

Run with ``python -m bench.sink PORT`` (``serving`` starts it as a process).
"""

from __future__ import annotations

import contextlib
import datetime
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, decode_request, encode_response, nested, response_schema
from gregor.protocol.errors import ErrorCode

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id


def _answer_for(frame: memoryview) -> bytes:
    """The answer to a produce request like ``frame``, correlation id 0."""
    _, version, _ = _HEADER.unpack_from(frame)
    _, body = decode_request(bytes(frame))
    partition_cls = nested(ApiKey.PRODUCE, version, "PartitionProduceResponse")
    topic_cls = nested(ApiKey.PRODUCE, version, "TopicProduceResponse")
    return encode_response(ApiKey.PRODUCE, version, 0, build(
        response_schema(ApiKey.PRODUCE, version),
        responses=tuple(build(topic_cls, name=t.name, partition_responses=tuple(
            build(partition_cls, index=p.index, error_code=ErrorCode.none, base_offset=0,
                  log_append_time=None, log_start_offset=0, record_errors=(),
                  error_message=None) for p in t.partition_data)) for t in body.topic_data),
        throttle_time=datetime.timedelta(0)))


def _serve(conn: socket.socket) -> None:
    buffer = bytearray(1 << 21)
    answers: dict[bytes, bytes] = {}  # by the request's bytes before its records
    with conn:
        while True:
            size_bytes = conn.recv(_SIZE.size, socket.MSG_WAITALL)
            if len(size_bytes) < _SIZE.size:
                return
            (size,) = _SIZE.unpack(size_bytes)
            if len(buffer) < size:
                buffer = bytearray(size)
            view = memoryview(buffer)[:size]
            got = 0
            while got < size:
                n = conn.recv_into(view[got:])
                if not n:
                    return
                got += n
            api_key, _, correlation_id = _HEADER.unpack_from(view)
            if api_key != ApiKey.PRODUCE:
                return  # a sink for produce loads only
            # Requests of one load differ only in their correlation id and records: the
            # answer is built once per shape (first 256 bytes past the correlation id).
            shape = bytes(view[8:264])
            answer = answers.get(shape)
            if answer is None:
                answer = answers[shape] = _answer_for(view)
            conn.sendall(answer[:4] + _SIZE.pack(correlation_id) + answer[8:])


def main() -> None:
    port = int(sys.argv[1])
    with socket.create_server(("127.0.0.1", port), backlog=64) as server:
        print("ready", flush=True)
        while True:
            conn, _ = server.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_serve, args=(conn,), daemon=True).start()


@contextlib.contextmanager
def serving(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """The sink in a process of its own on ``127.0.0.1:port`` while the block runs."""
    process = subprocess.Popen([sys.executable, "-m", "bench.sink", str(port)],
                               stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != b"ready":
            raise RuntimeError("the produce sink did not start")
        time.sleep(0.1)
        yield process
    finally:
        process.kill()
        process.wait()


if __name__ == "__main__":
    main()
