"""Shared helpers for the client tests: a sample of awkward records, consume loops for
each client, and the raw requests for what a real client hides.

Real clients retry, resequence and swallow errors, so the tests that must see one
exact broker answer -- a duplicate produce, a sequence gap, a long poll's timing --
build the request with kio (the schemas the broker itself uses) and send it over a
:class:`WireConnection`.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import importlib.resources
import io
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message
from kafka.protocol.schemas import load_json
from kio.index import load_payload_module, load_response_schema
from kio.serial import entity_reader
from kio.static.constants import EntityType

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, encode_request
from gregor.protocol.record_batch import BatchHeader, read_header
from gregor.protocol.record_codec import Record, encode_batch, iter_batches

TIMEOUT = 20.0
# Recent timestamps: Kafka rolls a segment per batch when the first batch of a segment
# is older than segment.ms, and deletes it at the next retention check once older than
# retention.ms -- both a week by default.
BASE_TIMESTAMP = (int(time.time()) - 3600) * 1000
_SIZE = struct.Struct(">i")


class WireConnection:
    """One blocking socket to the broker that sends kio requests and decodes the answers."""

    def __init__(self, bootstrap: str, timeout: float = 15.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api_key: int, version: int, body: Any) -> int:
        """Send a request without waiting for its answer; return its correlation id."""
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, "gregor-tests",
                                         body))
        return self.correlation_id

    def receive(self, api_key: int, version: int) -> Any:
        """Read the next response frame and decode it as ``api_key`` v``version``."""
        (size,) = _SIZE.unpack(self._read_exactly(4))
        frame = self._read_exactly(size)
        schema = load_response_schema(api_key, version)
        header, header_size = entity_reader(schema.__header_schema__)(frame, 0)
        assert header.correlation_id == self.correlation_id
        body, _ = entity_reader(schema)(frame, header_size)
        return body

    def request(self, api_key: int, version: int, body: Any) -> Any:
        self.send(api_key, version, body)
        return self.receive(api_key, version)

    def _read_exactly(self, size: int) -> bytes:
        buffer = io.BytesIO()
        while buffer.tell() < size:
            chunk = self.sock.recv(size - buffer.tell())
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buffer.write(chunk)
        return buffer.getvalue()


@dataclass(frozen=True, slots=True)
class Sample:
    """One record as a test produced it, to compare with what comes back."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def sample_records(count: int, partitions: int = 1, *, null_header_values: bool = True,
                   keyless_and_valueless: bool = True) -> list[Sample]:
    """Records mixing null/empty keys and values, binary bytes, repeated and null headers,
    and out-of-order explicit timestamps, spread round-robin over ``partitions``.

    kafka-python refuses a record with neither key nor value, and has no null header
    values, hence the switches.
    """
    samples = []
    for i in range(count):
        key: bytes | None = b"key-%d" % i
        value: bytes | None = bytes(range(i % 256)) + b"value-%d" % i
        if i % 7 == 0:
            key = None
        elif i % 17 == 0:
            key = b""
        if i % 11 == 0:
            value = None if key is not None or keyless_and_valueless else b""
        elif i % 13 == 0:
            value = b""
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 5 == 0:
            headers = (("trace", b"%d" % i), ("trace", b"again"), ("empty", b""))
            if null_header_values:
                headers += (("null", None),)
        timestamp = BASE_TIMESTAMP + i * 10 - (i % 3) * 25
        samples.append(Sample(i % partitions, key, value, headers, timestamp))
    return samples


# ------------------------------------------------------------------ confluent
def confluent_consumer(bootstrap: str, **config: object) -> Consumer:
    """A consumer for assign/seek use: no group membership, no offset commits, and every
    fetched batch's CRC checked (what the broker stamped must not break it)."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "gregor-tests",
                     "enable.auto.commit": False, "enable.auto.offset.store": False,
                     "auto.offset.reset": "earliest", "check.crcs": True, **config})


def confluent_consume(consumer: Consumer, count: int, timeout: float = TIMEOUT) -> list[Message]:
    """Exactly ``count`` messages, failing on an error or when they do not come in time."""
    messages: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(messages) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"consumed {len(messages)} of {count} messages in {timeout}s")
        for message in consumer.consume(min(count - len(messages), 10_000), 0.5):
            error = message.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise AssertionError(f"consumer error: {error}")
            if error is None:
                messages.append(message)
    return messages


def confluent_sample(message: Message) -> Sample:
    return Sample(message.partition(), message.key(), message.value(),
                  tuple(message.headers() or ()), message.timestamp()[1])


# ------------------------------------------------------------ raw requests
def _request(api_key: ApiKey, version: int):
    return load_payload_module(api_key, version, EntityType.request)


def versioned_request(api_key: ApiKey, version: int, entity: str, /, **fields: object):
    """A kio request entity (``entity`` names its class) of one version, from a superset
    of every version's fields: each version keeps the fields it defines."""
    return build(getattr(_request(api_key, version), entity), **fields)


def alter_broker_configs(bootstrap: str, name: str, changes: Mapping[str, str | None]) -> int:
    """IncrementalAlterConfigs of a broker resource, sent to ``bootstrap``: set each config
    to its value, or delete it (None). ``name`` "" is the cluster's default, which neither
    librdkafka nor kafka-python will name (Kafka's Java tools do). Its error code."""
    key, version = ApiKey.INCREMENTAL_ALTER_CONFIGS, 1
    resource = versioned_request(key, version, "AlterConfigsResource", resource_type=4,
                                 resource_name=name, configs=tuple(
        versioned_request(key, version, "AlterableConfig", name=config,
                          config_operation=0 if value is not None else 1, value=value)
        for config, value in changes.items()))
    with WireConnection(bootstrap) as connection:
        answer = connection.request(key, version, versioned_request(
            key, version, "IncrementalAlterConfigsRequest", resources=(resource,),
            validate_only=False))
    (result,) = answer.responses
    return result.error_code


@functools.cache
def _kafka_requests() -> dict[int, str]:
    """Each API key's ``validVersions``, from Kafka's own JSON message definitions as
    kafka-python ships them: what Kafka says, independent of gregor and of kio."""
    resources = importlib.resources.files("kafka.protocol.schemas.resources")
    definitions = (load_json(entry.name[: -len(".json")]) for entry in resources.iterdir()
                   if entry.name.endswith("Request.json"))
    return {d["apiKey"]: d["validVersions"] for d in definitions}


def kafka_versions(api_key: int) -> range:
    """The versions Kafka defines for ``api_key`` (KeyError: not an API Kafka has)."""
    low, _, high = _kafka_requests()[api_key].partition("-")
    return range(int(low), int(high or low) + 1)


def api_versions(connection: WireConnection) -> dict[int, range]:
    """What the broker advertises on ``connection``: its ApiVersions answer."""
    answer = connection.request(ApiKey.API_VERSIONS, 3, _request(
        ApiKey.API_VERSIONS, 3).ApiVersionsRequest(client_software_name="gregor-tests",
                                                   client_software_version="1"))
    assert answer.error_code == 0
    return {k.api_key: range(k.min_version, k.max_version + 1) for k in answer.api_keys}


def advertised_versions(connection: WireConnection, api_key: ApiKey) -> range:
    """The versions of ``api_key`` the broker advertises that Kafka defines. Only
    Produce differs: Kafka 4 advertises it from 0 for old librdkafka's sake but
    refuses 0-2 (KAFKA-18659), and so does gregor."""
    advertised, kafka = api_versions(connection)[api_key], kafka_versions(api_key)
    return range(max(advertised.start, kafka.start), advertised.stop)


PRODUCE_VERSION = 9
FETCH_VERSION = 12
METADATA_VERSION = 12
INIT_PRODUCER_ID_VERSION = 4


def produce_request(topic: str, partition: int, records: bytes, acks: int = -1):
    schema = _request(ApiKey.PRODUCE, PRODUCE_VERSION)
    return schema.ProduceRequest(
        transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=10),
        topic_data=(schema.TopicProduceData(name=topic, partition_data=(
            schema.PartitionProduceData(index=partition, records=records),)),))


def fetch_request(topic: str, partition: int, offset: int, *, max_wait_ms: int = 500,
                  min_bytes: int = 1, max_bytes: int = 1 << 20, session_id: int = 0,
                  session_epoch: int = -1):
    schema = _request(ApiKey.FETCH, FETCH_VERSION)
    return schema.FetchRequest(
        cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0, session_id=session_id,
        session_epoch=session_epoch, forgotten_topics_data=(), rack_id="",
        topics=(schema.FetchTopic(topic=topic, partitions=(schema.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes),)),))


def metadata_request(topics: Sequence[str | uuid.UUID], allow_auto_topic_creation: bool):
    """Metadata for topics given by name, or by id (a UUID)."""
    schema = _request(ApiKey.METADATA, METADATA_VERSION)
    return schema.MetadataRequest(
        topics=tuple(schema.MetadataRequestTopic(topic_id=t, name=None) if isinstance(t, uuid.UUID)
                     else schema.MetadataRequestTopic(topic_id=None, name=t) for t in topics),
        allow_auto_topic_creation=allow_auto_topic_creation,
        include_topic_authorized_operations=False)


def init_producer_id_request():
    schema = _request(ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION)
    return schema.InitProducerIdRequest(
        transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=-1, producer_epoch=-1)


def make_batch(values: Sequence[bytes], *, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1) -> bytes:
    """One uncompressed batch of keyless records; with a producer id it is what an
    idempotent producer sends, ``len(values)`` sequence numbers from ``base_sequence``."""
    return encode_batch([Record(i, BASE_TIMESTAMP + i, None, v) for i, v in enumerate(values)],
                        producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=base_sequence)


def stored_batches(bootstrap: str, topic: str, partition: int = 0) -> list[BatchHeader]:
    """The headers of the batches the broker holds, to see what a client really sent
    (its codec, its producer id and sequence numbers)."""
    headers: list[BatchHeader] = []
    with WireConnection(bootstrap) as connection:
        while True:
            offset = headers[-1].next_offset if headers else 0
            answer = connection.request(ApiKey.FETCH, FETCH_VERSION, fetch_request(
                topic, partition, offset, max_wait_ms=0))
            records = answer.responses[0].partitions[0].records
            if not records:
                return headers
            headers += [read_header(batch) for batch in iter_batches(records)]


class LostResponseProxy:
    """A TCP proxy in front of the broker that can lose one Produce response.

    It forwards every request, but when armed it swallows the broker's answer to the
    next Produce request and cuts that connection, as a network failure after the
    broker appended would. The producer cannot tell the write happened and sends the
    same batch again: exactly the retry an idempotent producer's sequence numbers
    exist to make harmless. The broker must advertise the proxy's address
    (``advertised.listeners``) so clients keep going through it after bootstrap.
    """

    def __init__(self) -> None:
        # Bound first, on a port of the kernel's choosing: nothing can take it between
        # choosing and listening, and the broker is told to advertise it.
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.broker_port = 0
        self.armed = threading.Event()
        self.produce_requests = 0
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []

    @classmethod
    def in_front_of(cls, broker: BrokerProcess) -> LostResponseProxy:
        """Start ``broker`` (not yet running) advertising a proxy, and that proxy."""
        proxy = cls()
        broker.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
        proxy.broker_port = broker.start().port
        threading.Thread(target=proxy._accept, daemon=True).start()
        return proxy

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.listener.close()
        with self._lock:
            for sock in self._sockets:
                _close_quietly(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.broker_port))
            with self._lock:
                self._sockets += [client, upstream]
            produce_ids: set[int] = set()
            threading.Thread(target=self._requests, args=(client, upstream, produce_ids),
                             daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, produce_ids),
                             daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket,
                  produce_ids: set[int]) -> None:
        for frame in _frames(client):
            api_key, _, correlation_id = struct.unpack_from(">hhi", frame, 4)
            if api_key == ApiKey.PRODUCE:
                with self._lock:
                    self.produce_requests += 1
                produce_ids.add(correlation_id)
            try:
                upstream.sendall(frame)
            except OSError:
                break
        _close_quietly(upstream)

    def _responses(self, upstream: socket.socket, client: socket.socket,
                   produce_ids: set[int]) -> None:
        for frame in _frames(upstream):
            (correlation_id,) = struct.unpack_from(">i", frame, 4)
            if correlation_id in produce_ids and self.armed.is_set():
                self.armed.clear()
                break
            try:
                client.sendall(frame)
            except OSError:
                break
        _close_quietly(client)
        _close_quietly(upstream)


def _frames(sock: socket.socket) -> Iterator[bytes]:
    """Whole size-prefixed frames (prefix included) until the socket closes."""
    buffer = b""
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except OSError:
            return
        if not chunk:
            return
        buffer += chunk
        while len(buffer) >= 4:
            end = 4 + _SIZE.unpack_from(buffer)[0]
            if len(buffer) < end:
                break
            yield buffer[:end]
            buffer = buffer[end:]


def _close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
