"""Bare Kafka Fetch requests over one socket: the broker's fetch path without a client's costs.

librdkafka turns every record into a message object that Python then touches:
consuming 1 KiB records that way tops out far below what a zero-copy fetch path
can send. Two questions need the broker alone:

- how fast can it serve a log (``read_all``): Fetch requests back to back, every
  batch's CRC32C checked and its records counted, nothing else done per record;
- does finding an offset get slower as the log grows (``timed_fetch``): one
  Fetch on an open connection, timed from write to the last byte of the answer.
"""

from __future__ import annotations

import datetime
import socket
import struct
import time
from collections.abc import Mapping

from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic

from bench.records import VerificationError
from gregor.client.connection import BrokerConnection, ClientSettings, client_security
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import encode_request
from gregor.protocol.record_batch import (
    HEADER_SIZE,
    InvalidRecordBatch,
    read_header,
    read_offset_prefix,
    validate_batch,
)

_VERSION = 4
_SIZE = struct.Struct(">i")
_CORRELATION_ID_BYTES = 4  # Fetch v4 answers with response header v0
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
# partition index, error code, high watermark, last stable offset, aborted count
_PARTITION_HEAD = struct.Struct(">ihqqi")
_ABORTED_TRANSACTION_BYTES = 16  # producer id, first offset
# librdkafka's default fetch.wait.max.ms. Data is already there, so a broker
# answers at once; Tansu answers max_wait=0 with an empty response.
_MAX_WAIT = datetime.timedelta(milliseconds=500)
PARTITION_MAX_BYTES = 4 * 1024 * 1024
FETCH_MAX_BYTES = 32 * 1024 * 1024


def _whole_batches(records: memoryview, fetch_offset: int, check_crc: bool = True
                   ) -> tuple[int, int]:
    """``(records, next offset)`` of the complete batches in a fetched record set.

    Each batch's CRC32C is checked unless ``check_crc`` is false (bench.saturate, whose
    clients must stay cheaper than the broker); a truncated last batch (cut at max
    bytes, as Kafka does) is left for the next fetch.
    """
    count, pos, next_offset = 0, 0, fetch_offset
    while len(records) - pos >= HEADER_SIZE:
        _, size = read_offset_prefix(records, pos)
        if pos + size > len(records):
            break
        try:
            header = validate_batch(records, pos) if check_crc else read_header(records, pos)
        except InvalidRecordBatch as exc:
            raise VerificationError(f"fetched batch at {next_offset} is corrupt: {exc}") from None
        if header.last_offset >= next_offset:
            count += header.last_offset - max(header.base_offset, next_offset) + 1
            next_offset = header.last_offset + 1
        pos += size
    return count, next_offset


class KafkaFetcher:
    def __init__(self, bootstrap: str, security: Mapping[str, str] | None = None) -> None:
        """Connected to ``bootstrap``; with ``security`` (librdkafka's
        ``security.protocol``, ``ssl.*``, ``sasl.*`` settings) over TLS and/or
        authenticated by SASL first, as gregor's own clients connect."""
        host, port = bootstrap.rsplit(":", 1)
        address = (host, int(port))
        self.sock: socket.socket
        if security:
            self.sock = BrokerConnection(address, ClientSettings(
                (address,), "bench", security=client_security(security))).detach()
        else:
            self.sock = socket.create_connection(address)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0
        self.buffer = bytearray(1 << 20)

    def close(self) -> None:
        self.sock.close()

    def _request(self, topic: str, offsets: dict[int, int], partition_max_bytes: int,
                 max_bytes: int) -> bytes:
        self.correlation_id += 1
        return encode_request(ApiKey.FETCH, _VERSION, self.correlation_id, "bench", FetchRequest(
            replica_id=-1, max_wait=_MAX_WAIT, min_bytes=1, max_bytes=max_bytes,
            isolation_level=0, topics=(FetchTopic(topic=topic, partitions=tuple(
                FetchPartition(partition=p, fetch_offset=offset,
                               partition_max_bytes=partition_max_bytes)
                for p, offset in offsets.items())),)))

    def _read_frame(self) -> memoryview:
        """The next response frame, received into a reused buffer (valid until the next)."""
        (size,) = _SIZE.unpack(self._read_exactly(_SIZE.size))
        return self._read_exactly(size)

    def _read_exactly(self, size: int) -> memoryview:
        if len(self.buffer) < size:
            self.buffer = bytearray(size)
        view = memoryview(self.buffer)[:size]
        got = 0
        while got < size:
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionError("broker closed the connection")
            got += n
        return view

    @staticmethod
    def _answer(frame: memoryview) -> dict[int, memoryview]:
        """Each partition's record set, as views into the frame (no copy).

        Fetch v4 response: correlation id, throttle time, then per topic its name
        and per partition index, error, high watermark, last stable offset,
        aborted transactions and the records.
        """
        pos = _CORRELATION_ID_BYTES + 4
        records: dict[int, memoryview] = {}
        (topics,) = _I32.unpack_from(frame, pos)
        pos += 4
        for _ in range(topics):
            (name_length,) = _I16.unpack_from(frame, pos)
            pos += 2 + name_length
            (partitions,) = _I32.unpack_from(frame, pos)
            pos += 4
            for _ in range(partitions):
                index, error, _hw, _lso, aborted = _PARTITION_HEAD.unpack_from(frame, pos)
                pos += _PARTITION_HEAD.size + max(aborted, 0) * _ABORTED_TRANSACTION_BYTES
                if error != 0:
                    raise VerificationError(f"fetch of partition {index} failed with error {error}")
                (length,) = _I32.unpack_from(frame, pos)
                pos += 4
                records[index] = frame[pos : pos + max(length, 0)]
                pos += max(length, 0)
        return records

    def timed_fetch(self, topic: str, offset: int, max_bytes: int) -> float:
        """Seconds for one fetch at ``offset`` of partition 0; checks the answer holds it."""
        request = self._request(topic, {0: offset}, max_bytes, max_bytes)
        started = time.perf_counter()
        self.sock.sendall(request)
        frame = self._read_frame()
        elapsed = time.perf_counter() - started
        records = self._answer(frame)[0]
        header = read_header(records)
        if not header.base_offset <= offset <= header.last_offset:
            raise VerificationError(f"fetch at {offset} returned batch "
                                    f"{header.base_offset}..{header.last_offset}")
        return elapsed

    def read_all(self, topic: str, partitions: int, expected: int) -> int:
        """Fetch every partition from offset 0 until ``expected`` records came; return them.

        Stops early when a whole round of fetches finds nothing new within
        max_wait (all records were acknowledged before, so nothing is arriving).
        """
        offsets = {p: 0 for p in range(partitions)}
        total = 0
        while total < expected:
            self.sock.sendall(self._request(topic, offsets, PARTITION_MAX_BYTES,
                                            FETCH_MAX_BYTES))
            found = 0
            for partition, records in self._answer(self._read_frame()).items():
                count, offsets[partition] = _whole_batches(records, offsets[partition])
                found += count
            if not found:
                break
            total += found
        return total
