"""Bad input never takes the broker down.

Each case sends something malformed or absurd -- raw bytes where no real client
would send them, real clients where they can express the mistake -- and checks
the answer Kafka gives (an error code, or a closed connection). After each, a
bystander (a real producer and consumer on their own long-lived connections)
checks that the broker still serves other clients, that everything written
before is still there byte for byte, and that the broker logged no traceback.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clients import (
    FETCH_VERSION,
    METADATA_VERSION,
    PRODUCE_VERSION,
    confluent_consume,
    confluent_consumer,
    fetch_request,
    metadata_request,
    produce_request,
)
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from in_process_broker import bootstrap_of, in_process_broker
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.serial import entity_reader
from raw_frames import BrokerLog, RawConnection

from gregor.broker.broker import Broker
from gregor.broker.process import BrokerProcess
from gregor.broker.router import Route
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import encode_request
from gregor.protocol.compression import CompressionType
from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_batch import crc32c
from gregor.protocol.record_codec import Record, decode_records, encode_batch, iter_batches

_SIZE = struct.Struct(">i")
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_CRC_REGION_START = 21
_RECORDS_START = 61
_CREATE_TOPICS_VERSION = 7


class Bystander:
    """A well-behaved producer and consumer that must not notice the bad input."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.log = BrokerLog(broker.log_path)
        self.topic = f"bystander-{uuid.uuid4().hex[:8]}"
        self.producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        self.consumer = confluent_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 10})
        self.written: list[tuple[bytes | None, bytes]] = []
        for i in range(50):
            self.produce(None if i % 7 == 0 else b"k%d" % (i % 5), bytes([i]) * (i * 13))

    def produce(self, key: bytes | None, value: bytes) -> None:
        errors: list[KafkaError] = []
        self.producer.produce(self.topic, value, key,
                              on_delivery=lambda err, _msg: err and errors.append(err))
        assert self.producer.flush(10) == 0 and not errors, errors
        self.written.append((key, value))

    def check(self) -> None:
        """Still served, nothing lost, no traceback logged."""
        self.produce(b"after", uuid.uuid4().bytes)
        self.consumer.assign([TopicPartition(self.topic, 0, 0)])
        read = [(m.key(), m.value()) for m in confluent_consume(self.consumer, len(self.written))]
        assert read == self.written
        assert "Traceback" not in self.log.text()

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture(scope="module")
def bystander(broker: BrokerProcess) -> Iterator[Bystander]:
    watcher = Bystander(broker)
    yield watcher
    watcher.close()


@pytest.fixture
def client(broker: BrokerProcess, bystander: Bystander) -> Iterator[RawConnection]:
    """A raw connection for the test; afterwards the bystander checks the broker is fine."""
    with RawConnection(broker.bootstrap, timeout=5) as connection:
        yield connection
    bystander.check()


# ------------------------------------------------------------------- helpers

def _batch(count: int = 3, value_size: int = 10) -> bytes:
    return encode_batch([Record(i, 1_700_000_000_000 + i, b"k%d" % i, b"v" * value_size)
                         for i in range(count)])


def _produce(connection: RawConnection, topic: str, records: bytes | None, partition: int = 0):
    """The partition's answer to one Produce with ``records``."""
    response = connection.request(ApiKey.PRODUCE, PRODUCE_VERSION,
                                  produce_request(topic, partition, records, acks=1))
    return response.responses[0].partition_responses[0]


def _metadata(connection: RawConnection, topic: str, auto_create: bool):
    response = connection.request(ApiKey.METADATA, METADATA_VERSION,
                                  metadata_request([topic], auto_create))
    return response.topics[0]


def _create_topic(connection: RawConnection, name: str, partitions: int = 1,
                  replication: int = 1, configs: dict[str, str] | None = None):
    body = CreateTopicsRequest(topics=(CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=replication, assignments=(),
        configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items())),
    ), timeout=datetime.timedelta(seconds=5), validate_only=False)
    return connection.request(ApiKey.CREATE_TOPICS, _CREATE_TOPICS_VERSION, body).topics[0]


def _new_topic(connection: RawConnection, name: str, configs: dict[str, str] | None = None
               ) -> None:
    result = _create_topic(connection, name, configs=configs)
    assert result.error_code == ErrorCode.none, result


def _assert_log_holds(connection: RawConnection, topic: str, batches: list[bytes]) -> None:
    """Partition 0 holds exactly these batches' records, in order, and nothing else."""
    response = connection.request(ApiKey.FETCH, FETCH_VERSION, fetch_request(
        topic, 0, 0, max_wait_ms=0, max_bytes=10_000_000))
    partition = response.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    stored = [(r.key, r.value) for b in iter_batches(partition.records or b"")
              for r in decode_records(b)[1]]
    assert stored == [(r.key, r.value) for b in batches for r in decode_records(b)[1]]


def _api_versions_request() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="gregor-tests", client_software_version="1")


def _with_api(frame: bytes, api_key: int, version: int) -> bytes:
    """``frame`` claiming another api key and version in its header."""
    patched = bytearray(frame)
    struct.pack_into(">hh", patched, 4, api_key, version)
    return bytes(patched)


def _broker_rss(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    status = Path(f"/proc/{broker.proc.pid}/status").read_text()
    (line,) = [line for line in status.splitlines() if line.startswith("VmRSS:")]
    return int(line.split()[1]) * 1024


# ------------------------------------------------------------------- framing

def _logged_while(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                  clients: Callable[[str], None],
                  setup: Callable[[str], None] = lambda bootstrap: None) -> list[str]:
    """What a broker of this test's own logged (INFO and up, its own logger's and
    asyncio's) from ``clients`` (blocking, given the bootstrap address) up to the moment
    it had ended every connection they opened, and ``setup`` before them.

    The broker runs in this process so that the end of its last connection is an event
    the test can wait on: a connection's log lines, if any, come before it ends. A
    shared broker would also log for other tests, and a test's clients leaving are
    handled after the test has moved on.
    """
    logged: list[str] = []

    async def scenario() -> None:
        async with in_process_broker(tmp_path / "data") as broker:
            bootstrap = bootstrap_of(broker)
            await asyncio.to_thread(setup, bootstrap)
            start = len(caplog.records)
            await asyncio.to_thread(clients, bootstrap)
            deadline = time.monotonic() + 10
            while broker._connections:
                assert time.monotonic() < deadline, "the broker kept a connection open"
                await asyncio.sleep(0.01)
            logged.extend(f"{r.name} {r.levelname} {r.getMessage()}"
                          for r in caplog.records[start:] if r.levelno >= logging.INFO)

    with caplog.at_level(logging.INFO):
        asyncio.run(scenario())
    return logged


def test_connection_closed_mid_frame_is_silent(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    def leave_mid_frame(bootstrap: str) -> None:
        for cut in (2, 4, 9, -1):
            with RawConnection(bootstrap) as connection:
                frame = connection.frame(ApiKey.METADATA, METADATA_VERSION,
                                         metadata_request([], False))
                connection.send_raw(frame[:cut])
    assert _logged_while(tmp_path, caplog, leave_mid_frame) == []


def test_frame_split_across_writes_is_served(client: RawConnection) -> None:
    """A frame arriving in pieces is normal TCP: the broker waits for the rest."""
    frame = client.frame(ApiKey.API_VERSIONS, 3, _api_versions_request())
    client.send_raw(frame[:7])
    client.sock.settimeout(0.3)
    assert not client.closed_by_broker()
    client.sock.settimeout(5)
    client.send_raw(frame[7:])
    assert client.read_frame()[:4] == frame[8:12]  # the correlation id, echoed


@pytest.mark.parametrize("size", [-1, -(2**31), 0, 3, 7])
def test_negative_or_short_size_closes_connection(client: RawConnection, size: int) -> None:
    client.send_raw(_SIZE.pack(size) + b"\x00" * 16)
    assert client.closed_by_broker()


def test_frame_over_socket_request_max_bytes_closes_connection(fresh_broker: BrokerProcess
                                                               ) -> None:
    limit = 64 * 1024
    fresh_broker.overrides["socket.request.max.bytes"] = str(limit)
    fresh_broker.start()
    log = BrokerLog(fresh_broker.log_path)
    for size in (limit + 1, 2**31 - 1):
        with RawConnection(fresh_broker.bootstrap, timeout=5) as connection:
            # Only the size is sent: the broker must refuse before reading (or
            # allocating) a body, or it would wait here for bytes that never come.
            connection.send_raw(_SIZE.pack(size))
            assert connection.closed_by_broker()
    with RawConnection(fresh_broker.bootstrap, timeout=5) as connection:
        # A request of exactly the limit is still served (trailing bytes are ignored).
        frame = connection.frame(ApiKey.METADATA, METADATA_VERSION, metadata_request([], False))
        connection.send_raw(_SIZE.pack(limit) + frame[4:] + bytes(limit + 4 - len(frame)))
        assert connection.read_frame()[:4] == frame[8:12]
    assert log.count("socket.request.max.bytes") == 1  # logged once, not per connection
    assert "Traceback" not in log.text()


# ---------------------------------------------------------------- API versions

@pytest.mark.parametrize("api_key", [999, 67, -1, 0x7FFF])
def test_unknown_api_key_closes_connection(client: RawConnection, api_key: int) -> None:
    frame = client.frame(ApiKey.METADATA, METADATA_VERSION, metadata_request([], False))
    client.send_raw(_with_api(frame, api_key, METADATA_VERSION))
    assert client.closed_by_broker()


@pytest.mark.parametrize(("api_key", "version"), [
    (ApiKey.METADATA, 13), (ApiKey.METADATA, 200), (ApiKey.FETCH, 3), (ApiKey.FETCH, -1),
    (ApiKey.PRODUCE, 1), (ApiKey.CREATE_TOPICS, 99)])
def test_unsupported_version_of_known_api_closes_connection(client: RawConnection, api_key: int,
                                                            version: int) -> None:
    frame = client.frame(ApiKey.METADATA, METADATA_VERSION, metadata_request([], False))
    client.send_raw(_with_api(frame, api_key, version))
    assert client.closed_by_broker()


@pytest.mark.parametrize("version", [5, 127, 0x7FFF, -1])
def test_unsupported_api_versions_version_answers_error_35_then_lower_works(
        client: RawConnection, version: int) -> None:
    frame = client.frame(ApiKey.API_VERSIONS, 3, _api_versions_request())
    client.send_raw(_with_api(frame, ApiKey.API_VERSIONS, version))
    # Always a v0 body after a v0 header, so any client can read it whatever it asked.
    body, _ = entity_reader(ApiVersionsResponseV0)(client.read_frame(), 4)
    assert body.error_code == ErrorCode.unsupported_version
    # The client retries lower, on the same connection, and sees the same ranges.
    retry = client.request(ApiKey.API_VERSIONS, 3, _api_versions_request())
    assert retry.error_code == ErrorCode.none
    ranges = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert ranges == {k.api_key: (k.min_version, k.max_version) for k in retry.api_keys}
    assert ranges[ApiKey.API_VERSIONS] == (0, 4)


def test_real_client_works_after_bad_input(broker: BrokerProcess, client: RawConnection,
                                           topic_name: str) -> None:
    """kafka-python negotiates ApiVersions from v4 down; after a neighbour's bad input
    it still sees the topics, produces and reads back what it produced."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

    _new_topic(client, topic_name)
    client.send_raw(_SIZE.pack(-5))
    assert client.closed_by_broker()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        assert topic_name in consumer.topics()
        sent = producer.send(topic_name, b"after bad input", partition=0).get(timeout=10)
        assert sent.offset == 0
        partition = KafkaTopicPartition(topic_name, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        read: list[bytes] = []
        deadline = time.monotonic() + 10
        while not read and time.monotonic() < deadline:
            read = [r.value for r in consumer.poll(200).get(partition, [])]
        assert read == [b"after bad input"]
    finally:
        producer.close()
        consumer.close()


# -------------------------------------------------------------------- Produce

def test_produce_crc_corrupted_batch_is_corrupt_message(client: RawConnection,
                                                        topic_name: str) -> None:
    _new_topic(client, topic_name)
    good = _batch()
    assert _produce(client, topic_name, good).error_code == ErrorCode.none
    for position in (_CRC_REGION_START, len(good) // 2, len(good) - 1):
        corrupt = bytearray(_batch())
        corrupt[position] ^= 0x40
        answer = _produce(client, topic_name, bytes(corrupt))
        assert answer.error_code == ErrorCode.corrupt_message
        assert answer.base_offset == -1
    _assert_log_holds(client, topic_name, [good])


def test_produce_wrong_magic_is_invalid_record(client: RawConnection, topic_name: str) -> None:
    """Kafka: produce v3+ only takes magic v2 batches (InvalidRecordException)."""
    _new_topic(client, topic_name)
    good = _batch()
    assert _produce(client, topic_name, good).error_code == ErrorCode.none
    for magic in (0, 1, 3, 0xFF):
        batch = bytearray(_batch())
        batch[_MAGIC_OFFSET] = magic
        assert _produce(client, topic_name, bytes(batch)).error_code == ErrorCode.invalid_record
    _assert_log_holds(client, topic_name, [good])


# Kafka answers a record set whose only batch is cut off with INVALID_RECORD ("must
# have at least one record batch") and garbage that looks like a batch with
# CORRUPT_MESSAGE; both refuse the whole record set, which is what matters here.
_REFUSED_RECORD_SET = (ErrorCode.corrupt_message, ErrorCode.invalid_record)


@pytest.mark.parametrize("mutation", ["truncated-header", "truncated-records", "trailing-garbage",
                                      "trailing-partial-batch", "length-too-small",
                                      "length-too-large", "empty", "null"])
def test_produce_malformed_record_set_is_refused(client: RawConnection, topic_name: str,
                                                 mutation: str) -> None:
    _new_topic(client, topic_name)
    good = _batch()
    assert _produce(client, topic_name, good).error_code == ErrorCode.none
    batch = _batch(count=5)
    records: bytes | None = {
        "truncated-header": batch[:40],
        "truncated-records": batch[:-3],
        "trailing-garbage": batch + b"\xde\xad\xbe\xef" * 8,
        "trailing-partial-batch": batch + batch[:30],
        "length-too-small": batch[:8] + _SIZE.pack(10) + batch[12:],
        "length-too-large": batch[:8] + _SIZE.pack(len(batch)) + batch[12:],
        "empty": b"",
        "null": None,
    }[mutation]
    assert _produce(client, topic_name, records).error_code in _REFUSED_RECORD_SET
    _assert_log_holds(client, topic_name, [good])


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.GZIP])
def test_produce_garbage_records_with_valid_crc_to_compacted_topic(
        client: RawConnection, topic_name: str, compression: CompressionType) -> None:
    """A compacted topic is the one place the broker reads records (to require keys):
    records that do not parse, under a correct CRC, are refused, not a crash."""
    _new_topic(client, topic_name, {"cleanup.policy": "compact"})
    good = _batch()
    assert _produce(client, topic_name, good).error_code == ErrorCode.none
    batch = bytearray(encode_batch([Record(i, 1_700_000_000_000, b"k", b"v" * 50)
                                    for i in range(3)], compression=compression))
    batch[_RECORDS_START:] = bytes(0xA5 for _ in batch[_RECORDS_START:])
    struct.pack_into(">I", batch, _CRC_OFFSET, crc32c(memoryview(batch)[_CRC_REGION_START:]))
    assert _produce(client, topic_name, bytes(batch)).error_code in _REFUSED_RECORD_SET
    _assert_log_holds(client, topic_name, [good])


def test_produce_batch_over_max_message_bytes_is_message_too_large(client: RawConnection,
                                                                   topic_name: str) -> None:
    _new_topic(client, topic_name, {"max.message.bytes": "2000"})
    small = _batch(count=2, value_size=100)
    big = _batch(count=2, value_size=1500)
    assert len(small) <= 2000 < len(big)
    assert _produce(client, topic_name, small).error_code == ErrorCode.none
    assert _produce(client, topic_name, big).error_code == ErrorCode.message_too_large
    # A good and an oversized batch in one record set: nothing of it is appended.
    assert _produce(client, topic_name, small + big).error_code == ErrorCode.message_too_large
    _assert_log_holds(client, topic_name, [small])


def test_real_producer_gets_message_too_large(broker: BrokerProcess, client: RawConnection,
                                              topic_name: str) -> None:
    _new_topic(client, topic_name, {"max.message.bytes": "5000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                         "message.send.max.retries": 0})
    outcomes: list[KafkaError | None] = []
    for value in (b"x" * 100, b"y" * 20_000):  # one at a time: separate batches
        producer.produce(topic_name, value, on_delivery=lambda err, _m: outcomes.append(err))
        assert producer.flush(10) == 0
    assert outcomes[0] is None
    assert outcomes[1] is not None and outcomes[1].code() == KafkaError.MSG_SIZE_TOO_LARGE


# --------------------------------------------------------------- topic names

def test_unknown_topic_or_partition(client: RawConnection, topic_name: str) -> None:
    unknown = ErrorCode.unknown_topic_or_partition
    assert _produce(client, topic_name, _batch()).error_code == unknown
    response = client.request(ApiKey.FETCH, FETCH_VERSION, fetch_request(
        topic_name, 0, 0, max_wait_ms=0))
    assert response.responses[0].partitions[0].error_code == unknown
    assert _metadata(client, topic_name, auto_create=False).error_code == unknown
    _new_topic(client, topic_name)
    for partition in (1, -1, 2**31 - 1):
        assert _produce(client, topic_name, _batch(), partition).error_code == unknown


_INVALID_NAMES = ["", ".", "..", "a" * 250, "has space", "slash/name", "tab\tname", "ünïcode",
                  "semi;colon", "nul\x00byte"]


@pytest.mark.parametrize("name", _INVALID_NAMES)
def test_invalid_topic_name_is_invalid_topic_exception(client: RawConnection, name: str) -> None:
    assert _create_topic(client, name).error_code == ErrorCode.invalid_topic_exception
    # Metadata with auto-creation on must not create it either.
    assert _metadata(client, name, auto_create=True).error_code == \
        ErrorCode.invalid_topic_exception
    assert _produce(client, name, _batch()).error_code in (
        ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_topic_exception)


def test_real_admin_client_gets_invalid_topic(broker: BrokerProcess, bystander: Bystander) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic("bad name!", 1, 1)])
    with pytest.raises(KafkaException) as raised:
        futures["bad name!"].result(10)
    assert raised.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    bystander.check()


# ----------------------------------------------------------- partition counts

@pytest.mark.parametrize("partitions", [0, -2, -(2**31), 10_001, 2**31 - 1])
def test_absurd_partition_count_in_create_topics(client: RawConnection, topic_name: str,
                                                 partitions: int) -> None:
    assert _create_topic(client, topic_name, partitions).error_code == \
        ErrorCode.invalid_partitions
    assert _metadata(client, topic_name, auto_create=False).error_code == \
        ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize("replication", [0, -2, 2, 0x7FFF])
def test_absurd_replication_factor_in_create_topics(client: RawConnection, topic_name: str,
                                                    replication: int) -> None:
    assert _create_topic(client, topic_name, 1, replication).error_code == \
        ErrorCode.invalid_replication_factor


@pytest.mark.parametrize("count", [0, 1, -1, -(2**31), 10_001, 2**31 - 1])
def test_absurd_partition_count_in_create_partitions(client: RawConnection, topic_name: str,
                                                     count: int) -> None:
    _new_topic(client, topic_name)
    body = CreatePartitionsRequest(topics=(CreatePartitionsTopic(
        name=topic_name, count=count, assignments=None),), timeout=datetime.timedelta(seconds=5),
        validate_only=False)
    (result,) = client.request(ApiKey.CREATE_PARTITIONS, 3, body).results
    assert result.error_code == ErrorCode.invalid_partitions
    assert len(_metadata(client, topic_name, auto_create=False).partitions) == 1


def test_real_admin_client_gets_invalid_partitions(broker: BrokerProcess, client: RawConnection,
                                                   topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # librdkafka itself refuses counts above 100000, so stay below that.
    futures = admin.create_topics([NewTopic(topic_name, 50_000, 1)])
    with pytest.raises(KafkaException) as raised:
        futures[topic_name].result(10)
    assert raised.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    _new_topic(client, topic_name)
    futures = admin.create_partitions([NewPartitions(topic_name, 50_000)])
    with pytest.raises(KafkaException) as raised:
        futures[topic_name].result(10)
    assert raised.value.args[0].code() == KafkaError.INVALID_PARTITIONS


# ------------------------------------------------ clients that leave or lag

def test_client_leaving_during_long_poll_is_silent(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """The answer is ready only after the client left; writing it must fail quietly,
    on both the copying and the sendfile path."""
    topic = "long-poll"

    def records(bootstrap: str) -> None:
        with RawConnection(bootstrap) as connection:
            _new_topic(connection, topic)
            for value_size in (100, 100_000):  # answers below and above the sendfile threshold
                assert _produce(connection, topic, _batch(2, value_size)).error_code == \
                    ErrorCode.none

    def leave_during_long_poll(bootstrap: str) -> None:
        for offset in (0, 2):
            with RawConnection(bootstrap) as leaving:
                leaving.send(ApiKey.FETCH, FETCH_VERSION, fetch_request(
                    topic, 0, offset, max_wait_ms=200, min_bytes=10_000_000))
    assert _logged_while(tmp_path, caplog, leave_during_long_poll, setup=records) == []


def test_slow_reader_cannot_make_broker_buffer(fresh_broker: BrokerProcess) -> None:
    """A client that sends fetches and never reads is held back by TCP, not buffered for."""
    fresh_broker.start()
    topic = "slow-reader"
    with RawConnection(fresh_broker.bootstrap) as connection:
        _create_topic(connection, topic, partitions=8)
        # Partition 0 answers with a region sent by sendfile, the others with regions
        # small enough to be copied: both paths must wait for the reader.
        for partition in range(8):
            for _ in range(40 if partition == 0 else 2):
                connection.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
                    topic, partition, _batch(10, 2_000), acks=1))
    frame = encode_request(ApiKey.FETCH, FETCH_VERSION, 1, "slow", FetchRequest(
        cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
        max_bytes=4 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        forgotten_topics_data=(), rack_id="", topics=(FetchTopic(topic=topic, partitions=tuple(
            FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,
                           last_fetched_epoch=-1, log_start_offset=-1,
                           partition_max_bytes=1 << 20) for p in range(8))),)))
    before = _broker_rss(fresh_broker)
    slow = socket.create_connection(("127.0.0.1", fresh_broker.port))
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.setblocking(False)
    sent = 0
    try:
        # ~1.4 MB per answer: 300 answers would be ~400 MB if the broker buffered them.
        for _ in range(300):
            try:
                slow.send(frame)
            except BlockingIOError:
                break  # the broker stopped reading: back-pressure reached the sender
            sent += 1
        time.sleep(1.0)
        grown = _broker_rss(fresh_broker) - before
        with RawConnection(fresh_broker.bootstrap) as other:
            assert other.request(ApiKey.API_VERSIONS, 3, _api_versions_request()).error_code == 0
    finally:
        slow.close()
    assert sent >= 2
    assert grown < 64 << 20, f"broker grew by {grown >> 20} MiB for a client that never reads"


# ------------------------------------------------------------------ logging

def test_repeated_bad_input_is_logged_once_per_kind(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    log = BrokerLog(fresh_broker.log_path)
    for i in range(40):
        with RawConnection(fresh_broker.bootstrap) as connection:
            frame = connection.frame(ApiKey.METADATA, METADATA_VERSION,
                                     metadata_request(["t"], False))
            truncated = frame[4:-2]
            connection.send_raw([_SIZE.pack(-1 - i),
                                 _with_api(frame, 1000 + i, 0),  # unknown api keys
                                 _with_api(frame, ApiKey.METADATA, 13 + i),  # bad versions
                                 _SIZE.pack(len(truncated)) + truncated][i % 4])
            assert connection.closed_by_broker()
    text = log.text()
    assert text.count("request size") == 1
    assert text.count("unsupported api key") == 2  # unknown keys; Metadata versions
    assert text.count("cannot decode") == 1
    assert "Traceback" not in text


def test_broker_stop_with_open_connections_is_clean(fresh_broker: BrokerProcess) -> None:
    """SIGTERM while connections are idle, mid-frame, long-polling or stuck sending:
    each is cancelled without a traceback, and the broker exits cleanly."""
    fresh_broker.start()
    log = BrokerLog(fresh_broker.log_path)
    connections = [RawConnection(fresh_broker.bootstrap) for _ in range(3)]
    try:
        idle, mid_frame, long_poll = connections
        idle.request(ApiKey.API_VERSIONS, 3, _api_versions_request())
        mid_frame.send_raw(_SIZE.pack(100) + b"\x00\x03")
        _new_topic(long_poll, "waiting")
        long_poll.send(ApiKey.FETCH, FETCH_VERSION, fetch_request(
            "waiting", 0, 0, max_wait_ms=60_000))
        assert log.wait_for("created topic waiting")
        time.sleep(0.2)
        assert fresh_broker.stop() == 0
    finally:
        for connection in connections:
            connection.close()
    text = log.text()
    assert "stopped cleanly" in text
    assert "Traceback" not in text


async def _failing_handler(broker: Broker, request: object) -> None:
    raise RuntimeError("deliberate handler failure")


def test_handler_failure_is_logged_once_and_closes_only_its_connection(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """No handler is known to fail, so one that does is put in a broker run in-process:
    its connection is closed, its traceback logged once, and other clients are served."""
    def add_failing_route(broker: Broker) -> None:
        broker.router.add(ApiKey.DESCRIBE_CLUSTER, Route(_failing_handler, 0, 1))

    async def scenario() -> None:
        async with in_process_broker(tmp_path / "data", before_start=add_failing_route) as broker:
            host, port = broker.advertised_address
            frame = encode_request(ApiKey.DESCRIBE_CLUSTER, 1, 7, "test", DescribeClusterRequest(
                include_cluster_authorized_operations=False, endpoint_type=1))
            bystander = await asyncio.open_connection(host, port)
            for _ in range(5):
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(frame)
                assert await reader.read() == b""  # closed, no answer
                writer.close()
            reader, writer = bystander
            writer.write(encode_request(ApiKey.API_VERSIONS, 3, 8, "test",
                                        _api_versions_request()))
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            assert (await reader.readexactly(size))[:4] == struct.pack(">i", 8)
            writer.close()

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    failures = [r for r in caplog.records if r.exc_info is not None]
    assert len(failures) == 1
    assert failures[0].levelno == logging.ERROR
    assert "deliberate handler failure" in str(failures[0].exc_info[1])
