"""Redis Streams load generator: pipelined XADD, XREADGROUP to consume (redis-py + hiredis).

A topic of N partitions is N stream keys ``<name>:<p>``: like Kafka partitions,
each is an independently ordered log. XADD commands are encoded to RESP before
the clock starts and written back to back (what ``redis-benchmark -P`` does),
so the figure is Redis's rather than redis-py's command builder's; replies are
read by hiredis and each one checked. Consumers read with XREADGROUP ... NOACK,
the equivalent of a Kafka consumer that does not commit (neither side acks per
record), keeping two reads in flight as librdkafka keeps fetches in flight.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from operator import itemgetter
from typing import Any

from redis.connection import Connection as RedisConnection

from bench.cpu import Stopwatch, Window
from bench.pacing import paced
from bench.records import RecordSet, Tally, VerificationError, stamp_of, stamped

_GROUP = b"bench"
_PIPELINE_CHUNK = 1000  # commands per write
_CHUNKS_IN_FLIGHT = 8
_READ_COUNT = 10_000
_STALL_TIMEOUT_S = 30.0
_value_of = itemgetter(1)


def command(*parts: bytes) -> bytes:
    """One RESP command, as the server reads it off the socket."""
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def _xadd(key: bytes, value: bytes) -> bytes:
    return command(b"XADD", key, b"*", b"v", value)


def _keys(name: str, partitions: int) -> list[bytes]:
    return [f"{name}:{p}".encode() for p in range(partitions)]


class RedisStreamsClient:
    distinguishes_acks = False

    def __init__(self, port: int) -> None:
        self.port = port
        self.address = str(port)

    def _connect(self) -> RedisConnection:
        conn = RedisConnection(host="127.0.0.1", port=self.port, socket_timeout=_STALL_TIMEOUT_S,
                               protocol=2)
        conn.connect()
        return conn

    def _call(self, *parts: bytes) -> Any:
        conn = self._connect()
        try:
            conn.send_packed_command([command(*parts)])
            return conn.read_response()
        finally:
            conn.disconnect()

    def create(self, name: str, partitions: int) -> None:
        for key in _keys(name, partitions):
            self._call(b"XGROUP", b"CREATE", key, _GROUP, b"0", b"MKSTREAM")

    def delete(self, name: str, partitions: int) -> None:
        self._call(b"DEL", *_keys(name, partitions))

    def produce(self, name: str, partitions: int, records: RecordSet, acks: str,
                watch: Stopwatch) -> Window:
        encoded = [[_xadd(key, value) for value in records.pool] for key in _keys(name, partitions)]
        conn = self._connect()
        try:
            watch.start()
            in_flight: list[int] = []
            for chunk in _chunks(encoded, records.count):
                conn.send_packed_command([b"".join(chunk)], check_health=False)
                in_flight.append(len(chunk))
                if len(in_flight) > _CHUNKS_IN_FLIGHT:
                    _read_replies(conn, in_flight.pop(0))
            for size in in_flight:
                _read_replies(conn, size)
            window = watch.stop()
        finally:
            conn.disconnect()
        return window

    def consume(self, name: str, partitions: int, records: RecordSet,
                watch: Stopwatch) -> Window:
        keys = _keys(name, partitions)
        read = command(b"XREADGROUP", b"GROUP", _GROUP, b"c", b"COUNT", b"%d" % _READ_COUNT,
                       b"NOACK", b"STREAMS", *keys, *([b">"] * len(keys)))
        conn = self._connect()
        tally = Tally()
        try:
            watch.start()
            conn.send_packed_command([read])
            deadline = time.monotonic() + _STALL_TIMEOUT_S
            while tally.count < records.count:
                conn.send_packed_command([read])
                if not _tally_reply(conn.read_response(), tally):
                    if time.monotonic() > deadline:
                        raise VerificationError(f"{name}: stalled at {tally.count} records")
                    time.sleep(0.001)
                else:
                    deadline = time.monotonic() + _STALL_TIMEOUT_S
            window = watch.stop()
            _tally_reply(conn.read_response(), tally)  # the read still in flight
        finally:
            conn.disconnect()
        tally.verify(records.count, records.expected_checksum(), name)
        return window

    def produce_at_rate(self, name: str, filler: bytes, rate: float, count: int) -> Tally:
        key = _keys(name, 1)[0]
        conn = self._connect()
        sent = Tally()
        try:
            for due in paced(rate, count):
                values = [stamped(filler, time.monotonic_ns()) for _ in range(due)]
                conn.send_packed_command([b"".join(_xadd(key, v) for v in values)])
                _read_replies(conn, due)
                sent.add(values)
        finally:
            conn.disconnect()
        return sent

    @staticmethod
    def latency_consumer(port: str, name: str, count: int, ready: Any,
                         conn: Connection) -> None:
        redis = RedisConnection(host="127.0.0.1", port=int(port), socket_timeout=60, protocol=2)
        redis.connect()
        read = command(b"XREADGROUP", b"GROUP", _GROUP, b"c", b"COUNT", b"%d" % _READ_COUNT,
                       b"BLOCK", b"1000", b"NOACK", b"STREAMS", _keys(name, 1)[0], b">")
        ready.set()
        tally = Tally()
        latencies = bytearray()
        while tally.count < count:
            redis.send_packed_command([read])
            reply = redis.read_response()
            now_ns = time.monotonic_ns()
            if not reply:
                continue
            values = [entry[1][1] for entry in reply[0][1]]
            tally.add(values)
            latencies += b"".join((now_ns - stamp_of(v)).to_bytes(8, "little") for v in values)
        redis.disconnect()
        conn.send((bytes(latencies), tally.count, tally.checksum))


def _chunks(encoded: list[list[bytes]], count: int) -> Iterator[list[bytes]]:
    """Pre-encoded XADDs for records 0..count-1, round-robin over the stream keys."""
    partitions, pool = len(encoded), len(encoded[0])
    for start in range(0, count, _PIPELINE_CHUNK):
        yield [encoded[i % partitions][i % pool]
               for i in range(start, min(start + _PIPELINE_CHUNK, count))]


def _read_replies(conn: RedisConnection, count: int) -> None:
    """Read ``count`` XADD replies; hiredis raises on an error reply."""
    for _ in range(count):
        reply = conn.read_response()
        if not isinstance(reply, bytes):
            raise VerificationError(f"XADD answered {reply!r}")


def _tally_reply(reply: Any, tally: Tally) -> bool:
    """Add an XREADGROUP reply's values to ``tally``; False if it held none."""
    if not reply:
        return False
    values: list[bytes] = []
    for _key, entries in reply:
        values += map(_value_of, map(_value_of, entries))
    tally.add(values)
    return bool(values)
