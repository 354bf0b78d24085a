"""A bare Kafka Fetch round trip over one socket, to time the broker's offset lookup alone.

A full client adds its own queues and threads between asking for an offset and
handing out a record; one Fetch v4 request on an open connection, timed from
write to the last byte of the answer, isolates what the issue asks about: does
finding an offset get slower as the log grows?
"""

from __future__ import annotations

import datetime
import socket
import struct
import time

from kio.index import load_response_schema
from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
from kio.serial import entity_reader

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import encode_request
from gregor.protocol.record_batch import read_header

_VERSION = 4
_SIZE = struct.Struct(">i")
_read_response = entity_reader(load_response_schema(ApiKey.FETCH, _VERSION))


class FetchProbe:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def fetch(self, topic: str, offset: int, max_bytes: int) -> float:
        """Seconds for one fetch at ``offset``; checks the answer starts at that offset."""
        self.correlation_id += 1
        request = encode_request(ApiKey.FETCH, _VERSION, self.correlation_id, "bench", FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=max_bytes,
            isolation_level=0, topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
                partition=0, fetch_offset=offset, partition_max_bytes=max_bytes),)),)))
        started = time.perf_counter()
        self.sock.sendall(request)
        frame = self._read_frame()
        elapsed = time.perf_counter() - started
        self._check(frame, offset)
        return elapsed

    def _read_frame(self) -> bytes:
        (size,) = _SIZE.unpack(self._read_exactly(_SIZE.size))
        return self._read_exactly(size)

    def _read_exactly(self, size: int) -> bytes:
        buffer = bytearray(size)
        view = memoryview(buffer)
        got = 0
        while got < size:
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionError("broker closed the connection")
            got += n
        return bytes(buffer)

    def _check(self, frame: bytes, offset: int) -> None:
        response, _ = _read_response(frame, 4)  # after the correlation id
        partition = response.responses[0].partitions[0]
        if partition.error_code != 0:
            raise RuntimeError(f"fetch at {offset} failed with error {partition.error_code}")
        records = partition.records or b""
        header = read_header(records)
        if not header.base_offset <= offset <= header.last_offset:
            raise RuntimeError(f"fetch at {offset} returned batch "
                               f"{header.base_offset}..{header.last_offset}")
