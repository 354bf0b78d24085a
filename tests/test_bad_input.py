"""Bad input never takes the broker down.

Each case sends something malformed or absurd -- raw bytes where no real client
would send them, real clients where they can express the mistake -- and checks
the answer Kafka gives (an error code, or a closed connection). After each, a
bystander (a real producer and consumer on their own long-lived connections)
checks that the broker still serves other clients, that everything written
before is still there byte for byte, and that the broker logged no traceback.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from raw_frames import BrokerLog, RawConnection

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_codec import Record, decode_records, encode_batch

_SIZE = struct.Struct(">i")
_MAGIC_OFFSET = 16
_CRC_REGION_START = 21
_PRODUCE_VERSION = 9
_NO_WAIT = datetime.timedelta(0)


class Bystander:
    """A well-behaved producer and consumer that must not notice the bad input."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.log = BrokerLog(broker.log_path)
        self.topic = f"bystander-{uuid.uuid4().hex[:8]}"
        self.producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        self.consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": self.topic,
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        self.written: list[tuple[bytes | None, bytes]] = []
        for i in range(50):
            self.produce(None if i % 7 == 0 else f"k{i % 5}".encode(), bytes([i]) * (i * 13))

    def produce(self, key: bytes | None, value: bytes) -> None:
        errors: list[KafkaError] = []
        self.producer.produce(self.topic, value, key,
                              on_delivery=lambda err, _msg: err and errors.append(err))
        assert self.producer.flush(10) == 0 and not errors, errors
        self.written.append((key, value))

    def check(self) -> None:
        """Still served, nothing lost, no traceback logged."""
        self.produce(b"after", uuid.uuid4().bytes)
        self.consumer.assign([ConfluentTopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        read: list[tuple[bytes | None, bytes]] = []
        while len(read) < len(self.written):
            messages = self.consumer.consume(len(self.written) - len(read), timeout=10)
            assert messages, f"consumer stalled after {len(read)} of {len(self.written)} records"
            for message in messages:
                assert message.error() is None, message.error()
                read.append((message.key(), message.value()))
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
    with RawConnection(broker.bootstrap, timeout=5) as wire:
        yield wire
    bystander.check()


def _batch(count: int = 3, value_size: int = 10) -> bytes:
    return encode_batch([Record(i, 1_700_000_000_000 + i, b"k%d" % i, b"v" * value_size)
                         for i in range(count)])


def _produce(wire: RawConnection, topic: str, records: bytes | None, partition: int = 0):
    """The partition's answer to one Produce v9 with ``records``."""
    body = ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
                          topic_data=(TopicProduceData(name=topic, partition_data=(
                              PartitionProduceData(index=partition, records=records),)),))
    response = wire.request(ApiKey.PRODUCE, _PRODUCE_VERSION, body)
    (topic_response,) = response.responses
    (partition_response,) = topic_response.partition_responses
    return partition_response


def _fetch_all(wire: RawConnection, topic: str) -> tuple[int, bytes]:
    """``(error code, record bytes)`` of partition 0 from offset 0."""
    body = FetchRequest(replica_id=-1, max_wait=_NO_WAIT, min_bytes=1, max_bytes=10_000_000,
                        isolation_level=0, session_id=0, session_epoch=-1, topics=(FetchTopic(
                            topic=topic, partitions=(FetchPartition(
                                partition=0, current_leader_epoch=-1, fetch_offset=0,
                                log_start_offset=-1, partition_max_bytes=10_000_000),)),),
                        forgotten_topics_data=(), rack_id="")
    response = wire.request(ApiKey.FETCH, 12, body)
    (topic_response,) = response.responses
    (partition,) = topic_response.partitions
    return partition.error_code, bytes(partition.records or b"")


def _metadata(wire: RawConnection, topic: str, auto_create: bool):
    body = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                           allow_auto_topic_creation=auto_create,
                           include_topic_authorized_operations=False)
    (topic_response,) = wire.request(ApiKey.METADATA, 12, body).topics
    return topic_response


def _create_topics(wire: RawConnection, name: str, partitions: int, replication: int = -1):
    body = CreateTopicsRequest(topics=(CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=replication, assignments=(),
        configs=()),), timeout=datetime.timedelta(seconds=5), validate_only=False)
    (result,) = wire.request(ApiKey.CREATE_TOPICS, 7, body).topics
    return result


def _api_versions_frame(wire: RawConnection, version: int) -> bytes:
    """An ApiVersions request frame claiming ``version`` (the v3 body is what clients send)."""
    frame = bytearray(wire.frame(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
        client_software_name="wire-client", client_software_version="1")))
    struct.pack_into(">h", frame, 6, version)
    return bytes(frame)


# ------------------------------------------------------------------ framing

def test_connection_closed_mid_frame_is_silent(broker: BrokerProcess,
                                               client: RawConnection) -> None:
    log = BrokerLog(broker.log_path)
    frame = client.frame(ApiKey.METADATA, 12, MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    for cut in (2, 4, 9, len(frame) - 1):
        with RawConnection(broker.bootstrap) as wire:
            wire.send_raw(frame[:cut])
    client.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
        client_software_name="wire-client", client_software_version="1"))
    assert log.text() == ""


def test_truncated_frame_leaves_broker_waiting_for_the_rest(client: RawConnection) -> None:
    """A frame split across writes is normal TCP: the broker waits for the rest."""
    frame = client.frame(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
        client_software_name="wire-client", client_software_version="1"))
    client.send_raw(frame[:7])
    client.sock.settimeout(0.3)
    assert not client.closed_by_broker()
    client.sock.settimeout(5)
    client.send_raw(frame[7:])
    assert client.read_frame()[:4] == frame[8:12]  # correlation id echoed


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
    with RawConnection(fresh_broker.bootstrap, timeout=5) as wire:
        # Only the size prefix is sent: the broker must refuse before reading (or
        # allocating) a body, or it would wait here for bytes that never come.
        wire.send_raw(_SIZE.pack(limit + 1))
        assert wire.closed_by_broker()
    with RawConnection(fresh_broker.bootstrap, timeout=5) as wire:
        wire.send_raw(_SIZE.pack(2**31 - 1))
        assert wire.closed_by_broker()
    with RawConnection(fresh_broker.bootstrap, timeout=5) as wire:
        # A request of exactly the limit is still served (trailing bytes are ignored).
        frame = wire.frame(ApiKey.METADATA, 12, MetadataRequest(
            topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        padded = _SIZE.pack(limit) + frame[4:] + b"\x00" * (limit - len(frame) + 4)
        assert len(padded) == limit + 4
        wire.send_raw(padded)
        assert wire.read_frame()[:4] == frame[8:12]
    assert log.count("socket.request.max.bytes") == 1  # logged once, not per connection
    assert "Traceback" not in log.text()


# --------------------------------------------------------------- API versions

@pytest.mark.parametrize("api_key", [999, 67, -1, 0x7FFF])
def test_unknown_api_key_closes_connection(client: RawConnection, api_key: int) -> None:
    frame = bytearray(client.frame(ApiKey.METADATA, 12, MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)))
    struct.pack_into(">h", frame, 4, api_key)
    client.send_raw(bytes(frame))
    assert client.closed_by_broker()


@pytest.mark.parametrize(("api_key", "version"), [
    (ApiKey.METADATA, 13), (ApiKey.METADATA, 200), (ApiKey.FETCH, 3), (ApiKey.FETCH, -1),
    (ApiKey.PRODUCE, 1), (ApiKey.CREATE_TOPICS, 99)])
def test_unsupported_version_of_known_api_closes_connection(client: RawConnection, api_key: int,
                                                            version: int) -> None:
    frame = bytearray(client.frame(ApiKey.METADATA, 12, MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)))
    struct.pack_into(">hh", frame, 4, api_key, version)
    client.send_raw(bytes(frame))
    assert client.closed_by_broker()


@pytest.mark.parametrize("version", [5, 127, 0x7FFF, -1])
def test_unsupported_api_versions_version_answers_error_35_then_lower_works(
        client: RawConnection, version: int) -> None:
    client.send_raw(_api_versions_frame(client, version))
    response = client.read_frame()
    # Always a v0 body (header v0), so any client can read it whatever it asked for.
    body, _ = _decode_v0_api_versions(response)
    assert body.error_code == ErrorCode.unsupported_version
    # The client retries lower, on the same connection, and sees the same ranges.
    retry = client.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
        client_software_name="wire-client", client_software_version="1"))
    assert retry.error_code == ErrorCode.none
    ranges = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert ranges == {k.api_key: (k.min_version, k.max_version) for k in retry.api_keys}
    assert ranges[ApiKey.API_VERSIONS] == (0, 4)


def _decode_v0_api_versions(frame: bytes):
    from kio.serial import entity_reader

    return entity_reader(ApiVersionsResponseV0)(frame, 4)


def test_real_clients_negotiate_after_bad_input(broker: BrokerProcess, client: RawConnection
                                                ) -> None:
    """kafka-python negotiates ApiVersions from v4 down; it must still work here."""
    from kafka import KafkaConsumer

    client.send_raw(_SIZE.pack(-5))
    assert client.closed_by_broker()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        assert isinstance(consumer.topics(), set)
    finally:
        consumer.close()


# ------------------------------------------------------------------- Produce

def test_produce_crc_corrupted_batch_is_corrupt_message(client: RawConnection,
                                                        topic_name: str) -> None:
    _create_topic(client, topic_name)
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
    _create_topic(client, topic_name)
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
    _create_topic(client, topic_name)
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
    answer = _produce(client, topic_name, records)
    assert answer.error_code in _REFUSED_RECORD_SET
    _assert_log_holds(client, topic_name, [good])


def test_produce_batch_over_max_message_bytes_is_message_too_large(client: RawConnection,
                                                                   topic_name: str) -> None:
    _create_topic(client, topic_name, {"max.message.bytes": "2000"})
    small = _batch(count=2, value_size=100)
    big = _batch(count=2, value_size=1500)
    assert len(small) <= 2000 < len(big)
    assert _produce(client, topic_name, small).error_code == ErrorCode.none
    assert _produce(client, topic_name, big).error_code == ErrorCode.message_too_large
    # One good and one oversized batch in the same record set: nothing is appended.
    assert _produce(client, topic_name, small + big).error_code == ErrorCode.message_too_large
    _assert_log_holds(client, topic_name, [small])


def test_real_producer_gets_message_too_large(broker: BrokerProcess, bystander: Bystander,
                                              topic_name: str) -> None:
    with RawConnection(broker.bootstrap) as wire:
        _create_topic(wire, topic_name, {"max.message.bytes": "5000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                         "message.send.max.retries": 0})
    outcomes: list[KafkaError | None] = []
    for value in (b"x" * 100, b"y" * 20_000):  # one at a time, so they are separate batches
        producer.produce(topic_name, value, on_delivery=lambda err, _m: outcomes.append(err))
        assert producer.flush(10) == 0
    assert outcomes[0] is None
    assert outcomes[1] is not None and outcomes[1].code() == KafkaError.MSG_SIZE_TOO_LARGE
    bystander.check()


# --------------------------------------------------------------- topic names

def test_unknown_topic_or_partition(client: RawConnection, topic_name: str) -> None:
    assert _produce(client, topic_name, _batch()).error_code == \
        ErrorCode.unknown_topic_or_partition
    assert _fetch_all(client, topic_name)[0] == ErrorCode.unknown_topic_or_partition
    assert _metadata(client, topic_name, auto_create=False).error_code == \
        ErrorCode.unknown_topic_or_partition
    _create_topic(client, topic_name)
    for partition in (1, -1, 2**31 - 1):
        assert _produce(client, topic_name, _batch(), partition).error_code == \
            ErrorCode.unknown_topic_or_partition


_INVALID_NAMES = ["", ".", "..", "a" * 250, "has space", "slash/name", "tab\tname", "ünïcode",
                  "semi;colon", "nul\x00byte"]


@pytest.mark.parametrize("name", _INVALID_NAMES)
def test_invalid_topic_name_is_invalid_topic_exception(client: RawConnection, name: str) -> None:
    assert _create_topics(client, name, 1).error_code == ErrorCode.invalid_topic_exception
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


# ---------------------------------------------------------- partition counts

@pytest.mark.parametrize("partitions", [0, -2, -(2**31), 10_001, 2**31 - 1])
def test_absurd_partition_count_in_create_topics(client: RawConnection, topic_name: str,
                                                 partitions: int) -> None:
    result = _create_topics(client, topic_name, partitions)
    assert result.error_code == ErrorCode.invalid_partitions
    assert _metadata(client, topic_name, auto_create=False).error_code == \
        ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize("replication", [0, -2, 2, 0x7FFF])
def test_absurd_replication_factor_in_create_topics(client: RawConnection, topic_name: str,
                                                    replication: int) -> None:
    result = _create_topics(client, topic_name, 1, replication)
    assert result.error_code == ErrorCode.invalid_replication_factor


@pytest.mark.parametrize("count", [0, 1, -1, -(2**31), 10_001, 2**31 - 1])
def test_absurd_partition_count_in_create_partitions(client: RawConnection, topic_name: str,
                                                     count: int) -> None:
    _create_topic(client, topic_name)
    body = CreatePartitionsRequest(topics=(CreatePartitionsTopic(
        name=topic_name, count=count, assignments=None),), timeout=datetime.timedelta(seconds=5),
        validate_only=False)
    (result,) = client.request(ApiKey.CREATE_PARTITIONS, 3, body).results
    assert result.error_code == ErrorCode.invalid_partitions
    assert len(_metadata(client, topic_name, auto_create=False).partitions) == 1


def test_real_admin_client_gets_invalid_partitions(broker: BrokerProcess, bystander: Bystander,
                                                   topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # librdkafka itself refuses counts above 100000, so stay below that.
    futures = admin.create_topics([NewTopic(topic_name, 50_000, 1)])
    with pytest.raises(KafkaException) as raised:
        futures[topic_name].result(10)
    assert raised.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    with RawConnection(broker.bootstrap) as wire:
        _create_topic(wire, topic_name)
    futures = admin.create_partitions([NewPartitions(topic_name, 50_000)])
    with pytest.raises(KafkaException) as raised:
        futures[topic_name].result(10)
    assert raised.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    bystander.check()


# ------------------------------------------------------------------- helpers

def _create_topic(wire: RawConnection, name: str, configs: dict[str, str] | None = None) -> None:
    body = CreateTopicsRequest(topics=(CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=(),
        configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items())),
    ), timeout=datetime.timedelta(seconds=5), validate_only=False)
    (result,) = wire.request(ApiKey.CREATE_TOPICS, 7, body).topics
    assert result.error_code == ErrorCode.none, result


def _assert_log_holds(wire: RawConnection, topic: str, batches: list[bytes]) -> None:
    """The partition holds exactly these batches' records, in order, and nothing else."""
    error, data = _fetch_all(wire, topic)
    assert error == ErrorCode.none
    expected = [(r.key, r.value) for b in batches for r in decode_records(b)[1]]
    got = []
    position = 0
    while position < len(data):
        header, records = decode_records(memoryview(data)[position:])
        got.extend((r.key, r.value) for r in records)
        position += header.size
    assert got == expected
