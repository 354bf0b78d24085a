"""The JVM source's reader (``io.gregor.spark.read.TopicRangeReader``) against a scripted
broker, in the Spark session's own JVM: the cases a real broker produces only by luck or not
on demand (control batches next to data, a batch that starts before the requested offset, a
batch cut short at the answer's end, an answer with no batch, leader moves, offsets out of
range, a log ending below the range).  tests/spark/test_partition_reader.py holds the Python
reader, the fallback, to the same cases.

The scripted broker speaks the real protocol (kio's encodings through gregor.protocol.codec)
and answers Metadata, ListOffsets and Fetch from the test's script; the reader is created
through its factory, as Spark's tasks create it, and its column batches are read back.
"""

from __future__ import annotations

import contextlib
import datetime
import random
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.schema.fetch.v11 import response as fetch_response
from kio.schema.list_offsets.v5 import response as list_offsets_response
from kio.schema.metadata.v8 import response as metadata_response
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession
from record_samples import random_batches

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, decode_request, encode_response
from gregor.protocol.compression import CompressionType
from gregor.protocol.errors import ErrorCode
from gregor.protocol.record_batch import crc32c
from gregor.protocol.record_codec import Record, decode_records, encode_batch
from gregor.spark import jvm_source_loaded

TOPIC = "t"
_SIZE = struct.Struct(">i")


@dataclass
class Answer:
    """One Fetch answer for partition 0 of ``t``."""

    records: bytes = b""
    high_watermark: int = 0
    error: ErrorCode = ErrorCode.none
    silent: bool = False
    """No answer at all: the broker hangs."""


@dataclass
class ScriptedBroker:
    """A broker of one partition whose Fetch answers are the script's, in turn (the last one
    repeats); ListOffsets answers ``earliest`` and ``latest``, or the errors of
    ``list_offsets_errors`` in turn (the last one repeats).
    Its metadata names ``leader`` (node 1) as the partition's leader when set, else itself
    (node 0), and ``topic_error`` as the topic's error."""

    answers: list[Answer]
    earliest: int = 0
    latest: int = 0
    fetched: list[int] = field(default_factory=list)
    """The offsets each Fetch asked for."""
    metadata_requests: int = 0
    list_offsets_requests: int = 0
    list_offsets_errors: list[ErrorCode] = field(default_factory=lambda: [ErrorCode.none])
    topic_error: ErrorCode = ErrorCode.none
    leader: ScriptedBroker | None = None
    connections: list[socket.socket] = field(default_factory=list)
    """Every connection accepted (the reader's pool keeps them open between tasks)."""

    def __post_init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        """Stops listening and closes every connection, as a broker that went away."""
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # else the blocked accept() still accepts
        self._server.close()
        self.drop_connections()

    def drop_connections(self) -> None:
        """Closes the connections accepted so far, as a broker does with idle ones."""
        for connection in self.connections:
            with contextlib.suppress(OSError):  # closed already by the other side
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            self.connections.append(connection)
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection:
            while True:
                try:
                    size = _SIZE.unpack(_read(connection, 4))[0]
                    header, body = decode_request(_read(connection, size))
                except (OSError, EOFError):
                    return
                answer = self._answer(header.api_key, body)
                if answer is None:
                    continue
                connection.sendall(encode_response(header.api_key, header.api_version,
                                                   header.correlation_id, answer))

    def _answer(self, api_key: int, body: Any) -> Any:
        no_throttle = datetime.timedelta(0)
        if api_key == ApiKey.METADATA:
            self.metadata_requests += 1
            m = metadata_response
            leader, leader_id = (self, 0) if self.leader is None else (self.leader, 1)
            brokers = {0: self.port, leader_id: leader.port}
            return build(m.MetadataResponse, throttle_time=no_throttle, cluster_id=None,
                         controller_id=0,
                         brokers=tuple(build(m.MetadataResponseBroker, node_id=node,
                                             host="127.0.0.1", port=port, rack=None)
                                       for node, port in brokers.items()),
                         topics=(build(m.MetadataResponseTopic, error_code=self.topic_error,
                                       name=TOPIC, is_internal=False,
                                       partitions=(build(m.MetadataResponsePartition,
                                                         error_code=ErrorCode.none,
                                                         partition_index=0,
                                                         leader_id=leader_id,
                                                         leader_epoch=0,
                                                         replica_nodes=(leader_id,),
                                                         isr_nodes=(leader_id,),
                                                         offline_replicas=()),)),))
        if api_key == ApiKey.LIST_OFFSETS:
            self.list_offsets_requests += 1
            error = self.list_offsets_errors[
                min(self.list_offsets_requests, len(self.list_offsets_errors)) - 1]
            timestamp = body.topics[0].partitions[0].timestamp
            o = list_offsets_response
            return build(o.ListOffsetsResponse, throttle_time=no_throttle, topics=(
                build(o.ListOffsetsTopicResponse, name=TOPIC, partitions=(
                    build(o.ListOffsetsPartitionResponse, partition_index=0,
                          error_code=error, timestamp=-1, leader_epoch=0,
                          offset=self.earliest if timestamp == -2 else self.latest),)),))
        assert api_key == ApiKey.FETCH, api_key
        self.fetched.append(body.topics[0].partitions[0].fetch_offset)
        scripted = self.answers[min(len(self.fetched), len(self.answers)) - 1]
        if scripted.silent:
            return None
        f = fetch_response
        return build(f.FetchResponse, throttle_time=no_throttle, error_code=ErrorCode.none,
                     session_id=0, responses=(build(f.FetchableTopicResponse, topic=TOPIC,
                                                    partitions=(build(
                         f.PartitionData, partition_index=0, error_code=scripted.error,
                         high_watermark=scripted.high_watermark,
                         last_stable_offset=scripted.high_watermark, log_start_offset=0,
                         aborted_transactions=(), preferred_read_replica=-1,
                         records=scripted.records),)),))


def _read(connection: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


@pytest.fixture(scope="module")
def jvm(spark: SparkSession) -> Any:
    if not jvm_source_loaded(spark):
        pytest.skip("the JVM source's jar is not built (no JDK): the Python reader serves")
    return spark._jvm


@pytest.fixture
def brokers() -> Iterator[list[ScriptedBroker]]:
    started: list[ScriptedBroker] = []
    yield started
    for broker in started:
        broker.close()


def read_offsets(jvm: Any, broker: ScriptedBroker, start: int, end: int,
                 fail_on_data_loss: bool = True, poll_timeout_ms: int = 1000,
                 also: ScriptedBroker | None = None) -> list[Any]:
    """The offsets the JVM reader reads from ``[start, end)``, batch after batch."""
    return read_column(jvm, broker, start, end, "offset BIGINT", fail_on_data_loss,
                       poll_timeout_ms, also)


def read_settings(jvm: Any, *bootstrap: ScriptedBroker, fail_on_data_loss: bool = True,
                  poll_timeout_ms: int = 1000) -> Any:
    """ReadSettings naming ``bootstrap`` (in that order) as bootstrap servers."""
    config = jvm.java.util.HashMap()
    config.put("bootstrap.servers", ",".join(f"127.0.0.1:{b.port}" for b in bootstrap))
    config.put("retry.backoff.ms", "10")
    config.put("socket.timeout.ms", "500")
    return jvm.io.gregor.spark.read.ReadSettings.fromOptions(
        config, False, fail_on_data_loss, poll_timeout_ms)


def read_column(jvm: Any, broker: ScriptedBroker, start: int, end: int, column: str,
                fail_on_data_loss: bool = True, poll_timeout_ms: int = 1000,
                also: ScriptedBroker | None = None) -> list[Any]:
    """One column (``name TYPE``, BIGINT or BINARY) as the JVM reader reads it, with
    ``broker`` (and ``also``, if given) as bootstrap servers."""
    settings = read_settings(jvm, broker, *([also] if also else []),
                             fail_on_data_loss=fail_on_data_loss,
                             poll_timeout_ms=poll_timeout_ms)
    schema = jvm.org.apache.spark.sql.types.StructType.fromDDL(column)
    factory = jvm.io.gregor.spark.read.TopicRangeReaderFactory(schema)
    reader = factory.createColumnarReader(
        jvm.io.gregor.spark.read.TopicRange(TOPIC, 0, start, end, settings))
    values: list[Any] = []
    try:
        while reader.next():
            batch = reader.get()
            vector = batch.column(0)
            get = vector.getLong if column.endswith("BIGINT") else vector.getBinary
            values.extend(get(i) for i in range(batch.numRows()))
    finally:
        reader.close()
    return values


def scripted(brokers: list[ScriptedBroker], *answers: Answer, earliest: int = 0,
             latest: int = 0) -> ScriptedBroker:
    broker = ScriptedBroker(list(answers), earliest, latest)
    brokers.append(broker)
    return broker


def test_control_batches_and_records_before_the_fetch_offset_are_skipped(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    data = [Record(o, 1000 + o, b"k", b"v%d" % o) for o in range(5)]
    marker = [Record(5, 2000, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")]
    later = [Record(o, 1000 + o, None, b"v%d" % o) for o in range(6, 9)]
    records = (encode_batch(data, compression=1)
               + encode_batch(marker, base_offset=5, is_control=True, is_transactional=True)
               + encode_batch(later, base_offset=6, compression=4))
    broker = scripted(brokers, Answer(records, 9))
    assert read_offsets(jvm, broker, 3, 9) == [3, 4, 6, 7, 8]
    assert broker.fetched == [3]


def test_a_batch_wholly_before_the_position_and_a_partial_last_batch_are_left_out(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    first = encode_batch([Record(o, 1, None, b"x") for o in range(4)])
    second = encode_batch([Record(o, 1, None, b"y") for o in range(4, 6)], base_offset=4)
    broker = scripted(brokers, Answer(first + second + second[:20], 6))
    assert read_offsets(jvm, broker, 4, 6) == [4, 5]


def test_a_batch_cut_short_is_fetched_again_from_where_the_last_whole_one_ended(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    first = encode_batch([Record(o, 1, None, b"x") for o in range(4)])
    second = encode_batch([Record(o, 1, None, b"y") for o in range(4, 6)], base_offset=4)
    broker = scripted(brokers, Answer(first + second[:30], 6), Answer(second, 6))
    assert read_offsets(jvm, broker, 0, 6) == [0, 1, 2, 3, 4, 5]
    assert broker.fetched == [0, 4]


def test_no_batch_below_a_high_watermark_past_the_end_means_the_rest_are_gaps(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    broker = scripted(brokers, Answer(b"", 25))
    assert read_offsets(jvm, broker, 10, 20) == []
    assert broker.fetched == [10]


def test_a_log_ending_below_the_range_is_waited_for_then_data_loss(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    broker = scripted(brokers, Answer(b"", 10))
    with pytest.raises(Py4JJavaError, match="t-0: expected records up to offset 20, but the "
                                            "log now ends at offset 10"):
        read_offsets(jvm, broker, 10, 20, poll_timeout_ms=300)
    assert len(broker.fetched) > 1, "gave up at the first answer instead of waiting"
    tolerant = scripted(brokers, Answer(b"", 10))
    assert read_offsets(jvm, tolerant, 10, 20, fail_on_data_loss=False,
                        poll_timeout_ms=300) == []


def test_a_leader_that_moved_is_found_again_through_the_metadata(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    batch = encode_batch([Record(o, 1, None, b"x") for o in range(3)])
    broker = scripted(brokers, Answer(error=ErrorCode.not_leader_or_follower),
                      Answer(error=ErrorCode.fenced_leader_epoch), Answer(batch, 3))
    assert read_offsets(jvm, broker, 0, 3) == [0, 1, 2]
    assert broker.fetched == [0, 0, 0]
    assert broker.metadata_requests == 3


def test_offsets_out_of_range_are_data_loss_or_skipped_to_the_log_start(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    batch = encode_batch([Record(o, 1, None, b"x") for o in range(5, 9)], base_offset=5)
    failing = scripted(brokers, Answer(error=ErrorCode.offset_out_of_range), earliest=5,
                       latest=9)
    with pytest.raises(Py4JJavaError, match="t-0: expected to read from offset 2, but the "
                                            "available offsets are 5 to 9. Some data may have "
                                            "been lost"):
        read_offsets(jvm, failing, 2, 9)
    tolerant = scripted(brokers, Answer(error=ErrorCode.offset_out_of_range),
                        Answer(batch, 9), earliest=5, latest=9)
    assert read_offsets(jvm, tolerant, 2, 9, fail_on_data_loss=False) == [5, 6, 7, 8]
    assert tolerant.fetched == [2, 5]


def test_no_progress_for_the_poll_timeout_fails_the_task(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    broker = scripted(brokers, Answer(error=ErrorCode.leader_not_available))
    with pytest.raises(Py4JJavaError, match="t-0: no record at offset 4 within 300 ms "
                                            r"\(reading up to 8\); raise "
                                            "kafkaConsumer.pollTimeoutMs"):
        read_offsets(jvm, broker, 4, 8, poll_timeout_ms=300)


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy-xerial", "lz4", "zstd"])
def test_every_codec_as_gregor_writes_it(jvm: Any, brokers: list[ScriptedBroker],
                                         codec: int) -> None:
    """Snappy here is in xerial's framing (the Java client's), which librdkafka never writes;
    tests/spark/test_source_exactness.py reads librdkafka's raw snappy."""
    records = [Record(o, 1, None, b"v%d" % o * 50) for o in range(200)]
    broker = scripted(brokers, Answer(encode_batch(records, compression=codec), 200))
    assert read_column(jvm, broker, 0, 200, "value BINARY") == [r.value for r in records]


def test_a_broker_that_stops_answering_is_given_up_after_the_socket_timeout(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    batch = encode_batch([Record(o, 1, None, b"x") for o in range(3)])
    broker = scripted(brokers, Answer(silent=True), Answer(batch, 3))
    assert read_offsets(jvm, broker, 0, 3, poll_timeout_ms=30_000) == [0, 1, 2]
    assert broker.fetched == [0, 0]


def test_the_next_task_takes_over_the_connection_and_the_leader_of_the_last(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    """Tasks of one executor share their connections and what the metadata said (as Spark's
    Kafka connector pools its consumers), so a task does not pay a handshake and a Metadata
    round trip before its first Fetch; a connection the broker closed while idle is left for
    a new one."""
    first = encode_batch([Record(o, 1, None, b"x") for o in range(3)])
    second = encode_batch([Record(o, 1, None, b"y") for o in range(3, 6)], base_offset=3)
    third = encode_batch([Record(o, 1, None, b"z") for o in range(6, 9)], base_offset=6)
    broker = scripted(brokers, Answer(first, 9), Answer(second, 9), Answer(third, 9))
    assert read_offsets(jvm, broker, 0, 3) == [0, 1, 2]
    assert read_offsets(jvm, broker, 3, 6) == [3, 4, 5]
    assert (broker.metadata_requests, len(broker.connections)) == (1, 1)
    broker.drop_connections()
    assert read_offsets(jvm, broker, 6, 9) == [6, 7, 8]
    assert broker.fetched == [0, 3, 6]
    assert (broker.metadata_requests, len(broker.connections)) == (1, 2)


def test_a_leader_that_moved_since_the_last_task_is_asked_for_again(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    """The leader a task remembers from the last is forgotten when it answers that it no longer
    leads, or cannot be reached: the metadata is asked again and names the new one."""
    batch = encode_batch([Record(o, 1, None, b"x") for o in range(3)])
    moved = encode_batch([Record(o, 1, None, b"y") for o in range(3, 6)], base_offset=3)
    new = scripted(brokers, Answer(moved, 6))
    old = scripted(brokers, Answer(batch, 3), Answer(error=ErrorCode.not_leader_or_follower))
    assert read_offsets(jvm, old, 0, 3) == [0, 1, 2]
    old.leader = new
    assert read_offsets(jvm, old, 3, 6) == [3, 4, 5]
    assert (old.fetched, new.fetched, old.metadata_requests) == ([0, 3], [3], 2)

    gone = scripted(brokers, Answer(batch, 3))
    successor = scripted(brokers, Answer(moved, 6))
    assert read_offsets(jvm, gone, 0, 3, also=successor) == [0, 1, 2]
    gone.close()
    assert read_offsets(jvm, gone, 3, 6, also=successor) == [3, 4, 5]
    assert (gone.metadata_requests, successor.metadata_requests) == (1, 1)


def list_offsets(jvm: Any, *bootstrap: ScriptedBroker) -> dict[int, int]:
    """The latest offset of t-0 as the driver asks it (OffsetLookup, by
    ListOffsets.fromLeaders)."""
    tps = jvm.java.util.ArrayList()
    tps.add(jvm.io.gregor.spark.read.TopicPartition(TOPIC, 0))
    found = jvm.io.gregor.spark.plan.OffsetLookup(read_settings(jvm, *bootstrap)).latest(tps)
    return {tp.partition(): found.get(tp) for tp in found.keySet()}


def test_list_offsets_asks_again_only_when_that_may_help(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    """The driver's ListOffsets retries what Kafka's clients retry (the leader moved or is not
    there yet, a broker unreachable) and fails at once, naming the error, on what asking
    again would only repeat: an unknown topic, a refused authorization, an unsupported
    version."""
    flaky = scripted(brokers, Answer(), latest=7)
    flaky.list_offsets_errors = [ErrorCode.not_leader_or_follower,
                                 ErrorCode.leader_not_available, ErrorCode.none]
    assert list_offsets(jvm, flaky) == {0: 7}
    # Each retry asked the metadata again: the leader it had named was wrong.
    assert (flaky.list_offsets_requests, flaky.metadata_requests) == (3, 3)

    for error in (ErrorCode.topic_authorization_failed, ErrorCode.unsupported_version):
        refusing = scripted(brokers, Answer(), latest=7)
        refusing.list_offsets_errors = [error]
        with pytest.raises(Py4JJavaError, match=f"t-0: ListOffsets answered {error.name}"):
            list_offsets(jvm, refusing)
        assert refusing.list_offsets_requests == 1
    unknown = scripted(brokers, Answer())
    unknown.topic_error = ErrorCode.unknown_topic_or_partition
    with pytest.raises(Py4JJavaError, match="t: metadata says unknown_topic_or_partition"):
        list_offsets(jvm, unknown)
    assert (unknown.metadata_requests, unknown.list_offsets_requests) == (1, 0)


SOURCE_COLUMNS = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
                  "timestamp TIMESTAMP, timestampType INT")
HEADERS_COLUMN = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"


def read_rows(jvm: Any, broker: ScriptedBroker, start: int, end: int,
              columns: str) -> list[dict[str, Any]]:
    """Every row the JVM reader reads, through Spark's own row view of its column batches
    (as Spark's ColumnarToRow reads them); timestamps as Spark's microseconds."""
    config = jvm.java.util.HashMap()
    config.put("bootstrap.servers", f"127.0.0.1:{broker.port}")
    settings = jvm.io.gregor.spark.read.ReadSettings.fromOptions(config, False, True, 1000)
    schema = jvm.org.apache.spark.sql.types.StructType.fromDDL(columns)
    names = list(schema.fieldNames())
    reader = jvm.io.gregor.spark.read.TopicRangeReaderFactory(schema).createColumnarReader(
        jvm.io.gregor.spark.read.TopicRange(TOPIC, 0, start, end, settings))

    def value(row: Any, i: int, name: str) -> Any:
        if row.isNullAt(i):
            return None
        if name in ("key", "value"):
            return bytes(row.getBinary(i))
        if name == "topic":
            return row.getUTF8String(i).toString()
        if name in ("partition", "timestampType"):
            return row.getInt(i)
        if name in ("offset", "timestamp"):
            return row.getLong(i)
        entries = row.getArray(i)
        return [{"key": entries.getStruct(j, 2).getUTF8String(0).toString(),
                 "value": (None if entries.getStruct(j, 2).isNullAt(1)
                           else bytes(entries.getStruct(j, 2).getBinary(1)))}
                for j in range(entries.numElements())]

    rows = []
    try:
        while reader.next():
            iterator = reader.get().rowIterator()
            while iterator.hasNext():
                row = iterator.next()
                rows.append({name: value(row, i, name) for i, name in enumerate(names)})
    finally:
        reader.close()
    return rows


def expected_rows(batches: list[bytes], first: int, last: int,
                  headers: bool = True) -> list[dict[str, Any]]:
    rows = []
    for batch in batches:
        header, records = decode_records(batch)
        for r in records:
            if first <= r.offset < last:
                row = {"key": r.key, "value": r.value, "topic": TOPIC, "partition": 0,
                       "offset": r.offset,
                       "timestamp": (header.max_timestamp if header.is_log_append_time
                                     else r.timestamp) * 1000,
                       "timestampType": int(header.is_log_append_time)}
                if headers:
                    row["headers"] = [{"key": k, "value": v} for k, v in r.headers] or None
                rows.append(row)
    return rows


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
def test_every_column_equals_the_decoded_records(jvm: Any, brokers: list[ScriptedBroker],
                                                 codec: CompressionType) -> None:
    """The Python scanner's test (tests/spark/test_record_scan.py) for the JVM decoder: keys,
    values and header values null or not, gaps, a LogAppendTime batch, a range that starts
    and ends inside batches, and the headers column left out."""
    batches, base = random_batches(codec)
    broker = scripted(brokers, Answer(b"".join(batches), base))
    everything = expected_rows(batches, 0, base)
    assert read_rows(jvm, broker, 1000, base, f"{SOURCE_COLUMNS}, {HEADERS_COLUMN}") \
        == everything
    first, last = everything[10]["offset"], everything[-10]["offset"]
    assert read_rows(jvm, broker, first, last, f"{SOURCE_COLUMNS}, {HEADERS_COLUMN}") \
        == expected_rows(batches, first, last)
    assert read_rows(jvm, broker, 1000, base, SOURCE_COLUMNS) \
        == expected_rows(batches, 0, base, headers=False)


def test_a_record_cut_short_is_refused(jvm: Any, brokers: list[ScriptedBroker]) -> None:
    """A batch whose CRC is right but whose last record ends past the batch's end."""
    batch = bytearray(encode_batch([Record(0, 1, b"key", b"value")])[:-3])
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
    broker = scripted(brokers, Answer(bytes(batch), 1))
    with pytest.raises(Py4JJavaError, match="record data ends inside a record"):
        read_rows(jvm, broker, 0, 1, SOURCE_COLUMNS)


def test_a_column_batch_holds_about_4_mib_of_large_records(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    """4096 rows is the usual column batch, but of 100 KiB records it would be 400 MiB of
    vectors: a batch takes no more records after 4 MiB (the Python reader's CHUNK_BYTES)."""
    big = [Record(o, 1, None, bytes([o]) * 100_000) for o in range(100)]
    broker = scripted(brokers, Answer(encode_batch(big), 100))
    config = jvm.java.util.HashMap()
    config.put("bootstrap.servers", f"127.0.0.1:{broker.port}")
    settings = jvm.io.gregor.spark.read.ReadSettings.fromOptions(config, False, True, 1000)
    schema = jvm.org.apache.spark.sql.types.StructType.fromDDL("value BINARY")
    reader = jvm.io.gregor.spark.read.TopicRangeReaderFactory(schema).createColumnarReader(
        jvm.io.gregor.spark.read.TopicRange(TOPIC, 0, 0, 100, settings))
    sizes = []
    try:
        while reader.next():
            sizes.append(reader.get().numRows())
    finally:
        reader.close()
    assert sum(sizes) == 100
    assert max(sizes) == (4 << 20) // 100_000 + 1
    assert read_column(jvm, broker, 0, 100, "value BINARY") == [r.value for r in big]


def test_values_of_several_fetch_answers_are_all_kept(
        jvm: Any, brokers: list[ScriptedBroker]) -> None:
    """A column batch's keys and values point into the fetch answer they came in (no copy), and
    every answer is received into the same buffer: the column batch must end before the next
    answer is received, or its rows would read the next answer's bytes."""
    rng = random.Random(3)
    batches = [encode_batch([Record(o, 1, rng.randbytes(8), rng.randbytes(64))
                             for o in range(base, base + 10)], base_offset=base)
               for base in (0, 10, 20)]
    broker = scripted(brokers, *(Answer(batch, 30) for batch in batches))
    assert read_rows(jvm, broker, 0, 30, "key BINARY, value BINARY, offset BIGINT") == [
        {"key": row["key"], "value": row["value"], "offset": row["offset"]}
        for row in expected_rows(batches, 0, 30)]
    assert broker.fetched == [0, 10, 20]


@pytest.mark.parametrize("codec", [CompressionType.LZ4, CompressionType.ZSTD],
                         ids=["lz4", "zstd"])
def test_values_of_compressed_batches_spanning_column_batches_are_all_kept(
        jvm: Any, brokers: list[ScriptedBroker], codec: CompressionType) -> None:
    """Values point into the decompressed records, so each compressed batch of a column batch
    is decompressed into a place of its own, and a batch still being decoded when a column
    batch ends (here one of 5000 records, and one of 9000 over three column batches) keeps its
    records while the next column batch decompresses the batches after it (the last one
    larger than the one before, whose place it would otherwise take)."""
    rng = random.Random(codec)
    batches = []
    base = 0
    for count, size in ((5000, 40), (100, 40), (9000, 40), (3000, 200)):
        batches.append(encode_batch([Record(o, 1, None, rng.randbytes(rng.randrange(1, size)))
                                     for o in range(base, base + count)],
                                    base_offset=base, compression=codec))
        base += count
    broker = scripted(brokers, Answer(b"".join(batches), base))
    assert read_column(jvm, broker, 0, base, "value BINARY") == [
        row["value"] for row in expected_rows(batches, 0, base)]
