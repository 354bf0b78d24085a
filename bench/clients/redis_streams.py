"""Redis Streams load generator: pipelined XADD, XREADGROUP to consume.

A topic of N partitions is N stream keys ``<name>:<p>``: like Kafka partitions,
each is an independently ordered log. Streams and groups are managed with
redis-py. The data path talks RESP over a plain socket parsed by hiredis (the C
parser redis-py itself uses) without redis-py's per-command layers: XADD
commands are encoded and joined into writes of 1,000 before the clock starts and
written back to back with 8 writes in flight (what ``redis-benchmark -P`` does),
and every reply is read and checked. That keeps the Python client from being
what is measured, as librdkafka's C core does for the Kafka systems.

Consumers read with XREADGROUP ... NOACK, the equivalent of a Kafka consumer that
does not commit (neither side acks per record), one stream per read in turn,
with two reads in flight as librdkafka keeps fetches in flight. Each read asks
for about 1 MiB (``COUNT`` of 1,024 records of 1 KiB, 10,485 of 100 B): Redis
builds a whole reply before sending any of it, so 10,000 records from each of 8
streams in one read made 80 MB replies that server and client took turns on
(431 MB/s on one stream fell to 147 MB/s on eight); replies of 1 MiB let them
overlap. bench/findings.md has the measurements behind the choice.
"""

from __future__ import annotations

import itertools
import socket
import time
from multiprocessing.connection import Connection
from operator import itemgetter
from typing import Any

import hiredis
import redis

from bench.cpu import Stopwatch, Window
from bench.pacing import paced
from bench.records import RecordSet, Tally, VerificationError, probe, sent_at

LOAD_GENERATOR = "RESP encoded before the clock, replies parsed by hiredis (C)"
_GROUP = b"bench"
_PIPELINE_CHUNK = 1000  # commands per write
_CHUNKS_IN_FLIGHT = 8
_READ_BYTES = 1 << 20  # asked for per consumer read
_LATENCY_READ_COUNT = 10_000
_RECV_BYTES = 1 << 20
_STALL_TIMEOUT_S = 30.0
_value_of = itemgetter(1)


def command(*parts: bytes) -> bytes:
    """One RESP command, as the server reads it off the socket."""
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def _xadd(key: bytes, value: bytes) -> bytes:
    return command(b"XADD", key, b"*", b"v", value)


def _xreadgroup(key: bytes, count: int, block_ms: int | None = None) -> bytes:
    block = [b"BLOCK", b"%d" % block_ms] if block_ms is not None else []
    return command(b"XREADGROUP", b"GROUP", _GROUP, b"c", b"COUNT", b"%d" % count, *block,
                   b"NOACK", b"STREAMS", key, b">")


def _keys(name: str, partitions: int) -> list[bytes]:
    return [f"{name}:{p}".encode() for p in range(partitions)]


class RespSocket:
    """A pipelined RESP connection: write commands, read replies as hiredis parses them."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=_STALL_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        data = self.sock.recv(_RECV_BYTES)
        if not data:
            raise ConnectionError("redis-server closed the connection")
        self.reader.feed(data)

    def reply(self) -> Any:
        while (reply := self.reader.gets()) is False:
            self._fill()
        if isinstance(reply, hiredis.ReplyError):
            raise VerificationError(f"redis-server answered {reply}")
        return reply

    def expect_ids(self, count: int) -> None:
        """Read ``count`` XADD replies, each must be an entry id."""
        gets = self.reader.gets
        got = 0
        while got < count:
            reply = gets()
            if reply is False:
                self._fill()
            elif reply.__class__ is bytes:
                got += 1
            else:
                raise VerificationError(f"XADD answered {reply!r}")


class RedisStreamsClient:
    distinguishes_acks = False

    def __init__(self, port: int) -> None:
        self.port = port
        self.address = str(port)
        self.admin = redis.Redis(host="127.0.0.1", port=port, protocol=2)

    def create(self, name: str, partitions: int) -> None:
        for key in _keys(name, partitions):
            self.admin.xgroup_create(key, _GROUP, id="0", mkstream=True)

    def delete(self, name: str, partitions: int) -> None:
        self.admin.delete(*_keys(name, partitions))

    def produce(self, name: str, partitions: int, records: RecordSet, acks: str,
                watch: Stopwatch) -> Window:
        keys = _keys(name, partitions)
        commands = [_xadd(keys[k % partitions], value) for k, value in enumerate(records.values())]
        writes = [(b"".join(commands[i:i + _PIPELINE_CHUNK]),
                   len(commands[i:i + _PIPELINE_CHUNK]))
                  for i in range(0, len(commands), _PIPELINE_CHUNK)]
        del commands
        conn = RespSocket(self.port)
        try:
            watch.start()
            in_flight: list[int] = []
            for data, count in writes:
                conn.send(data)
                in_flight.append(count)
                if len(in_flight) > _CHUNKS_IN_FLIGHT:
                    conn.expect_ids(in_flight.pop(0))
            conn.expect_ids(sum(in_flight))
            return watch.stop()
        finally:
            conn.close()

    def consume(self, name: str, partitions: int, records: RecordSet,
                watch: Stopwatch) -> Window:
        keys = _keys(name, partitions)
        count = max(1, _READ_BYTES // records.size)
        reads = itertools.cycle([_xreadgroup(key, count) for key in keys])
        partition_of = {key: p for p, key in enumerate(keys)}
        conn = RespSocket(self.port)
        tally = Tally()
        try:
            watch.start()
            conn.send(next(reads))
            deadline = time.monotonic() + _STALL_TIMEOUT_S
            while tally.count < records.count:
                conn.send(next(reads))
                if _tally_reply(conn.reply(), partition_of, tally):
                    deadline = time.monotonic() + _STALL_TIMEOUT_S
                elif time.monotonic() > deadline:
                    raise VerificationError(f"{name}: stalled at {tally.count} records")
            window = watch.stop()
            # The read still in flight must find nothing.
            _tally_reply(conn.reply(), partition_of, tally)
        finally:
            conn.close()
        tally.verify(records.partitions(partitions), name)
        return window

    def produce_at_rate(self, name: str, filler: bytes, rate: float, count: int) -> list[bytes]:
        key = _keys(name, 1)[0]
        conn = RespSocket(self.port)
        sent: list[bytes] = []
        try:
            for due in paced(rate, count):
                values = [probe(filler, seq, time.monotonic_ns())
                          for seq in range(len(sent), len(sent) + due)]
                conn.send(b"".join(_xadd(key, v) for v in values))
                conn.expect_ids(due)
                sent += values
        finally:
            conn.close()
        return sent

    @staticmethod
    def latency_consumer(port: str, name: str, count: int, ready: Any,
                         conn: Connection) -> None:
        redis_conn = RespSocket(int(port))
        read = _xreadgroup(_keys(name, 1)[0], _LATENCY_READ_COUNT, block_ms=1000)
        ready.set()
        tally = Tally()
        latencies = bytearray()
        while tally.count < count:
            redis_conn.send(read)
            reply = redis_conn.reply()
            now_ns = time.monotonic_ns()
            if not reply:
                continue
            values = [entry[1][1] for entry in reply[0][1]]
            tally.add(values)
            latencies += b"".join((now_ns - sent_at(v)).to_bytes(8, "little") for v in values)
        redis_conn.close()
        conn.send((bytes(latencies), tally))


def _tally_reply(reply: Any, partition_of: dict[bytes, int], tally: Tally) -> bool:
    """Add an XREADGROUP reply's values to ``tally``; False if it held none."""
    if not reply:
        return False
    found = False
    for key, entries in reply:
        if entries:
            tally.add(list(map(_value_of, map(_value_of, entries))), partition_of[key])
            found = True
    return found
