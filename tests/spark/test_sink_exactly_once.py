"""The sink's ``deliveryGuarantee=exactly-once``: a micro-batch's records become visible to
read_committed readers (librdkafka) when the driver commits; a task killed
mid-write and a driver killed in the middle of its commits each leave every record
exactly once; keys land where the at-least-once sink (librdkafka's murmur2) puts them.

Spark runs ``local[2,4]``: two cores, and a failed task is retried (plain ``local`` never
retries), as on a cluster.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import col, udf
from pyspark.sql.types import BinaryType

from gregor.client.connection import BrokerConnection
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.record_codec import decode_records
from gregor.spark import exactly_once_sink
from gregor.spark.exactly_once_sink import AlreadyDecided, PreparedTransaction
from gregor.spark.options import parse_sink_options
from gregor.spark.partition_leader import FetchSettings
from gregor.spark.record_encoder import BatchBuilder
from gregor.spark.session import build_session
from gregor.spark.sink_commit_log import BatchDecision, log_topic, write_decision
from gregor.spark.transactional_producer import (
    TransactionalProducer,
    TransactionFailed,
    end_transactions,
    fence,
)

CRASH_QUERY = Path(__file__).with_name("sink_crash_query.py")


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """Small Arrow batches, so that a task's first records reach the broker long before
    its last ones are read."""
    session = build_session("gregor-sink-exactly-once", master="local[2,4]", **{
        "spark.sql.execution.arrow.maxRecordsPerBatch": "50"})
    yield session
    session.stop()


def new_topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"eos-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def fill(bootstrap: str, topic: str, per_partition: int, size: int = 16) -> list[bytes]:
    """``per_partition`` records in each of two partitions; their values, all distinct."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = []
    for partition in range(2):
        for i in range(per_partition):
            value = f"{partition}-{i}-".encode().ljust(size, b"x")
            producer.produce(topic, value, key=f"k{partition}-{i}".encode(), partition=partition)
            values.append(value)
    assert producer.flush(30) == 0
    return values


def read_all(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Every value a consumer at ``isolation`` gets up to each partition's end (the last
    stable offset at read_committed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "isolation.level": isolation, "enable.partition.eof": True,
                         "enable.auto.commit": False})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    values: list[bytes] = []
    at_end: set[int] = set()
    try:
        while len(at_end) < len(partitions):
            message = consumer.poll(30)
            assert message is not None, f"no end of partitions {set(partitions) - at_end}"
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add(message.partition())
            else:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def wait_until(condition: Any, what: str, attempts: int = 240) -> None:
    """Polls the broker (each poll waits for the consumer to reach the end)."""
    for _ in range(attempts):
        if condition():
            return
    raise AssertionError(f"timed out waiting for {what}")


def stream_to(spark: SparkSession, bootstrap: str, source: str, sink: str, checkpoint: Path,
              transform: Any = None) -> Any:
    df: DataFrame = (spark.readStream.format("gregor")
                     .option("kafka.bootstrap.servers", bootstrap)
                     .option("subscribe", source).option("startingOffsets", "earliest").load())
    df = df.select("key", transform(df) if transform else col("value"))
    return (df.writeStream.format("gregor")
            .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
            .option("deliveryGuarantee", "exactly-once")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


def test_delivery_guarantee_option() -> None:
    servers = {"kafka.bootstrap.servers": "b:9092"}
    assert not parse_sink_options(servers).exactly_once
    assert parse_sink_options({**servers, "deliveryGuarantee": "Exactly-Once"}).exactly_once
    with pytest.raises(ValueError, match="deliveryGuarantee"):
        parse_sink_options({**servers, "deliveryGuarantee": "exactly_once_v2"})


def test_record_encoder_round_trip() -> None:
    """Null keys and values, headers, lengths past the varint table, two timestamps."""
    builder = BatchBuilder()
    builder.add(None, [b"a", None, b"x" * 20000], None, 1_000)
    builder.add([b"k", None], [b"b", b""], [[("h", b"v"), ("n", None)], None], 1_250)
    header, records = decode_records(builder.build(7, 3, 11))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, 11)
    assert header.is_transactional and header.last_offset_delta == 4
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (0, 1000, None, b"a", []), (1, 1000, None, None, []), (2, 1000, None, b"x" * 20000, []),
        (3, 1250, b"k", b"b", [("h", b"v"), ("n", None)]), (4, 1250, None, b"", []),
    ]


def test_partition_and_header_columns(spark: SparkSession, broker: Any) -> None:
    topic = new_topic(broker.bootstrap, partitions=3)
    rows = spark.createDataFrame(
        [("a", "1", 2, [("h", "x")]), (None, "2", None, None), ("c", "3", 0, [])],
        "key string, value string, partition int, headers array<struct<key:string,value:string>>")
    (rows.write.format("gregor").mode("append")
     .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic)
     .option("deliveryGuarantee", "exactly-once").save())
    back = (spark.read.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic).option("kafka.isolation.level", "read_committed")
            .option("includeHeaders", "true").load().collect())
    got = {bytes(r.value): (r.key and bytes(r.key), r.partition,
                            [(h.key, bytes(h.value)) for h in r.headers or []]) for r in back}
    assert got[b"1"] == (b"a", 2, [("h", b"x")])
    assert got[b"2"][0] is None and got[b"2"][2] == []
    assert got[b"3"] == (b"c", 0, [])


def test_a_micro_batch_becomes_visible_only_when_the_driver_commits(
        spark: SparkSession, broker: Any, tmp_path: Path) -> None:
    """One task has written and flushed; the other is held at its last row: read_uncommitted
    sees the first task's records, read_committed nothing until the micro-batch commits."""
    source, sink = new_topic(broker.bootstrap), new_topic(broker.bootstrap)
    values = fill(broker.bootstrap, source, 100)
    release = tmp_path / "release"

    @udf(BinaryType())
    def hold_last_row(partition, offset, value):  # type: ignore[no-untyped-def]
        import time
        while partition == 1 and offset == 99 and not os.path.exists(release):
            time.sleep(0.05)
        return value

    query = stream_to(spark, broker.bootstrap, source, sink, tmp_path / "checkpoint",
                      lambda df: hold_last_row("partition", "offset", "value").alias("value"))
    try:
        wait_until(lambda: len(read_all(broker.bootstrap, sink, "read_uncommitted")) >= 100,
                   "the first task's records")
        assert read_all(broker.bootstrap, sink, "read_committed") == []
    finally:
        release.touch()
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert Counter(read_all(broker.bootstrap, sink, "read_committed")) == Counter(values)


def test_a_task_killed_mid_write_leaves_each_record_once(
        spark: SparkSession, broker: Any, tmp_path: Path) -> None:
    """A UDF kills its Python worker once, when the task has sent records of its
    transaction; the retried attempt fences it, aborting them.

    The UDF runs in its own Python worker, the sink's writer in another, which gets the
    rows before offset 300 while the UDF holds that one: the UDF waits until some of
    them are in the sink topic before it kills, since how far the writer got by then
    is otherwise a race (it was seen to have sent nothing)."""
    source, sink = new_topic(broker.bootstrap), new_topic(broker.bootstrap)
    values = fill(broker.bootstrap, source, 400, size=8192)
    killed = tmp_path / "killed"
    bootstrap = broker.bootstrap

    def wait_for_partition_0_records() -> None:
        """Until the sink topic holds a record from source partition 0, uncommitted
        (values start with their partition), for at most two minutes.  Imports in the
        function: cloudpickle cannot send confluent_kafka's classes to the worker."""
        import time

        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                             "isolation.level": "read_uncommitted",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(sink, p, OFFSET_BEGINNING) for p in range(2)])
        deadline = time.monotonic() + 120
        try:
            while time.monotonic() < deadline:
                message = consumer.poll(1)
                if message is not None and not message.error() and \
                        message.value().startswith(b"0-"):
                    return
        finally:
            consumer.close()

    @udf(BinaryType())
    def kill_once(partition, offset, value):  # type: ignore[no-untyped-def]
        if partition == 0 and offset == 300:
            try:
                os.close(os.open(killed, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return value
            wait_for_partition_0_records()
            os.kill(os.getpid(), signal.SIGKILL)
        return value

    query = stream_to(spark, broker.bootstrap, source, sink, tmp_path / "checkpoint",
                      lambda df: kill_once("partition", "offset", "value").alias("value"))
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert killed.exists()
    assert len(read_all(broker.bootstrap, sink, "read_uncommitted")) > len(values), \
        "the killed attempt sent nothing: nothing was there to abort"
    assert Counter(read_all(broker.bootstrap, sink, "read_committed")) == Counter(values)


CRASH_HOOK = '''
import os, signal
from pathlib import Path
if os.environ.get("GREGOR_TEST_CRASH_DIR"):
    from gregor.spark import exactly_once_sink
    _end = exactly_once_sink.end_transactions
    _dir = Path(os.environ["GREGOR_TEST_CRASH_DIR"])

    def end_transactions(settings, transactions, commit):
        """Commit the first transaction only, then kill -9 the driver and its JVM."""
        transactions = list(transactions)
        if not commit or len(transactions) < 2:
            return _end(settings, transactions, commit)
        try:
            os.close(os.open(_dir / "crashed", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return _end(settings, transactions, commit)
        _end(settings, transactions[:1], commit)
        for pid in (_dir / "pids").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
        os._exit(1)

    exactly_once_sink.end_transactions = end_transactions
'''


def test_a_driver_killed_amid_its_commits_leaves_each_record_once(
        spark: SparkSession, broker: Any, tmp_path: Path) -> None:
    """The driver records the micro-batch's two transactions, commits one and is killed
    (with its JVM); restarted from its checkpoint, the query replays the micro-batch,
    which writes nothing and commits the other.

    The killed driver runs in a process of its own; the restart is the same query in
    this module's session, from the checkpoint the killed one left (a second driver
    process of its own took 60-100 s of a loaded suite, most of it Spark's start)."""
    source, sink = new_topic(broker.bootstrap), new_topic(broker.bootstrap)
    values = fill(broker.bootstrap, source, 300)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(CRASH_HOOK)
    env = {**os.environ, "GREGOR_TEST_CRASH_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(hook),
                                                       os.environ.get("PYTHONPATH")]))}
    checkpoint = tmp_path / "checkpoint"
    # The output goes to a file, which Python workers the killed JVM leaves behind for a
    # moment do not hold open.
    output = tmp_path / "killed.log"
    with output.open("wb") as out:
        status = subprocess.run(
            [sys.executable, str(CRASH_QUERY), broker.bootstrap, source, sink,
             str(checkpoint), str(tmp_path / "pids")],
            env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300).returncode
    tail = output.read_text(errors="replace")[-3000:]
    assert (tmp_path / "crashed").exists(), tail
    assert status != 0
    assert len(read_all(broker.bootstrap, sink, "read_committed")) < len(values)

    query = stream_to(spark, broker.bootstrap, source, sink, checkpoint)
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert Counter(read_all(broker.bootstrap, sink, "read_committed")) == Counter(values)


def test_keys_land_where_the_at_least_once_sink_puts_them(
        spark: SparkSession, broker: Any) -> None:
    rows = spark.range(2000, numPartitions=2).selectExpr(
        "CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
    placed = {}
    for guarantee in ("at-least-once", "exactly-once"):
        topic = new_topic(broker.bootstrap, partitions=5)
        (rows.write.format("gregor").mode("append")
         .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic)
         .option("deliveryGuarantee", guarantee).save())
        back = (spark.read.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", topic).option("kafka.isolation.level", "read_committed")
                .load().select("key", "partition").collect())
        placed[guarantee] = {bytes(r.key): r.partition for r in back}
    assert len(placed["exactly-once"]) == 2000
    assert placed["exactly-once"] == placed["at-least-once"]


def open_transaction(bootstrap: str, topic: str, name: str, values: list[bytes]) -> Any:
    """A transaction holding ``values``, flushed and left open as a task leaves it."""
    producer = TransactionalProducer(FetchSettings.from_config({"bootstrap.servers": bootstrap}),
                                     name, 60_000)
    producer.add(topic, None, values, None, None, 0)
    transaction = producer.flush()
    producer.close()
    return transaction


def test_abort_after_the_decision_leaves_the_transactions_to_the_replay(broker: Any) -> None:
    """Spark calls ``abort`` when ``commit`` failed, also after the decision was recorded:
    the transactions stay open, and the replay's commit (every task AlreadyDecided)
    makes them visible, twice over without harm."""
    options = parse_sink_options({"kafka.bootstrap.servers": broker.bootstrap})
    sink, log = new_topic(broker.bootstrap), log_topic(uuid.uuid4().hex)
    values = [b"a", b"b", b"c"]
    txn = open_transaction(broker.bootstrap, sink, f"eos-{uuid.uuid4().hex}", values)
    settings = FetchSettings.from_config(options.client_config)
    write_decision(settings, options.client_config, log, BatchDecision(7, (txn,)))

    exactly_once_sink.abort([PreparedTransaction(txn, 3, log, "eos")], 7, options)
    exactly_once_sink.commit([AlreadyDecided(log)], 7, options)
    exactly_once_sink.commit([AlreadyDecided(log)], 7, options)
    assert sorted(read_all(broker.bootstrap, sink, "read_committed")) == values


def test_abort_before_the_decision_aborts(broker: Any) -> None:
    """The transactions of the micro-batch's tasks, and that of a task that failed (no
    message: its id, named after its partition, is fenced)."""
    options = parse_sink_options({"kafka.bootstrap.servers": broker.bootstrap})
    sink, log = new_topic(broker.bootstrap, partitions=1), log_topic(uuid.uuid4().hex)
    settings = FetchSettings.from_config(options.client_config)
    decided = open_transaction(broker.bootstrap, sink, f"eos-{uuid.uuid4().hex}", [b"old"])
    write_decision(settings, options.client_config, log, BatchDecision(6, (decided,)))
    exactly_once_sink.commit([AlreadyDecided(log)], 6, options)
    prefix = f"eos-{uuid.uuid4().hex}"
    txn = open_transaction(broker.bootstrap, sink, f"{prefix}-0", [b"new"])
    open_transaction(broker.bootstrap, sink, f"{prefix}-1", [b"of the failed task"])

    exactly_once_sink.abort([PreparedTransaction(txn, 1, log, prefix), None], 7, options)
    with pytest.raises(TransactionFailed, match="invalid_txn_state"):
        end_transactions(settings, [txn], commit=True)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(sink, b"after")
    assert producer.flush(30) == 0
    assert read_all(broker.bootstrap, sink, "read_committed") == [b"old", b"after"]


def test_a_write_that_fails_leaves_no_transaction_open(spark: SparkSession,
                                                       broker: Any) -> None:
    """A batch write whose task fails at a bad row, every attempt: each retry's
    InitProducerId aborts what the attempt before sent, and the driver's abort what the
    last one sent (and what its Python worker, outliving the task, may begin after), so
    read_committed readers of the partition are not held back until the transaction's
    timeout (15 minutes): a record written after the failure is visible at once."""
    sink = new_topic(broker.bootstrap, partitions=1)

    @udf(BinaryType())
    def bad_row(number):  # type: ignore[no-untyped-def]
        if number == 150:
            raise ValueError("bad row")
        return str(number).encode().ljust(20_000, b"x")

    rows = spark.range(0, 200, numPartitions=1).select(bad_row("id").alias("value"))
    with pytest.raises(Exception, match="bad row"):
        (rows.write.format("gregor").mode("append")
         .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", sink)
         .option("deliveryGuarantee", "exactly-once").save())
    written = read_all(broker.bootstrap, sink, "read_uncommitted")
    assert len(written) >= 100  # the attempts had sent records before the bad row
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(sink, b"after the failure")
    assert producer.flush(30) == 0
    assert read_all(broker.bootstrap, sink, "read_committed") == [b"after the failure"]


def test_commits_are_all_sent_before_any_answer_is_awaited(broker: Any, monkeypatch: Any
                                                            ) -> None:
    """The driver sends every EndTxn of a micro-batch before it reads an answer: once
    they are out, the coordinators commit them all even if the driver dies, and they
    land within a round trip of each other, not one after another."""
    sink = new_topic(broker.bootstrap)
    settings = FetchSettings.from_config({"bootstrap.servers": broker.bootstrap})
    prefix = f"eos-{uuid.uuid4().hex}"
    txns = [open_transaction(broker.bootstrap, sink, f"{prefix}-{n}", [b"%d" % n])
            for n in range(3)]
    calls: list[str] = []
    send, receive = BrokerConnection.send, BrokerConnection.receive

    def spied_send(self: BrokerConnection, api_key: int, *args: Any) -> None:
        calls.append(f"send {ApiKey(api_key).name}")
        send(self, api_key, *args)

    def spied_receive(self: BrokerConnection) -> Any:
        answer = receive(self)
        calls.append(f"receive {type(answer).__name__}")
        return answer

    monkeypatch.setattr(BrokerConnection, "send", spied_send)
    monkeypatch.setattr(BrokerConnection, "receive", spied_receive)
    end_transactions(settings, txns, commit=True)
    ends = [c for c in calls if "END_TXN" in c or "EndTxn" in c]
    assert ends == ["send END_TXN"] * 3 + ["receive EndTxnResponse"] * 3, calls
    assert sorted(read_all(broker.bootstrap, sink, "read_committed")) == [b"0", b"1", b"2"]


def test_ending_and_fencing_share_one_connection_per_coordinator(broker: Any,
                                                                monkeypatch: Any) -> None:
    """A micro-batch's EndTxns, and the InitProducerIds that fence a failed batch's ids,
    find their coordinators over one bootstrap connection and reach each coordinator
    over one connection, not one of each per transaction."""
    sink = new_topic(broker.bootstrap)
    settings = FetchSettings.from_config({"bootstrap.servers": broker.bootstrap})
    prefix = f"eos-{uuid.uuid4().hex}"
    txns = [open_transaction(broker.bootstrap, sink, f"{prefix}-{n}", [b"%d" % n])
            for n in range(4)]
    opened: list[tuple[str, int]] = []
    init = BrokerConnection.__init__

    def counted_init(self: BrokerConnection, address: tuple[str, int],
                     settings: FetchSettings) -> None:
        opened.append(address)
        init(self, address, settings)

    monkeypatch.setattr(BrokerConnection, "__init__", counted_init)
    fence(settings, [t.transactional_id for t in txns[:2]], 60_000)
    assert len(opened) == 2, opened  # the bootstrap server, the one coordinator
    opened.clear()
    end_transactions(settings, txns[2:], commit=True)
    assert len(opened) == 2, opened
    monkeypatch.undo()
    # Fenced, the first two are aborted: read_committed reads past them.
    assert sorted(read_all(broker.bootstrap, sink, "read_committed")) == [b"2", b"3"]
