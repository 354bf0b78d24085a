"""confluent-kafka (librdkafka) producing to and consuming from a real broker process.

librdkafka negotiates the newest flexible versions the broker advertises (Produce 9,
Fetch 12, Metadata 12, ListOffsets 7), so these tests pin the flexible encodings.
Where a client would hide the broker's exact answer (a retried duplicate, a sequence
gap, the timing of a long poll) the request is sent raw, as librdkafka would send it.
"""

from __future__ import annotations

import datetime
import json
import os
import time
import uuid
from collections.abc import Callable

import pytest
from clients import (
    BASE_TIMESTAMP,
    FETCH_VERSION,
    INIT_PRODUCER_ID_VERSION,
    METADATA_VERSION,
    PRODUCE_VERSION,
    TIMEOUT,
    LostResponseProxy,
    Sample,
    WireConnection,
    advertised_versions,
    confluent_consume,
    confluent_consumer,
    confluent_sample,
    fetch_request,
    init_producer_id_request,
    make_batch,
    metadata_request,
    produce_request,
    sample_records,
    versioned_request,
)
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kio.index import load_payload_module
from kio.static.constants import EntityType

from gregor.broker.process import BrokerProcess
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_codec import decode_records, iter_batches

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _create_topic(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(TIMEOUT)


def _producer(bootstrap: str, **config: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})


class Deliveries:
    """Delivery reports, so a test can check every record was acknowledged without error."""

    def __init__(self) -> None:
        self.offsets: list[tuple[int, int]] = []
        self.errors: list[KafkaError] = []

    def __call__(self, error: KafkaError | None, message) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.offsets.append((message.partition(), message.offset()))


def _produce_and_flush(producer: Producer, topic: str, records, deliveries: Deliveries) -> None:
    for r in records:
        producer.produce(topic, key=r.key, value=r.value, headers=list(r.headers) or None,
                         partition=r.partition, timestamp=r.timestamp, on_delivery=deliveries)
    assert producer.flush(TIMEOUT) == 0
    assert deliveries.errors == []


def _consume_partitions(bootstrap: str, topic: str, partitions: int, count: int) -> list:
    consumer = confluent_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        return confluent_consume(consumer, count)
    finally:
        consumer.close()


# ----------------------------------------------------------------- round trips
@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_round_trip(broker: BrokerProcess, topic_name: str, compression: str, acks: str) -> None:
    """Keys, values (null and empty), headers and timestamps come back byte for byte, in
    order per partition, at every acks level and with every compression codec."""
    _create_topic(broker.bootstrap, topic_name, 3)
    records = sample_records(600, partitions=3)
    deliveries = Deliveries()
    producer = _producer(broker.bootstrap, **{"compression.type": compression, "acks": acks,
                                              "enable.idempotence": False})
    _produce_and_flush(producer, topic_name, records, deliveries)
    if acks != "0":
        assert sorted(deliveries.offsets) == sorted((p, o) for p in range(3) for o in range(200))

    messages = _consume_partitions(broker.bootstrap, topic_name, 3, len(records))
    for partition in range(3):
        got = [m for m in messages if m.partition() == partition]
        assert [m.offset() for m in got] == list(range(200))
        assert {m.timestamp()[0] for m in got} == {TIMESTAMP_CREATE_TIME}
        assert [confluent_sample(m) for m in got] == [r for r in records
                                                       if r.partition == partition]


def test_idempotent_producer_delivers_each_record_once(broker: BrokerProcess,
                                                       topic_name: str) -> None:
    """Many small in-flight batches per partition, all sequenced; none duplicated or lost."""
    _create_topic(broker.bootstrap, topic_name, 2)
    records = sample_records(4000, partitions=2)
    deliveries = Deliveries()
    producer = _producer(broker.bootstrap, **{
        "enable.idempotence": True, "linger.ms": 0, "batch.num.messages": 7,
        "max.in.flight.requests.per.connection": 5, "compression.type": "lz4"})
    _produce_and_flush(producer, topic_name, records, deliveries)
    assert sorted(deliveries.offsets) == sorted((p, o) for p in range(2) for o in range(2000))
    messages = _consume_partitions(broker.bootstrap, topic_name, 2, len(records))
    for partition in range(2):
        got = [confluent_sample(m) for m in messages if m.partition() == partition]
        assert got == [r for r in records if r.partition == partition]


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_log_append_time(broker: BrokerProcess, topic_name: str, compression: str) -> None:
    """message.timestamp.type=LogAppendTime: the broker stamps its own time on the batch;
    producers learn it from the produce response, consumers from the batch header."""
    _create_topic(broker.bootstrap, topic_name, **{"message.timestamp.type": "LogAppendTime"})
    stamped: list[tuple[int, int]] = []
    producer = _producer(broker.bootstrap, **{"compression.type": compression})
    before = int(time.time() * 1000)
    for i in range(5):
        producer.produce(topic_name, value=b"v%d" % i, partition=0, timestamp=BASE_TIMESTAMP,
                         on_delivery=lambda _, m: stamped.append(m.timestamp()))
    assert producer.flush(TIMEOUT) == 0
    after = int(time.time() * 1000)
    assert {kind for kind, _ in stamped} == {TIMESTAMP_LOG_APPEND_TIME}
    assert all(before <= ts <= after for _, ts in stamped)

    messages = _consume_partitions(broker.bootstrap, topic_name, 1, 5)
    assert [m.timestamp() for m in messages] == stamped
    assert [m.value() for m in messages] == [b"v%d" % i for i in range(5)]


def test_large_round_trip(broker: BrokerProcess, topic_name: str) -> None:
    """200k records through four partitions (the million-record check is manual)."""
    count, partitions = 200_000, 4
    _create_topic(broker.bootstrap, topic_name, partitions)
    producer = _producer(broker.bootstrap, **{"linger.ms": 20, "batch.size": 256 * 1024,
                                              "queue.buffering.max.messages": 500_000})
    deliveries = Deliveries()
    padding = b"x" * 80
    for i in range(count):
        producer.produce(topic_name, value=b"%010d" % i + padding, key=b"%d" % i,
                         partition=i % partitions, on_delivery=deliveries)
        if i % 50_000 == 0:
            producer.poll(0)
    assert producer.flush(TIMEOUT * 3) == 0
    assert deliveries.errors == []
    assert len(deliveries.offsets) == count

    consumer = confluent_consumer(broker.bootstrap, **{"fetch.queue.backoff.ms": 10})
    consumer.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in range(partitions)])
    next_index = list(range(partitions))
    next_offset = [0] * partitions
    seen = 0
    deadline = time.monotonic() + 60
    while seen < count and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.5):
            assert message.error() is None
            p = message.partition()
            assert message.offset() == next_offset[p]
            assert message.value() == b"%010d" % next_index[p] + padding
            assert message.key() == b"%d" % next_index[p]
            next_offset[p] += 1
            next_index[p] += partitions
            seen += 1
    consumer.close()
    assert seen == count
    assert next_offset == [count // partitions] * partitions


# ------------------------------------------------------------- idempotence, raw
def _idempotent_batches(client: WireConnection) -> Callable[[int, list[bytes]], bytes]:
    """Get a producer id, and build batches under it from a base sequence and values."""
    answer = client.request(ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION,
                            init_producer_id_request())
    assert answer.error_code == ErrorCode.none

    def batch(base_sequence: int, values: list[bytes]) -> bytes:
        return make_batch(values, producer_id=answer.producer_id,
                          producer_epoch=answer.producer_epoch, base_sequence=base_sequence)

    return batch


def _produce_raw(client: WireConnection, topic: str, records: bytes):
    answer = client.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(topic, 0, records))
    (partition,) = answer.responses[0].partition_responses
    return partition


def _log_end_offset(bootstrap: str, topic: str) -> int:
    consumer = confluent_consumer(bootstrap)
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT)[1]
    finally:
        consumer.close()


def test_retried_batch_is_acknowledged_but_not_written_again(broker: BrokerProcess,
                                                            topic_name: str) -> None:
    """A producer retry (same producer id, epoch and sequence) gets the original base
    offset back and appends nothing, as Kafka answers a duplicate within the last five."""
    _create_topic(broker.bootstrap, topic_name)
    with WireConnection(broker.bootstrap) as client:
        batch = _idempotent_batches(client)
        first, second = batch(0, [b"a", b"b", b"c"]), batch(3, [b"d", b"e"])
        assert _produce_raw(client, topic_name, first).base_offset == 0
        assert _produce_raw(client, topic_name, second).base_offset == 3
        for retry, original_offset in ((second, 3), (first, 0)):
            answer = _produce_raw(client, topic_name, retry)
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, original_offset)
    assert _log_end_offset(broker.bootstrap, topic_name) == 5
    values = [m.value() for m in _consume_partitions(broker.bootstrap, topic_name, 1, 5)]
    assert values == [b"a", b"b", b"c", b"d", b"e"]


def test_retry_after_a_lost_response_is_not_written_twice(fresh_broker: BrokerProcess,
                                                         topic_name: str) -> None:
    """The broker appends a batch but its answer is lost: librdkafka resends the batch
    with the same sequence numbers, and the broker acknowledges it without a copy."""
    proxy = LostResponseProxy.in_front_of(fresh_broker)
    try:
        producer = _producer(proxy.bootstrap, **{"enable.idempotence": True, "linger.ms": 0,
                                                 "retry.backoff.ms": 50})
        deliveries = Deliveries()
        first = [Sample(0, None, b"first-%d" % i, (), BASE_TIMESTAMP) for i in range(5)]
        _produce_and_flush(producer, topic_name, first, deliveries)
        proxy.armed.set()
        requests_before = proxy.produce_requests
        second = [Sample(0, None, b"second-%d" % i, (), BASE_TIMESTAMP) for i in range(5)]
        _produce_and_flush(producer, topic_name, second, deliveries)
        assert not proxy.armed.is_set(), "no produce response was lost"
        assert proxy.produce_requests > requests_before + 1, "the batch was not retried"
        assert sorted(deliveries.offsets) == [(0, o) for o in range(10)]

        messages = _consume_partitions(proxy.bootstrap, topic_name, 1, 10)
        assert [m.value() for m in messages] == [r.value for r in first + second]
        assert _log_end_offset(proxy.bootstrap, topic_name) == 10
    finally:
        proxy.close()


def test_produce_refusals(broker: BrokerProcess, topic_name: str) -> None:
    """Invalid acks, and clients writing to the internal __consumer_offsets topic, are
    refused with Kafka's codes; nothing is appended."""
    _create_topic(broker.bootstrap, topic_name)
    with WireConnection(broker.bootstrap) as client:
        answer = client.request(ApiKey.PRODUCE, PRODUCE_VERSION,
                                produce_request(topic_name, 0, make_batch([b"x"]), acks=2))
        (partition,) = answer.responses[0].partition_responses
        assert partition.error_code == ErrorCode.invalid_required_acks

        # A group's first coordinator lookup creates __consumer_offsets.
        find = load_payload_module(ApiKey.FIND_COORDINATOR, 3, EntityType.request)
        found = client.request(ApiKey.FIND_COORDINATOR, 3,
                               find.FindCoordinatorRequest(key="g-" + topic_name, key_type=0))
        assert found.error_code == ErrorCode.none
        answer = client.request(ApiKey.PRODUCE, PRODUCE_VERSION,
                                produce_request("__consumer_offsets", 0, make_batch([b"x"])))
        (partition,) = answer.responses[0].partition_responses
        assert partition.error_code == ErrorCode.invalid_topic_exception
    assert _log_end_offset(broker.bootstrap, topic_name) == 0


def test_keyless_records_of_a_compacted_topic_are_named(broker: BrokerProcess,
                                                        topic_name: str) -> None:
    """A batch for a compacted topic with a keyless record is refused, and the answer
    names the records at fault (Produce v8's record_errors, KIP-467): librdkafka fails
    those with INVALID_RECORD and the others of the batch apart."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"cleanup.policy": "compact"})])[
        topic_name].result(TIMEOUT)
    outcomes: dict[int, str] = {}
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000})
    for i in range(10):  # one batch: 3 and 7 keyless
        producer.produce(topic_name, b"v%d" % i, None if i in (3, 7) else b"k%d" % i,
                         partition=0, on_delivery=lambda err, msg, i=i: outcomes.__setitem__(
                             i, err.name() if err else "delivered"))
    assert producer.flush(TIMEOUT) == 0
    assert outcomes == {i: "INVALID_RECORD" if i in (3, 7) else "_INVALID_DIFFERENT_RECORD"
                        for i in range(10)}
    assert _log_end_offset(broker.bootstrap, topic_name) == 0


def test_sequence_gap_is_rejected_out_of_order(broker: BrokerProcess, topic_name: str) -> None:
    _create_topic(broker.bootstrap, topic_name)
    with WireConnection(broker.bootstrap) as client:
        batch = _idempotent_batches(client)
        assert _produce_raw(client, topic_name, batch(0, [b"a", b"b"])).error_code == 0
        gap = _produce_raw(client, topic_name, batch(5, [b"x"]))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        # The connection and the producer's state survive; the next in-order batch lands.
        resumed = _produce_raw(client, topic_name, batch(2, [b"c"]))
        assert (resumed.error_code, resumed.base_offset) == (ErrorCode.none, 2)
    assert _log_end_offset(broker.bootstrap, topic_name) == 3


def test_acks_0_error_closes_the_connection(broker: BrokerProcess, topic_name: str) -> None:
    """An acks=0 producer reads no answer, so Kafka reports an error by closing the
    connection; the client reconnects and refreshes its metadata."""
    _create_topic(broker.bootstrap, topic_name)
    with WireConnection(broker.bootstrap) as client:
        client.send(ApiKey.PRODUCE, PRODUCE_VERSION,
                    produce_request(topic_name, 0, make_batch([b"fine"]), acks=0))
        client.send(ApiKey.PRODUCE, PRODUCE_VERSION,
                    produce_request(topic_name, 7, make_batch([b"no such partition"]), acks=0))
        with pytest.raises(ConnectionError):
            client.receive(ApiKey.PRODUCE, PRODUCE_VERSION)
    assert _log_end_offset(broker.bootstrap, topic_name) == 1


# -------------------------------------------------------------- assign and seek
def _produce_batches(bootstrap: str, topic: str, batches: int, per_batch: int) -> None:
    """``batches`` separate record batches, timestamps 1000 ms apart.

    A long linger keeps each batch's records together; flush() sends them at once.
    """
    producer = _producer(bootstrap, **{"linger.ms": 5000})
    for b in range(batches):
        for i in range(per_batch):
            offset = b * per_batch + i
            producer.produce(topic, value=b"v%d" % offset, partition=0,
                             timestamp=BASE_TIMESTAMP + b * 1000 + i)
        assert producer.flush(TIMEOUT) == 0


def test_seek_earliest_latest_and_offset(broker: BrokerProcess, topic_name: str) -> None:
    _create_topic(broker.bootstrap, topic_name)
    _produce_batches(broker.bootstrap, topic_name, batches=5, per_batch=10)
    consumer = confluent_consumer(broker.bootstrap)
    try:
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        assert [m.offset() for m in confluent_consume(consumer, 50)] == list(range(50))

        # Mid-batch: the broker returns the whole batch 30-39; the client skips to 35.
        consumer.seek(TopicPartition(topic_name, 0, 35))
        got = confluent_consume(consumer, 15)
        assert [(m.offset(), m.value()) for m in got] == [(o, b"v%d" % o) for o in range(35, 50)]

        consumer.assign([TopicPartition(topic_name, 0, OFFSET_END)])
        assert consumer.consume(10, 1.0) == []
        _produce_batches(broker.bootstrap, topic_name, batches=1, per_batch=1)
        (latest,) = confluent_consume(consumer, 1)
        assert (latest.offset(), latest.value()) == (50, b"v0")
    finally:
        consumer.close()


def test_offset_out_of_range_resets(broker: BrokerProcess, topic_name: str) -> None:
    """A position past the log end answers OFFSET_OUT_OF_RANGE; librdkafka then resets
    per auto.offset.reset."""
    _create_topic(broker.bootstrap, topic_name)
    _produce_batches(broker.bootstrap, topic_name, batches=1, per_batch=4)
    with WireConnection(broker.bootstrap) as client:
        answer = client.request(ApiKey.FETCH, FETCH_VERSION,
                                fetch_request(topic_name, 0, 99, max_wait_ms=0))
        (partition,) = answer.responses[0].partitions
        assert (partition.error_code, partition.high_watermark, partition.log_start_offset) == (
            ErrorCode.offset_out_of_range, 4, 0)

    consumer = confluent_consumer(broker.bootstrap, **{"auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic_name, 0, 99)])
        assert [m.offset() for m in confluent_consume(consumer, 4)] == [0, 1, 2, 3]
    finally:
        consumer.close()


def test_batches_larger_than_the_fetch_limits_still_arrive(broker: BrokerProcess,
                                                           topic_name: str) -> None:
    """KIP-74: the first batch of a fetch is returned whole even when it exceeds
    max.partition.fetch.bytes, so a consumer never stalls on a big batch."""
    _create_topic(broker.bootstrap, topic_name, 2)
    producer = _producer(broker.bootstrap, **{"linger.ms": 100, "compression.type": "none"})
    values = [bytes([i]) * 20_000 for i in range(12)]
    for i, value in enumerate(values):
        producer.produce(topic_name, value=value, partition=i % 2)
    assert producer.flush(TIMEOUT) == 0
    consumer = confluent_consumer(broker.bootstrap, **{"max.partition.fetch.bytes": 1024,
                                                       "fetch.max.bytes": 1024,
                                                       "message.max.bytes": 1000})
    try:
        consumer.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in range(2)])
        got = confluent_consume(consumer, len(values))
    finally:
        consumer.close()
    for p in range(2):
        assert [m.value() for m in got if m.partition() == p] == values[p::2]


def test_fetch_from_mid_batch_returns_the_whole_batch(broker: BrokerProcess,
                                                      topic_name: str) -> None:
    _create_topic(broker.bootstrap, topic_name)
    _produce_batches(broker.bootstrap, topic_name, batches=3, per_batch=10)
    with WireConnection(broker.bootstrap) as client:
        answer = client.request(ApiKey.FETCH, FETCH_VERSION,
                                fetch_request(topic_name, 0, 15, max_wait_ms=0))
    (partition,) = answer.responses[0].partitions
    assert (partition.error_code, partition.high_watermark) == (ErrorCode.none, 30)
    assert partition.preferred_read_replica == -1
    batches = [decode_records(b) for b in iter_batches(partition.records)]
    assert [(h.base_offset, h.last_offset) for h, _ in batches] == [(10, 19), (20, 29)]


def test_offsets_for_times(broker: BrokerProcess, topic_name: str) -> None:
    _create_topic(broker.bootstrap, topic_name)
    _produce_batches(broker.bootstrap, topic_name, batches=4, per_batch=5)
    consumer = confluent_consumer(broker.bootstrap)
    try:
        def offset_for(timestamp: int) -> int:
            (found,) = consumer.offsets_for_times([TopicPartition(topic_name, 0, timestamp)],
                                                  timeout=TIMEOUT)
            assert found.error is None
            return found.offset

        assert offset_for(0) == 0
        assert offset_for(BASE_TIMESTAMP + 2000) == 10  # first record of the third batch
        assert offset_for(BASE_TIMESTAMP + 2002) == 12  # inside a batch: the record, not the batch
        assert offset_for(BASE_TIMESTAMP + 2003) == 13
        assert offset_for(BASE_TIMESTAMP + 3004) == 19
        assert offset_for(BASE_TIMESTAMP + 3005) == -1  # after every record: no offset

        consumer.assign([TopicPartition(topic_name, 0, offset_for(BASE_TIMESTAMP + 1003))])
        assert [m.offset() for m in confluent_consume(consumer, 12)] == list(range(8, 20))
    finally:
        consumer.close()


def test_full_fetches_open_a_session_only_at_epoch_0(broker: BrokerProcess,
                                                    topic_name: str) -> None:
    """A full fetch at epoch 0 opens a new session (KIP-227; a session id it names is
    closed first), at epoch -1 none; either way every partition is answered. An
    incremental fetch naming a session the broker never created is refused.
    (tests/test_fetch_sessions.py has the incremental fetches themselves.)"""
    _create_topic(broker.bootstrap, topic_name)
    _produce_batches(broker.bootstrap, topic_name, batches=1, per_batch=3)
    with WireConnection(broker.bootstrap) as client:
        for session_id, epoch in ((0, 0), (0, -1), (1234, -1), (1234, 0)):
            answer = client.request(ApiKey.FETCH, FETCH_VERSION, fetch_request(
                topic_name, 0, 0, max_wait_ms=0, session_id=session_id, session_epoch=epoch))
            assert answer.error_code == ErrorCode.none
            assert (answer.session_id != 0) == (epoch == 0), (session_id, epoch)
            assert answer.responses[0].partitions[0].high_watermark == 3
        answer = client.request(ApiKey.FETCH, FETCH_VERSION, fetch_request(
            topic_name, 0, 0, session_id=1234, session_epoch=5))
        assert (answer.error_code, answer.responses) == (ErrorCode.fetch_session_id_not_found, ())


# ---------------------------------------------------------------- long polling
# Longer than any test waits: a fetch answered only at the end of this wait fails the test.
LONG_POLL_MS = 300_000


def test_produce_wakes_a_waiting_consumer(broker: BrokerProcess, topic_name: str) -> None:
    """With fetch.wait.max.ms at 5 minutes, a record must arrive within the test's
    timeout: the broker answers a parked fetch as soon as data lands rather than at
    the end of the wait."""
    _create_topic(broker.bootstrap, topic_name)
    stats: list[dict] = [{}]
    consumer = confluent_consumer(broker.bootstrap, **{
        "fetch.wait.max.ms": LONG_POLL_MS, "statistics.interval.ms": 100,
        "stats_cb": lambda text: stats.__setitem__(0, json.loads(text))})
    producer = _producer(broker.bootstrap, **{"linger.ms": 0})

    def fetch_parked() -> bool:
        """Fetching from the log end, with a request sent and not answered."""
        partition = stats[0].get("topics", {}).get(topic_name, {}).get("partitions", {})
        return partition.get("0", {}).get("fetch_state") == "active" and any(
            b["nodeid"] >= 0 and b["waitresp_cnt"] > 0 for b in stats[0]["brokers"].values())
    try:
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_END)])
        deadline = time.monotonic() + TIMEOUT
        while not fetch_parked():
            assert time.monotonic() < deadline, "the consumer never fetched"
            assert consumer.consume(1, 0.1) == []
        producer.produce(topic_name, value=b"wake up", partition=0)
        producer.flush(TIMEOUT)
        (message,) = confluent_consume(consumer, 1)
        assert message.value() == b"wake up"
    finally:
        consumer.close()


def test_fetch_on_an_empty_partition_answers_by_max_wait(broker: BrokerProcess,
                                                         topic_name: str) -> None:
    """Not before max wait (a busy loop for the client), and answered at all (the
    connection's 15 s timeout); with min_bytes=0 at once, not at the end of a wait
    longer than that timeout."""
    _create_topic(broker.bootstrap, topic_name)
    with WireConnection(broker.bootstrap) as client:
        started = time.monotonic()
        answer = client.request(ApiKey.FETCH, FETCH_VERSION,
                                fetch_request(topic_name, 0, 0, max_wait_ms=300))
        elapsed = time.monotonic() - started
    (partition,) = answer.responses[0].partitions
    assert partition.error_code == ErrorCode.none
    assert not partition.records
    assert elapsed >= 0.25

    with WireConnection(broker.bootstrap) as client:
        answer = client.request(ApiKey.FETCH, FETCH_VERSION, fetch_request(
            topic_name, 0, 0, max_wait_ms=LONG_POLL_MS, min_bytes=0))
        assert answer.responses[0].partitions[0].error_code == ErrorCode.none


def test_fetch_waits_for_min_bytes(broker: BrokerProcess, topic_name: str) -> None:
    """Less than fetch.min.bytes available: the broker holds the answer until max wait,
    then returns what it has; enough data arriving meanwhile answers at once."""
    _create_topic(broker.bootstrap, topic_name)
    _produce_batches(broker.bootstrap, topic_name, batches=1, per_batch=1)
    with WireConnection(broker.bootstrap) as client:
        started = time.monotonic()
        answer = client.request(ApiKey.FETCH, FETCH_VERSION,
                                fetch_request(topic_name, 0, 0, max_wait_ms=1000,
                                              min_bytes=100_000))
        elapsed = time.monotonic() - started
        (partition,) = answer.responses[0].partitions
        assert partition.records
        assert elapsed >= 0.9

        # A fetch for 50 KB finds 30 KB and waits; it is in the broker's socket before
        # the next 30 KB are sent, which wake it (within the connection's 15 s timeout,
        # not at the end of its 5 minutes), and it answers with both.
        producer = _producer(broker.bootstrap, **{"linger.ms": 0})
        producer.produce(topic_name, value=b"x" * 30_000, partition=0)
        producer.flush(TIMEOUT)
        client.send(ApiKey.FETCH, FETCH_VERSION, fetch_request(
            topic_name, 0, 1, max_wait_ms=LONG_POLL_MS, min_bytes=50_000))
        producer.produce(topic_name, value=b"x" * 30_000, partition=0)
        producer.flush(TIMEOUT)
        answer = client.receive(ApiKey.FETCH, FETCH_VERSION)
        (partition,) = answer.responses[0].partitions
        assert len(partition.records) >= 60_000


# ---------------------------------------------------------------- auto-creation
def test_auto_create_uses_num_partitions(fresh_broker: BrokerProcess, topic_name: str) -> None:
    fresh_broker.overrides["num.partitions"] = "3"
    fresh_broker.start()
    producer = _producer(fresh_broker.bootstrap)
    producer.produce(topic_name, value=b"first", partition=2)
    assert producer.flush(TIMEOUT) == 0
    metadata = producer.list_topics(topic_name, timeout=TIMEOUT)
    assert sorted(metadata.topics[topic_name].partitions) == [0, 1, 2]


def test_consumers_do_not_auto_create(broker: BrokerProcess, topic_name: str) -> None:
    """librdkafka consumers send allow_auto_topic_creation=false; producers true."""
    consumer = confluent_consumer(broker.bootstrap)
    try:
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        assert consumer.consume(1, 1.5) == []
    finally:
        consumer.close()
    with WireConnection(broker.bootstrap) as client:
        missing_id = uuid.uuid4()
        answer = client.request(ApiKey.METADATA, METADATA_VERSION, metadata_request(
            [topic_name, missing_id], allow_auto_topic_creation=False))
        assert [(t.error_code, t.name, t.topic_id) for t in answer.topics] == [
            (ErrorCode.unknown_topic_or_partition, topic_name, None),
            (ErrorCode.unknown_topic_id, None, missing_id)]

    producer = _producer(broker.bootstrap)
    producer.produce(topic_name, value=b"created")
    assert producer.flush(TIMEOUT) == 0
    assert [m.value() for m in _consume_partitions(broker.bootstrap, topic_name, 1, 1)] == [
        b"created"]


def test_auto_create_disabled(fresh_broker: BrokerProcess, topic_name: str) -> None:
    fresh_broker.overrides["auto.create.topics.enable"] = "false"
    fresh_broker.start()
    with WireConnection(fresh_broker.bootstrap) as client:
        answer = client.request(ApiKey.METADATA, METADATA_VERSION,
                                metadata_request([topic_name], allow_auto_topic_creation=True))
        assert [t.error_code for t in answer.topics] == [ErrorCode.unknown_topic_or_partition]
        answer = client.request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request(
            topic_name, 0, make_batch([b"v"])))
        (partition,) = answer.responses[0].partition_responses
        assert partition.error_code == ErrorCode.unknown_topic_or_partition

    producer = _producer(fresh_broker.bootstrap, **{"message.timeout.ms": 3000})
    deliveries = Deliveries()
    producer.produce(topic_name, value=b"nowhere", on_delivery=deliveries)
    producer.flush(TIMEOUT)
    assert len(deliveries.errors) == 1
    assert topic_name not in producer.list_topics(timeout=TIMEOUT).topics


def test_offsets_topic_auto_created_as_internal(fresh_broker: BrokerProcess) -> None:
    """A tool asking for __consumer_offsets before any group used it gets Kafka's internal
    topic, not one made with the client-facing defaults."""
    fresh_broker.overrides["offsets.topic.num.partitions"] = "3"
    fresh_broker.start()
    with WireConnection(fresh_broker.bootstrap) as client:
        answer = client.request(ApiKey.METADATA, METADATA_VERSION, metadata_request(
            ["__consumer_offsets"], allow_auto_topic_creation=True))
    (topic,) = answer.topics
    assert (topic.error_code, topic.is_internal, len(topic.partitions)) == (0, True, 3)
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    resource = ConfigResource("topic", "__consumer_offsets")
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    assert configs["cleanup.policy"].value == "compact"


# ---------------------------------------------------------------- message size
def test_oversized_batch_is_rejected(broker: BrokerProcess, topic_name: str) -> None:
    _create_topic(broker.bootstrap, topic_name, **{"max.message.bytes": "2000"})
    producer = _producer(broker.bootstrap)
    deliveries = Deliveries()
    producer.produce(topic_name, value=b"x" * 5000, partition=0, on_delivery=deliveries)
    producer.flush(TIMEOUT)
    assert [e.code() for e in deliveries.errors] == [KafkaError.MSG_SIZE_TOO_LARGE]

    deliveries = Deliveries()
    producer.produce(topic_name, value=b"small", partition=0, on_delivery=deliveries)
    assert producer.flush(TIMEOUT) == 0
    assert (deliveries.errors, deliveries.offsets) == ([], [(0, 0)])


def test_records_near_the_size_limit(broker: BrokerProcess, topic_name: str) -> None:
    """900 kB records, just under the defaults on both sides, arrive intact (their
    fetch responses go out through sendfile)."""
    _create_topic(broker.bootstrap, topic_name)
    values = [os.urandom(900_000) for _ in range(3)]
    producer = _producer(broker.bootstrap, **{"linger.ms": 0})
    deliveries = Deliveries()
    for value in values:
        producer.produce(topic_name, value=value, partition=0, on_delivery=deliveries)
    assert producer.flush(TIMEOUT) == 0
    assert deliveries.errors == []
    got = _consume_partitions(broker.bootstrap, topic_name, 1, 3)
    assert [m.value() for m in got] == values


def test_message_max_bytes_is_the_topic_default(fresh_broker: BrokerProcess,
                                                topic_name: str) -> None:
    fresh_broker.overrides["message.max.bytes"] = "4096"
    fresh_broker.start()
    _create_topic(fresh_broker.bootstrap, topic_name)
    with WireConnection(fresh_broker.bootstrap) as client:
        big = _produce_raw(client, topic_name, make_batch([b"x" * 5000]))
        assert big.error_code == ErrorCode.message_too_large
        small = _produce_raw(client, topic_name, make_batch([b"y" * 3000]))
        assert (small.error_code, small.base_offset) == (ErrorCode.none, 0)


# ------------------------------------------------- every advertised version, raw
def test_every_advertised_data_path_version(broker: BrokerProcess, topic_name: str) -> None:
    """Each client picks its own versions (librdkafka the newest, aiokafka old ones,
    others anything in between), so every advertised Produce, Fetch, ListOffsets and
    Metadata version must work -- including the hand-written Fetch encoder."""
    _create_topic(broker.bootstrap, topic_name)
    common = {"name": topic_name, "topic": topic_name, "index": 0, "partition": 0,
              "partition_index": 0, "current_leader_epoch": -1, "last_fetched_epoch": -1,
              "log_start_offset": -1, "replica_id": -1, "isolation_level": 0}
    with WireConnection(broker.bootstrap) as client:
        produced = []
        for version in advertised_versions(client, ApiKey.PRODUCE):
            values = [b"produce-v%d-%d" % (version, i) for i in range(2)]
            data = versioned_request(ApiKey.PRODUCE, version, "PartitionProduceData", **common,
                              records=make_batch(values))
            request = versioned_request(
                ApiKey.PRODUCE, version, "ProduceRequest", transactional_id=None, acks=1,
                timeout=datetime.timedelta(seconds=5), topic_data=(versioned_request(
                    ApiKey.PRODUCE, version, "TopicProduceData", **common,
                    partition_data=(data,)),))
            answer = client.request(ApiKey.PRODUCE, version, request)
            (partition,) = answer.responses[0].partition_responses
            assert (partition.error_code, partition.base_offset) == (0, len(produced)), version
            produced += values

        for version in advertised_versions(client, ApiKey.FETCH):
            wanted = versioned_request(ApiKey.FETCH, version, "FetchPartition", **common,
                                fetch_offset=0, partition_max_bytes=1 << 20)
            request = versioned_request(
                ApiKey.FETCH, version, "FetchRequest", **common, cluster_id=None,
                max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, session_id=0,
                session_epoch=-1, forgotten_topics_data=(), rack_id="",
                topics=(versioned_request(ApiKey.FETCH, version, "FetchTopic", **common,
                                   partitions=(wanted,)),))
            answer = client.request(ApiKey.FETCH, version, request)
            (partition,) = answer.responses[0].partitions
            assert (partition.error_code, partition.high_watermark) == (0, len(produced))
            assert getattr(partition, "log_start_offset", 0) == 0
            assert getattr(partition, "preferred_read_replica", -1) == -1
            fetched = [r.value for batch in iter_batches(partition.records)
                       for r in decode_records(batch)[1]]
            assert fetched == produced, version

        for version in advertised_versions(client, ApiKey.LIST_OFFSETS):
            offsets = []
            for timestamp in (-1, -2, BASE_TIMESTAMP + 1):
                query = versioned_request(ApiKey.LIST_OFFSETS, version, "ListOffsetsPartition",
                                   **common, timestamp=timestamp, max_num_offsets=1)
                request = versioned_request(
                    ApiKey.LIST_OFFSETS, version, "ListOffsetsRequest", **common,
                    topics=(versioned_request(ApiKey.LIST_OFFSETS, version, "ListOffsetsTopic",
                                       **common, partitions=(query,)),))
                answer = client.request(ApiKey.LIST_OFFSETS, version, request)
                (partition,) = answer.topics[0].partitions
                assert partition.error_code == 0, version
                offsets.append(partition.offset)
            assert offsets == [len(produced), 0, 1], version

        for version in advertised_versions(client, ApiKey.METADATA):
            request = versioned_request(
                ApiKey.METADATA, version, "MetadataRequest", allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
                topics=(versioned_request(ApiKey.METADATA, version, "MetadataRequestTopic",
                                   name=topic_name, topic_id=None),))
            answer = client.request(ApiKey.METADATA, version, request)
            assert [(b.node_id, b.port) for b in answer.brokers] == [(1, broker.port)]
            (topic,) = answer.topics
            assert (topic.error_code, topic.name) == (0, topic_name), version
            assert [(p.partition_index, p.leader_id) for p in topic.partitions] == [(0, 1)]
