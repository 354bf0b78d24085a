"""kafka-python 3 producing to and consuming from a real broker process.

kafka-python is the pure-Python client: it starts with ApiVersions v4, is idempotent
by default (InitProducerId, sequenced batches), asks for KIP-227 fetch sessions
(the broker declines them with session id 0) and partitions keys with murmur2 like
the Java client.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import kafka.errors
import pytest
from clients import (
    BASE_TIMESTAMP,
    TIMEOUT,
    LostResponseProxy,
    Sample,
    confluent_consume,
    confluent_consumer,
    sample_records,
    stored_batches,
)
from confluent_kafka import OFFSET_BEGINNING
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.metrics.stats import Count

from gregor.broker.process import BrokerProcess
from gregor.protocol.compression import CompressionType

COMPRESSIONS = [None, "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


# Longer than any test waits: a fetch answered only at the end of this wait fails the test.
LONG_POLL_MS = 300_000


def _producer(bootstrap: str, **config: object) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bootstrap, **{"linger_ms": 5, **config})


def _consumer(bootstrap: str, **config: object) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         **config)


def _consume(consumer: KafkaConsumer, count: int, timeout: float = TIMEOUT) -> list:
    """Exactly ``count`` records in the order the consumer returns them per partition."""
    records: list = []
    deadline = time.monotonic() + timeout
    while len(records) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"consumed {len(records)} of {count} records in {timeout}s")
        for batch in consumer.poll(timeout_ms=500, max_records=count - len(records)).values():
            records.extend(batch)
    return records


def _sample(record) -> Sample:
    return Sample(record.partition, record.key, record.value, tuple(record.headers),
                  record.timestamp)


def _send_all(producer: KafkaProducer, topic: str, records: list[Sample]) -> list:
    futures = [producer.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                             partition=r.partition, timestamp_ms=r.timestamp) for r in records]
    producer.flush(TIMEOUT)
    return [f.get(TIMEOUT) for f in futures]


# ----------------------------------------------------------------- round trips
@pytest.mark.parametrize("acks", [0, 1, "all"])
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_round_trip(admin: KafkaAdminClient, broker: BrokerProcess, topic_name: str,
                    compression: str | None, acks: int | str) -> None:
    admin.create_topics([NewTopic(topic_name, 2, 1)])
    records = sample_records(400, partitions=2, null_header_values=False,
                             keyless_and_valueless=False)
    producer = _producer(broker.bootstrap, compression_type=compression, acks=acks,
                         enable_idempotence=acks == "all")
    metadata = _send_all(producer, topic_name, records)
    producer.close()
    if acks != 0:
        assert sorted((m.partition, m.offset) for m in metadata) == sorted(
            (p, o) for p in range(2) for o in range(200))

    consumer = _consumer(broker.bootstrap)
    consumer.assign([TopicPartition(topic_name, p) for p in range(2)])
    consumer.seek_to_beginning()
    got = _consume(consumer, len(records))
    consumer.close()
    for partition in range(2):
        mine = [r for r in got if r.partition == partition]
        assert [r.offset for r in mine] == list(range(200))
        assert [_sample(r) for r in mine] == [r for r in records if r.partition == partition]

    codec = CompressionType[(compression or "none").upper()]
    batches = stored_batches(broker.bootstrap, topic_name)
    # kafka-python sends a batch uncompressed when the codec would not shrink it.
    assert codec in {b.compression for b in batches}
    assert {b.compression for b in batches} <= {codec, CompressionType.NONE}
    assert all(b.has_producer_id == (acks == "all") for b in batches)


def test_default_producer_is_idempotent(admin: KafkaAdminClient, broker: BrokerProcess,
                                        topic_name: str) -> None:
    """kafka-python 3 defaults to enable_idempotence=True: batches carry a producer id
    and consecutive sequence numbers, and many in flight still land exactly once."""
    admin.create_topics([NewTopic(topic_name, 1, 1)])
    producer = _producer(broker.bootstrap, linger_ms=0, batch_size=200,
                         max_in_flight_requests_per_connection=5)
    values = [b"%05d" % i for i in range(3000)]
    futures = [producer.send(topic_name, value=v, partition=0) for v in values]
    producer.flush(TIMEOUT)
    assert sorted(f.get(TIMEOUT).offset for f in futures) == list(range(3000))
    producer.close()

    batches = stored_batches(broker.bootstrap, topic_name)
    assert len(batches) > 10
    assert len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0
    assert [b.base_sequence for b in batches] == [b.base_offset for b in batches]

    consumer = _consumer(broker.bootstrap, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic_name, 0)])
    assert [r.value for r in _consume(consumer, 3000)] == values
    consumer.close()


def test_retry_after_a_lost_response_is_not_written_twice(fresh_broker: BrokerProcess,
                                                         topic_name: str) -> None:
    """The broker appends a batch but its answer is lost; kafka-python resends it with
    the same sequence numbers and the broker acknowledges it without writing a copy."""
    proxy = LostResponseProxy.in_front_of(fresh_broker)
    try:
        producer = _producer(proxy.bootstrap, linger_ms=0, retry_backoff_ms=50)
        first = [producer.send(topic_name, value=b"first-%d" % i, partition=0)
                 for i in range(5)]
        producer.flush(TIMEOUT)
        proxy.armed.set()
        requests_before = proxy.produce_requests
        second = [producer.send(topic_name, value=b"second-%d" % i, partition=0)
                  for i in range(5)]
        producer.flush(TIMEOUT)
        assert not proxy.armed.is_set(), "no produce response was lost"
        assert proxy.produce_requests > requests_before + 1, "the batch was not retried"
        assert [f.get(TIMEOUT).offset for f in first + second] == list(range(10))
        producer.close()

        consumer = _consumer(proxy.bootstrap, auto_offset_reset="earliest")
        consumer.assign([TopicPartition(topic_name, 0)])
        assert [r.value for r in _consume(consumer, 10)] == [
            b"first-%d" % i for i in range(5)] + [b"second-%d" % i for i in range(5)]
        assert consumer.end_offsets([TopicPartition(topic_name, 0)]) == {
            TopicPartition(topic_name, 0): 10}
        consumer.close()
    finally:
        proxy.close()


def test_large_round_trip(admin: KafkaAdminClient, broker: BrokerProcess,
                          topic_name: str) -> None:
    """200k records through kafka-python (the million-record check is manual)."""
    count, partitions = 200_000, 2
    admin.create_topics([NewTopic(topic_name, partitions, 1)])
    producer = _producer(broker.bootstrap, linger_ms=20, batch_size=256 * 1024,
                         compression_type="lz4")
    padding = b"y" * 80
    for i in range(count):
        producer.send(topic_name, value=b"%010d" % i + padding, partition=i % partitions)
    producer.flush(TIMEOUT * 3)
    producer.close()

    consumer = _consumer(broker.bootstrap, auto_offset_reset="earliest",
                         max_partition_fetch_bytes=4 << 20)
    consumer.assign([TopicPartition(topic_name, p) for p in range(partitions)])
    next_index = list(range(partitions))
    seen = 0
    deadline = time.monotonic() + 60
    while seen < count and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=500, max_records=50_000).items():
            for record in records:
                assert record.offset == next_index[tp.partition] // partitions
                assert record.value == b"%010d" % next_index[tp.partition] + padding
                next_index[tp.partition] += partitions
            seen += len(records)
    consumer.close()
    assert seen == count


def test_key_partitioning_matches_librdkafka_murmur2(admin: KafkaAdminClient,
                                                     broker: BrokerProcess,
                                                     topic_name: str) -> None:
    """kafka-python's default partitioner and librdkafka's murmur2_random (the Java
    client's) put each key on the same partition, so mixed clients agree."""
    admin.create_topics([NewTopic(topic_name, 6, 1)])
    keys = [b"user-%d" % i for i in range(120)]
    producer = _producer(broker.bootstrap)
    kafka_python: dict[bytes, int] = {}
    for key in keys:
        kafka_python[key] = producer.send(topic_name, key=key, value=b"kp").get(TIMEOUT).partition
    producer.close()
    assert len(set(kafka_python.values())) == 6

    librdkafka: dict[bytes, int] = {}
    confluent = ConfluentProducer({"bootstrap.servers": broker.bootstrap,
                                   "partitioner": "murmur2_random"})
    for key in keys:
        confluent.produce(topic_name, key=key, value=b"rd",
                          on_delivery=lambda _, m: librdkafka.__setitem__(m.key(), m.partition()))
    assert confluent.flush(TIMEOUT) == 0
    assert librdkafka == kafka_python

    consumer = confluent_consumer(broker.bootstrap)
    consumer.assign([ConfluentTopicPartition(topic_name, p, OFFSET_BEGINNING) for p in range(6)])
    stored = {(m.key(), m.value()): m.partition() for m in confluent_consume(consumer, 240)}
    consumer.close()
    assert all(stored[(k, b"kp")] == stored[(k, b"rd")] == kafka_python[k] for k in keys)


# -------------------------------------------------------------- assign and seek
def test_seek_and_offset_lookups(admin: KafkaAdminClient, broker: BrokerProcess,
                                 topic_name: str) -> None:
    admin.create_topics([NewTopic(topic_name, 1, 1)])
    producer = _producer(broker.bootstrap, linger_ms=1000)
    for b in range(4):  # four batches of five, timestamps a second apart
        for i in range(5):
            producer.send(topic_name, value=b"v%d" % (b * 5 + i), partition=0,
                          timestamp_ms=BASE_TIMESTAMP + b * 1000 + i)
        producer.flush(TIMEOUT)
    producer.close()

    tp = TopicPartition(topic_name, 0)
    consumer = _consumer(broker.bootstrap)
    try:
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 20}

        consumer.seek_to_beginning(tp)
        assert [r.offset for r in _consume(consumer, 20)] == list(range(20))

        consumer.seek(tp, 12)  # inside the batch 10-14
        assert [(r.offset, r.value) for r in _consume(consumer, 8)] == [
            (o, b"v%d" % o) for o in range(12, 20)]

        found = consumer.offsets_for_times({tp: BASE_TIMESTAMP + 2003})[tp]
        assert (found.offset, found.timestamp) == (13, BASE_TIMESTAMP + 2003)
        assert consumer.offsets_for_times({tp: BASE_TIMESTAMP + 9999})[tp] is None
        consumer.seek(tp, found.offset)
        assert [r.offset for r in _consume(consumer, 7)] == list(range(13, 20))

        consumer.seek_to_end(tp)
        assert consumer.poll(timeout_ms=1000) == {}
        producer = _producer(broker.bootstrap)
        producer.send(topic_name, value=b"latest", partition=0).get(TIMEOUT)
        producer.close()
        assert [(r.offset, r.value) for r in _consume(consumer, 1)] == [(20, b"latest")]
    finally:
        consumer.close()


# ---------------------------------------------------------------- long polling
def test_produce_wakes_a_waiting_consumer(admin: KafkaAdminClient, broker: BrokerProcess,
                                          topic_name: str) -> None:
    """kafka-python's fetches (in fetch sessions it asks for) wait up to 5 minutes here;
    a produce must answer the parked fetch within the test's timeout."""
    admin.create_topics([NewTopic(topic_name, 1, 1)])
    tp = TopicPartition(topic_name, 0)
    consumer = _consumer(broker.bootstrap, fetch_max_wait_ms=LONG_POLL_MS,
                         request_timeout_ms=LONG_POLL_MS + 30_000)
    producer = _producer(broker.bootstrap, linger_ms=0)
    try:
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        # Parked: a fetch sent from the log end and not answered (the client's own record
        # of the fetches it has in flight, kept by node).
        deadline = time.monotonic() + TIMEOUT
        while not consumer._fetcher._nodes_with_pending_fetch_requests:
            assert time.monotonic() < deadline, "the consumer never fetched"
            assert consumer.poll(timeout_ms=100) == {}
        producer.send(topic_name, value=b"wake up", partition=0).get(TIMEOUT)
        assert [r.value for r in _consume(consumer, 1)] == [b"wake up"]
    finally:
        producer.close()
        consumer.close()


def test_fetches_on_an_empty_partition_wait_max_wait(admin: KafkaAdminClient,
                                                      broker: BrokerProcess,
                                                      topic_name: str) -> None:
    """With nothing to read, each fetch is parked for fetch_max_wait_ms and then
    answered: not at once (a busy loop), and answered at all (a stalled consumer):
    three empty answers come within the test's timeout, none sooner than 300 ms."""
    admin.create_topics([NewTopic(topic_name, 1, 1)])
    consumer = _consumer(broker.bootstrap, fetch_max_wait_ms=300)
    # kafka-python times each answered fetch with its fetch-latency sensor but counts
    # them nowhere: a Count on that sensor does.
    registry = consumer._metrics
    registry.get_sensor("fetch-latency").add(
        registry.metric_name("fetches-answered", "gregor-tests"), Count())
    try:
        consumer.assign([TopicPartition(topic_name, 0)])
        deadline = time.monotonic() + TIMEOUT
        while consumer.metrics()["gregor-tests"]["fetches-answered"] < 3:
            assert time.monotonic() < deadline, "fewer than three fetches answered"
            assert consumer.poll(timeout_ms=100) == {}
        metrics = consumer.metrics()["consumer-fetch-manager-metrics"]
    finally:
        consumer.close()
    assert metrics["fetch-latency-avg"] >= 250


# ---------------------------------------------------------------- errors
def test_auto_create_on_first_send(admin: KafkaAdminClient, broker: BrokerProcess,
                                   topic_name: str) -> None:
    producer = _producer(broker.bootstrap)
    assert producer.send(topic_name, value=b"hello").get(TIMEOUT).offset == 0
    producer.close()
    assert topic_name in admin.list_topics()


def test_oversized_record_is_rejected(admin: KafkaAdminClient, broker: BrokerProcess,
                                      topic_name: str) -> None:
    admin.create_topics([NewTopic(topic_name, 1, 1, topic_configs={"max.message.bytes": "2000"})])
    producer = _producer(broker.bootstrap)
    with pytest.raises(kafka.errors.MessageSizeTooLargeError):
        producer.send(topic_name, value=b"x" * 5000, partition=0).get(TIMEOUT)
    producer.close()  # an idempotent kafka-python producer treats the rejection as fatal
    producer = _producer(broker.bootstrap)
    assert producer.send(topic_name, value=b"ok", partition=0).get(TIMEOUT).offset == 0
    producer.close()
