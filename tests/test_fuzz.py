"""Random and mutated frames, at the request decoder and at a live broker.

The seeds are small valid requests of every API version the broker serves, built
generically from kio's classes; the mutations are what corrupted or hostile input
looks like: bit flips, truncation, boundary values written over length and count
fields, inserted and deleted bytes, and wrong size prefixes.

The decoder must answer every frame with a request or ``MalformedRequest``. The
live broker must survive thousands of such frames on many connections: afterwards
a real client still reads back, byte for byte, what was written before, and the
broker's log holds no traceback and only a bounded number of warnings.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import multiprocessing
import random
import re
import struct
import time
import types
import typing
import uuid
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.types import TopicName
from raw_frames import BrokerLog

from gregor.broker import group_routes
from gregor.broker.process import BrokerProcess
from gregor.broker.router import Router
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import MalformedRequest, decode_request, encode_request
from gregor.protocol.record_codec import Record, encode_batch

_SIZE = struct.Struct(">i")

# Field values that make a seed request meaningful rather than merely decodable:
# sessionless fetches that do not wait, "latest" offset lookups, admin requests
# that only validate, broker defaults for new topics.
_SEED_VALUES: dict[str, Any] = {
    "acks": 1, "replica_id": -1, "current_leader_epoch": -1, "last_fetched_epoch": -1,
    "log_start_offset": -1, "session_epoch": -1, "timestamp": -1, "producer_id": -1,
    "producer_epoch": -1, "num_partitions": -1, "replication_factor": -1, "count": 2,
    "resource_type": 2, "endpoint_type": 1, "max_bytes": 64 * 1024,
    "partition_max_bytes": 64 * 1024, "min_bytes": 1, "validate_only": True,
    "assignments": (), "forgotten_topics_data": (), "transactional_id": None,
    "cluster_id": None, "rack_id": "", "topic_id": None, "broker_ids": (1,),
}


def seed_body(schema: type, topic: str, records: bytes) -> Any:
    """A small valid instance of a kio request class: one element in every array."""
    hints = typing.get_type_hints(schema)
    values = {}
    for field in dataclasses.fields(schema):
        if field.name in _SEED_VALUES:
            values[field.name] = _SEED_VALUES[field.name]
        else:
            values[field.name] = _seed_value(field, hints[field.name], topic, records)
    return schema(**values)


def _seed_value(field: dataclasses.Field, hint: Any, topic: str, records: bytes) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if typing.get_origin(hint) is tuple:
        return (_seed_value(field, typing.get_args(hint)[0], topic, records),)
    if dataclasses.is_dataclass(hint):
        return seed_body(hint, topic, records)
    kind = field.metadata.get("kafka_type")
    if kind == "string":
        return topic if hint is TopicName or field.name == "resource_name" else "fuzz"
    if kind == "records":
        return records
    if kind == "bytes":
        return b"fuzz"
    if kind == "uuid":
        return uuid.UUID(int=1)
    if kind == "bool":
        return False
    if kind in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kind in ("int8", "int16", "int32", "int64"):
        return 0
    if kind == "float64":  # a client quota's value (AlterClientQuotas)
        return 1.0
    raise AssertionError(f"no seed value for {field.name} ({kind})")


def _served_versions() -> list[tuple[int, int]]:
    """Every (api key, version) the broker decodes: its router's ranges, minus refusals."""
    router = Router()
    group_routes.register(router)  # as the broker does
    return [(key, version) for key, route in router.routes.items()
            for version in range(route.decodable_from or route.min_version,
                                 route.max_version + 1)]


def seed_frames(topic: str, records: bytes) -> list[bytes]:
    """One valid size-prefixed request per served (api key, version)."""
    return [encode_request(key, version, 1000 + i, "fuzz",
                           seed_body(load_request_schema(key, version), topic, records))
            for i, (key, version) in enumerate(_served_versions())]


_BOUNDARIES = (0, 1, -1, 0x7F, 0x80, 0xFF, 0x7FFF, -0x8000, 0xFFFF, 0x7FFFFFFF, -0x80000000)
# Compact lengths and counts are unsigned varints of up to five bytes (35 bits).
_LONG_LENGTHS = (2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**35 - 1)
_MUTATIONS = ("flip", "truncate", "int8", "int16", "int32", "varint", "insert", "delete")
Mutation = tuple[str, int, int]


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes((value,)))


def mutate(payload: bytes, mutations: list[Mutation]) -> bytes:
    """Apply mutations ``(kind, position, value)``; positions wrap around the payload."""
    data = bytearray(payload)
    for kind, position, value in mutations:
        position %= len(data) + 1
        if kind == "flip" and position < len(data):
            data[position] ^= 1 << (value % 8)
        elif kind == "truncate":
            del data[position:]
        elif kind in ("int8", "int16", "int32"):
            # Overwriting with a boundary value hits length, count and varint fields.
            width = {"int8": 1, "int16": 2, "int32": 4}[kind]
            boundary = _BOUNDARIES[value % len(_BOUNDARIES)]
            data[position:position + width] = (boundary % (1 << (8 * width))).to_bytes(width)
        elif kind == "varint":
            encoded = _uvarint(_LONG_LENGTHS[value % len(_LONG_LENGTHS)])
            data[position:position + len(encoded)] = encoded
        elif kind == "insert":
            data[position:position] = value.to_bytes(4, signed=True)[: 1 + value % 4]
        elif kind == "delete":
            del data[position:position + 1 + value % 16]
    return bytes(data)


def _records() -> bytes:
    return encode_batch([Record(i, 1_700_000_000_000 + i, b"key-%d" % i, b"value-%d" % i,
                                [("h", b"v")]) for i in range(3)])


# ------------------------------------------------------------------- decoder

_DECODER_SEEDS = [frame[_SIZE.size:] for frame in seed_frames("fuzz-topic", _records())]
_mutation = st.tuples(st.sampled_from(_MUTATIONS), st.integers(0, 1 << 16),
                      st.integers(-(2**31), 2**31 - 1))


def _decode_or_refuse(frame: bytes) -> None:
    """Decoding either refuses the frame or yields a request its handler can trust."""
    try:
        _, body = decode_request(frame)
    except MalformedRequest:
        return
    _assert_conforms(body)


def _assert_conforms(entity: Any) -> None:
    """No None where the schema does not allow null (handlers iterate arrays blindly)."""
    hints = typing.get_type_hints(type(entity))
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        hint = hints[field.name]
        if value is None:
            assert type(None) in typing.get_args(hint), f"{field.name} is null"
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item):
                _assert_conforms(item)


def test_every_seed_decodes() -> None:
    """The seeds are valid, so the mutations below start from real requests."""
    for frame in _DECODER_SEEDS:
        header, _ = decode_request(frame)
        assert header.client_id == "fuzz"


def _decode_all(frames: list[bytes]) -> None:
    for frame in frames:
        _decode_or_refuse(frame)


def test_claimed_array_lengths_cannot_abort_the_process() -> None:
    """Huge lengths written over every position of every seed, decoded in a child
    process: kio would abort the process (not raise) reserving memory for them."""
    lengths = [_uvarint(length) for length in _LONG_LENGTHS] + [_SIZE.pack(2**31 - 1)]
    frames = [frame[:position] + encoded + frame[position + len(encoded):]
              for frame in _DECODER_SEEDS for position in range(8, len(frame))
              for encoded in lengths]
    child = multiprocessing.get_context("spawn").Process(target=_decode_all, args=(frames,))
    child.start()
    child.join(120)
    assert child.exitcode == 0, f"decoding in a child process ended with {child.exitcode}"


@pytest.mark.timeout(60)  # "never hangs": a hang fails here instead of stalling the suite
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(_DECODER_SEEDS), mutations=st.lists(_mutation, min_size=1,
                                                                 max_size=4))
def test_decoder_answers_mutated_frames_with_request_or_malformed(seed: bytes,
                                                                 mutations: list[Mutation]
                                                                 ) -> None:
    _decode_or_refuse(mutate(seed, mutations))


@pytest.mark.timeout(60)
@settings(max_examples=500, deadline=None)
@given(header=st.sampled_from(_served_versions()), tail=st.binary(max_size=300))
def test_decoder_answers_random_bodies_with_request_or_malformed(header: tuple[int, int],
                                                                 tail: bytes) -> None:
    """Random bytes after a valid api key and version reach the body decoders."""
    _decode_or_refuse(struct.pack(">hhi", *header, 7) + tail)


@pytest.mark.timeout(60)
@settings(max_examples=300, deadline=None)
@given(frame=st.binary(max_size=200))
def test_decoder_answers_random_bytes_with_request_or_malformed(frame: bytes) -> None:
    _decode_or_refuse(frame)


# --------------------------------------------------------------- live broker

_FUZZ_FRAMES = 3000
_FUZZ_CONNECTIONS = 12
_FUZZ_SECONDS = 25.0
# Warnings are rate-limited per kind (a few per API key, per topic and error): far
# fewer than the frames sent, however many of them are bad.
_MAX_WARNINGS = 80


class _Fuzzer:
    """Sends mutated frames, a few per connection, on concurrent connections."""

    def __init__(self, bootstrap: str, seeds: list[bytes], rng: random.Random) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.address = (host, int(port))
        self.seeds = seeds
        self.rng = rng
        self.sent = 0

    def frame(self) -> bytes:
        rng = self.rng
        seed = rng.choice(self.seeds)
        roll = rng.random()
        if roll < 0.05:
            return _SIZE.pack(rng.choice([-1, 0, 3, 1 << 30, 2**31 - 1])) + seed[4:]
        if roll < 0.1:
            return _SIZE.pack(len(seed) - 4 + rng.randint(-8, 8)) + seed[4:]
        if roll < 0.15:
            payload = rng.randbytes(rng.randint(8, 200))
            return _SIZE.pack(len(payload)) + payload
        mutations = [(rng.choice(_MUTATIONS), rng.randrange(1 << 16),
                      rng.randint(-(2**31), 2**31 - 1)) for _ in range(rng.randint(1, 3))]
        payload = mutate(seed[4:], mutations)
        return _SIZE.pack(len(payload)) + payload

    async def run(self, frames: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(self._connection_loop(frames, deadline)
                               for _ in range(_FUZZ_CONNECTIONS)))

    async def _connection_loop(self, frames: int, deadline: float) -> None:
        while self.sent < frames and time.monotonic() < deadline:
            batch = [self.frame() for _ in range(self.rng.randint(1, 6))]
            self.sent += len(batch)
            reader, writer = await asyncio.open_connection(*self.address)
            try:
                writer.write(b"".join(batch))
                await writer.drain()
                writer.write_eof()
                # Read the answers until the broker closes; a fetch told to wait for
                # ages is abandoned instead, which the broker must cope with too.
                await asyncio.wait_for(reader.read(), 1.0)
            except (ConnectionError, TimeoutError):
                pass
            finally:
                writer.close()


def _produce(bootstrap: str, topic: str, count: int) -> list[tuple[bytes | None, bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "compression.type": "lz4"})
    written = [(None if i % 10 == 0 else b"key-%d" % (i % 7), uuid.uuid4().bytes * (i % 9))
               for i in range(count)]
    errors: list[KafkaError] = []
    for key, value in written:
        producer.produce(topic, value, key, on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(15) == 0 and not errors, errors
    return written


def _consume_all(bootstrap: str, topic: str, count: int) -> list[tuple[bytes | None, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fuzz-check-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    read: list[tuple[bytes | None, bytes]] = []
    try:
        while len(read) < count:
            messages = consumer.consume(count - len(read), timeout=15)
            assert messages, f"consumer stalled after {len(read)} of {count} records"
            for message in messages:
                assert message.error() is None, message.error()
                read.append((message.key(), message.value()))
    finally:
        consumer.close()
    return read


@pytest.mark.timeout(120)
def test_live_broker_survives_mutated_frames(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    bootstrap = fresh_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("fuzz-data", 1, 1),
                                       NewTopic("fuzz-victim", 2, 1)]).values():
        future.result(15)
    written = _produce(bootstrap, "fuzz-data", 300)
    log = BrokerLog(fresh_broker.log_path)

    # Seeds aim at a victim topic, so the data topic is only ever read by them; the
    # admin seeds only validate, and DeleteTopics names a topic that does not exist.
    seeds = [frame for frame in seed_frames("fuzz-victim", _records())
             if struct.unpack_from(">h", frame, 4)[0] != ApiKey.DELETE_TOPICS]
    seeds += [frame for frame in seed_frames("fuzz-doomed", _records())
              if struct.unpack_from(">h", frame, 4)[0] == ApiKey.DELETE_TOPICS]
    fuzzer = _Fuzzer(bootstrap, seeds, random.Random(20240611))
    asyncio.run(fuzzer.run(_FUZZ_FRAMES, _FUZZ_SECONDS))
    assert fuzzer.sent >= 500, "too few frames sent to mean anything"

    # Still serving real clients, and nothing written before was lost or altered.
    written += _produce(bootstrap, "fuzz-data", 20)
    assert _consume_all(bootstrap, "fuzz-data", len(written)) == written
    text = log.text()
    assert "Traceback" not in text
    assert " ERROR " not in text
    assert len(re.findall(r" WARNING ", text)) <= _MAX_WARNINGS
    # Connections the fuzzer abandoned (some parked in long fetches) end quietly.
    assert fresh_broker.stop() == 0
    assert "Traceback" not in log.text()
