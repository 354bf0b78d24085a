"""Compaction of logs holding transactions, as Kafka's cleaner does it: an aborted
transaction's records go; a marker stays while any batch of its transaction is left,
then, like a tombstone, until delete.retention.ms has passed; an abort's index entry
goes with its records. Unit tests on a real Log, then a real broker compacting a
topic that a confluent-kafka transactional producer wrote, read by real clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from clients import confluent_consumer
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from storage_helpers import BASE_TS, open_log, topic_config

from gregor.broker.process import BrokerProcess
from gregor.protocol.control_record import encode_marker, is_commit, is_commit_key
from gregor.protocol.record_batch import BatchHeader, InvalidRecordBatch
from gregor.protocol.record_codec import Record, decode_records, encode_batch, iter_batches
from gregor.storage.cleaner import LogCleaner
from gregor.storage.log import AppendOrigin, Log
from gregor.storage.log_manager import LogManager
from gregor.storage.transaction_index import AbortedTxn

RETENTION_MS = 1000
PID = 7


def txn(log: Log, seq: int, pairs: list[tuple[bytes, bytes]], pid: int = PID,
        epoch: int = 0) -> int:
    records = [Record(offset=i, timestamp=BASE_TS, key=k, value=v)
               for i, (k, v) in enumerate(pairs)]
    batch = encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                         is_transactional=True)
    return log.append_as_leader(batch, 0, origin=AppendOrigin.TRANSACTIONAL_CLIENT).first_offset


def end(log: Log, commit: bool, pid: int = PID, epoch: int = 0) -> int:
    marker = encode_marker(pid, epoch, commit, coordinator_epoch=0, timestamp=BASE_TS)
    return log.append_as_leader(marker, 0, origin=AppendOrigin.COORDINATOR).first_offset


def plain(log: Log, pairs: list[tuple[bytes, bytes]]) -> None:
    records = [Record(offset=i, timestamp=BASE_TS, key=k, value=v)
               for i, (k, v) in enumerate(pairs)]
    log.append_as_leader(encode_batch(records), 0)


def batches(log: Log) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch from the log start, markers and empty batches included."""
    found = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        region = log.read(offset, 1 << 20)
        assert region is not None
        for raw in iter_batches(region.read()):
            header, records = decode_records(raw)
            if header.last_offset >= offset:
                found.append((header, records))
                offset = header.last_offset + 1
    return found


def markers(log: Log) -> dict[int, bool]:
    """Marker offset -> commit, of the markers in the log."""
    return {h.base_offset: is_commit_key(records[0].key or b"")
            for h, records in batches(log) if h.is_control}


def values(log: Log) -> list[bytes | None]:
    return [r.value for h, records in batches(log) if not h.is_control for r in records]


def clean(cleaner: LogCleaner, now_ms: int) -> bool:
    return asyncio.run(cleaner.clean_dirtiest_log(now_ms))


def compacted_log(tmp_path: Path) -> tuple[LogManager, Log]:
    manager = LogManager(tmp_path)
    return manager, manager.get_or_create("t", 0, topic_config(
        cleanup_policy="compact", segment_bytes=200, min_cleanable_dirty_ratio=0.01,
        delete_retention_ms=RETENTION_MS))


def crashed_and_reopened(manager: LogManager, log: Log) -> Log:
    """The log reopened as after a crash: no recovery point, no producer snapshots, so
    the producer state is rebuilt from the batches compaction left."""
    directory = log.directory
    manager.shutdown({})
    (directory.parent / "recovery-point-offset-checkpoint").unlink(missing_ok=True)
    for snapshot in directory.glob("*.snapshot"):
        snapshot.unlink()
    return open_log(directory)


def test_markers_go_once_their_records_are_gone_and_delete_retention_has_passed(
        tmp_path: Path) -> None:
    manager, log = compacted_log(tmp_path)
    txn(log, 0, [(b"a", b"a1"), (b"b", b"b1")])  # 0-1
    first_commit = end(log, commit=True)  # 2
    txn(log, 2, [(b"a", b"aborted"), (b"x", b"aborted")])  # 3-4
    abort = end(log, commit=False)  # 5
    txn(log, 4, [(b"c", b"c1")])  # 6: the producer's last batch, kept
    last_commit = end(log, commit=True)  # 7
    plain(log, [(b"a", b"a2"), (b"b", b"b2")])  # 8-9: a1 and b1 superseded
    log.roll()
    assert markers(log) == {first_commit: True, abort: False, last_commit: True}
    cleaner = LogCleaner(manager)
    now = BASE_TS

    # Pass 1: the superseded and the aborted records go; their markers stay, and so
    # does the abort's index entry, while this pass removes what it covers.
    assert clean(cleaner, now)
    assert values(log) == [b"c1", b"a2", b"b2"]
    assert markers(log) == {first_commit: True, abort: False, last_commit: True}
    assert log.aborted_transactions(0, log.log_end_offset) == [AbortedTxn(PID, 3, 5, 6)]

    # Pass 2, once more was written (the first to find the two transactions empty): the
    # index entry goes; both markers get a delete horizon, and the log is due again once
    # it has passed.
    assert not cleaner.logs_to_clean(now)
    plain(log, [(b"d", b"d1")])
    log.roll()
    assert clean(cleaner, now)
    assert log.aborted_transactions(0, log.log_end_offset) == []
    horizons = {h.base_offset: h.delete_horizon_ms for h, _ in batches(log) if h.is_control}
    assert horizons == {first_commit: now + RETENTION_MS, abort: now + RETENTION_MS,
                        last_commit: None}
    assert not cleaner.logs_to_clean(now + RETENTION_MS - 1)
    assert markers(log) == {first_commit: True, abort: False, last_commit: True}

    # After the horizon: gone. The marker of the transaction whose record is kept stays.
    assert clean(cleaner, now + RETENTION_MS)
    assert markers(log) == {last_commit: True}
    assert values(log) == [b"c1", b"a2", b"b2", b"d1"]

    # A crash: the producer state rebuilt from what is left opens no transaction.
    reopened = crashed_and_reopened(manager, log)
    assert reopened.first_unstable_offset is None
    assert reopened.last_stable_offset(reopened.log_end_offset) == reopened.log_end_offset
    assert reopened.aborted_transactions(0, reopened.log_end_offset) == []


def test_a_marker_that_is_all_left_of_its_producers_epoch_stays(tmp_path: Path) -> None:
    """An abort written at a bumped epoch (a fenced or timed-out producer): once its
    transaction's records are gone, it is the only trace of the epoch, which fencing
    needs after a restart; Kafka keeps it too."""
    manager, log = compacted_log(tmp_path)
    txn(log, 0, [(b"a", b"aborted")], pid=3, epoch=0)  # 0
    abort = end(log, commit=False, pid=3, epoch=1)  # 1
    plain(log, [(b"a", b"a1")])  # 2
    log.roll()
    cleaner = LogCleaner(manager)
    for pass_number, now in enumerate((BASE_TS, BASE_TS, BASE_TS + RETENTION_MS)):
        plain(log, [(b"b", b"b%d" % pass_number)])
        log.roll()
        assert clean(cleaner, now)
    assert values(log) == [b"a1", b"b2"]
    assert markers(log) == {abort: False}
    assert log.aborted_transactions(0, log.log_end_offset) == []


def test_a_dropped_marker_leaves_no_transaction_behind_for_recovery(tmp_path: Path) -> None:
    """A producer gone from the producer state (expired) keeps nothing in the log: its
    records and then its marker go. The marker ends its segment, where an empty batch
    stands in for it; replayed after a crash, that batch must not open a transaction
    (nothing would ever end it, and read_committed readers would stop there)."""
    manager, log = compacted_log(tmp_path)
    txn(log, 0, [(b"a", b"a1")], pid=5)  # 0
    end(log, commit=True, pid=5)  # 1
    log.roll()
    assert log.producer_state.remove_expired(BASE_TS + 10**12, 10**12) == 1
    cleaner = LogCleaner(manager)
    for pass_number, now in enumerate((BASE_TS, BASE_TS, BASE_TS + RETENTION_MS)):
        # a1 superseded, then records of other keys, too large to join the marker's
        # segment in a cleaned group.
        plain(log, [(b"abc"[pass_number:pass_number + 1], b"." * 150)])
        log.roll()
        assert clean(cleaner, now)
    assert markers(log) == {}
    first = batches(log)[0][0]
    assert (first.base_offset, first.last_offset, first.records_count) == (1, 1, 0)

    reopened = crashed_and_reopened(manager, log)
    assert reopened.first_unstable_offset is None


def test_a_marker_supersedes_no_record(tmp_path: Path) -> None:
    """A marker's record key is its type (version 0, commit 1): a record of the topic
    with those four bytes as its key is not an older value of the marker."""
    manager, log = compacted_log(tmp_path)
    commit_key = b"\x00\x00\x00\x01"
    plain(log, [(commit_key, b"kept")])  # 0
    txn(log, 0, [(b"a", b"a1")])  # 1
    end(log, commit=True)  # 2
    log.roll()
    assert clean(LogCleaner(manager), BASE_TS)
    assert values(log) == [b"kept", b"a1"]


# ----------------------------------------------------------------- end to end
def control_batches(partition_dir: Path) -> list[tuple[int, bool]] | None:
    """(offset, commit) of the markers in the partition's segment files, read while the
    broker runs; None when a file changed under the read (a swap): read again."""
    found = []
    try:
        for path in sorted(partition_dir.glob("*.log")):
            for raw in iter_batches(path.read_bytes()):
                header, _ = decode_records(raw)
                if header.is_control:
                    found.append((header.base_offset, header.records_count > 0
                                  and is_commit(raw)))
    except (OSError, InvalidRecordBatch):
        return None
    return found


def read_topic(bootstrap: str, topic: str, isolation: str, end_offset: int
               ) -> list[tuple[int, bytes, bytes]]:
    consumer = confluent_consumer(bootstrap, **{"isolation.level": isolation})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[tuple[int, bytes, bytes]] = []
    try:
        deadline = time.monotonic() + 20
        while consumer.position([TopicPartition(topic, 0)])[0].offset < end_offset:
            assert time.monotonic() < deadline, f"stuck at {seen[-1:] or 'the start'}"
            for message in consumer.consume(1000, 0.2):
                assert message.error() is None, message.error()
                seen.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    return seen


def test_a_broker_compacts_away_aborted_records_and_spent_markers(
        fresh_broker: BrokerProcess, topic_name: str) -> None:
    fresh_broker.overrides.update({"log.cleaner.backoff.ms": "100"})
    fresh_broker.start()
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "2000",
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0"})])[
        topic_name].result(15)
    producer = Producer({"bootstrap.servers": fresh_broker.bootstrap,
                         "transactional.id": f"tx-{topic_name}", "linger.ms": 0})
    producer.init_transactions(15)
    keys = [b"k%d" % i for i in range(10)]
    for outcome, tag in ((True, b"first"), (False, b"aborted"), (True, b"last")):
        producer.begin_transaction()
        # The aborted transaction also writes a key that nothing else writes.
        for key in keys if outcome else [*keys, b"k-aborted"]:
            producer.produce(topic_name, tag + b"-" + key, key)
        producer.flush(15)  # written before the abort, so the log holds them
        if outcome:
            producer.commit_transaction(15)
        else:
            producer.abort_transaction(15)
    # The first transaction's records superseded, then the topic goes on being written
    # (a marker goes in a pass after the one that removed its records, and passes need
    # new dirty records), which pushes everything out of the active segment.
    plain_producer = Producer({"bootstrap.servers": fresh_broker.bootstrap, "linger.ms": 0})
    for key in keys[:5]:
        plain_producer.produce(topic_name, b"plain-" + key, key)

    # Three markers were written; only the last transaction's records are left, so only
    # its marker may stay.
    partition_dir = fresh_broker.data_dir / f"{topic_name}-0"
    deadline = time.monotonic() + 30
    filler = 0
    while (found := control_batches(partition_dir)) is None or len(found) != 1 or filler < 40:
        assert time.monotonic() < deadline, f"markers left: {found}"
        plain_producer.produce(topic_name, b"filler-%d" % filler + b"." * 100,
                               b"f%d" % (filler % 4))
        plain_producer.flush(15)
        filler += 1
        time.sleep(0.05)
    ((last_marker, commit),) = found
    assert commit
    end_offset = _end_offset(fresh_broker.bootstrap, topic_name)

    expected = ({key: b"plain-" + key for key in keys[:5]}
                | {key: b"last-" + key for key in keys[5:]})
    for isolation in ("read_uncommitted", "read_committed"):
        seen = read_topic(fresh_broker.bootstrap, topic_name, isolation, end_offset)
        got = {key: value for _, key, value in seen if key.startswith(b"k")}
        assert got == expected, isolation
        assert not [v for _, _, v in seen if v.startswith((b"aborted", b"first"))], isolation
        offsets = [offset for offset, _, _ in seen]
        assert offsets == sorted(set(offsets)) and last_marker not in offsets

    # kill -9: recovery replays what compaction left; no transaction is left open, so
    # read_committed readers (librdkafka, kafka-python) still read to the end.
    fresh_broker.kill()
    for snapshot in partition_dir.glob("*.snapshot"):
        snapshot.unlink()
    fresh_broker.start()
    seen = read_topic(fresh_broker.bootstrap, topic_name, "read_committed", end_offset)
    assert {key: value for _, key, value in seen if key.startswith(b"k")} == expected
    kp = KafkaConsumer(bootstrap_servers=fresh_broker.bootstrap, enable_auto_commit=False,
                       isolation_level="read_committed", consumer_timeout_ms=3000)
    kp.assign([KpTopicPartition(topic_name, 0)])
    kp.seek_to_beginning()
    assert [(r.offset, r.value) for r in kp] == [(o, v) for o, _, v in seen]
    kp.close()


def _end_offset(bootstrap: str, topic: str) -> int:
    consumer = confluent_consumer(bootstrap)
    with contextlib.closing(consumer):
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
