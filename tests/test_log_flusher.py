"""A broker fsyncs rolled segments, the active ones that flush.messages or flush.ms
make due, and writes checkpoints (log start offsets among them) on a worker thread, so
the event loop never waits for the disk; the recovery point passes a segment only once
it is on disk, and a produce or DeleteRecords is answered only after its fsync."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import threading
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from in_process_broker import bootstrap_of, in_process_broker
from replication_helpers import state
from storage_helpers import batch, open_log, topic_config
from test_replication_network import leading_broker, until

from gregor.broker.log_flusher import LogFlusher
from gregor.cluster.replica_manager import ReplicaManager
from gregor.config import BrokerConfig
from gregor.storage import checkpoint_file as checkpoint_module
from gregor.storage import log_manager as log_manager_module
from gregor.storage import segment as segment_module
from gregor.storage.checkpoint_file import read_checkpoint
from gregor.storage.log import Log
from gregor.storage.log_manager import LOG_START_FILE, LogManager


class HeldFsync:
    """os.fsync that records which thread synced which file descriptor, and holds the
    worker's fsyncs until released (the event loop's own, if any, pass at once)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.release = threading.Event()
        self._real = os.fsync

    def __call__(self, fd: int) -> None:
        self.calls.append((threading.current_thread().name, fd))
        if threading.current_thread() is not threading.main_thread():
            self.release.wait(10)
        self._real(fd)


def _small_segments(tmp_path: Path, flusher: LogFlusher) -> Log:
    log = open_log(tmp_path, topic_config(segment_bytes=1024))
    log.segment_flusher = flusher.segment_rolled
    return log


def test_a_roll_fsyncs_on_the_worker_and_the_recovery_point_waits_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = HeldFsync()
    monkeypatch.setattr(segment_module.os, "fsync", held)

    async def scenario() -> None:
        flusher = LogFlusher()
        log = _small_segments(tmp_path, flusher)
        log.append_as_leader(batch(3, value_size=400), 0)
        rolled = log.active_segment
        log.append_as_leader(batch(3, value_size=400), 0)  # past segment.bytes: a roll
        assert [s.base_offset for s in log.segments] == [0, 3]
        await asyncio.sleep(0.05)  # the loop runs on while the fsync is held
        assert log.recovery_point == 0
        held.release.set()
        await flusher.drain()
        assert log.recovery_point == 3
        assert [thread for thread, fd in held.calls if fd == rolled.fd] == ["log-flusher_0"]
        flusher.close()

    asyncio.run(scenario())


def test_a_roll_fsyncs_its_producer_snapshot_on_the_worker_not_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As Kafka's roll (takeSnapshot(sync = false), then the flush-log task): on the
    loop, an fsync of even a small file waited for the device's whole cache flush, half
    a second while a reassignment wrote gigabytes back (broker 4 blocked 9-30% of a
    move in it)."""
    synced: list[tuple[str, str]] = []
    real = os.fsync

    def recording(fd: int) -> None:
        synced.append((threading.current_thread().name, os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(checkpoint_module.os, "fsync", recording)

    async def scenario() -> None:
        flusher = LogFlusher()
        log = _small_segments(tmp_path, flusher)
        log.append_as_leader(batch(3, value_size=400), 0)
        log.append_as_leader(batch(3, value_size=400), 0)  # past segment.bytes: a roll
        assert [s.base_offset for s in log.segments] == [0, 3]
        await flusher.drain()
        assert log.producer_state.snapshot_offsets()[-1] == 3
        assert [(thread, Path(path).name) for thread, path in synced
                if ".snapshot" in path] == [("log-flusher_0", f"{3:020d}.snapshot")]
        assert log.recovery_point == 3
        flusher.close()

    asyncio.run(scenario())


def test_a_deleted_log_is_renamed_at_once_and_removed_on_the_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's asyncDelete: a replica moved off this broker (or a deleted topic) leaves
    its name free at once, and its files are unlinked on the worker: on the loop, a
    leader that had just handed a partition over stopped for as long as the disk took
    to discard its gigabytes."""
    removed_on: list[str] = []
    real = shutil.rmtree

    def recording(path: Path, ignore_errors: bool = False) -> None:
        removed_on.append(threading.current_thread().name)
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(log_manager_module.shutil, "rmtree", recording)

    async def scenario() -> None:
        flusher = LogFlusher()
        manager = LogManager(tmp_path / "logs")
        manager.checkpoint_writer = flusher.write
        manager.get_or_create("t", 0, topic_config()).append_as_leader(batch(3), 0)
        manager.delete("t", 0)
        assert not (tmp_path / "logs" / "t-0").exists()
        assert manager.get_or_create("t", 0, topic_config()).log_end_offset == 0
        await flusher.drain()
        assert removed_on == ["log-flusher_0"]
        assert not [p for p in (tmp_path / "logs").iterdir() if p.name.endswith("-delete")]
        flusher.close()

    asyncio.run(scenario())


def test_a_segment_truncated_before_its_fsync_completes_is_not_passed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = HeldFsync()
    monkeypatch.setattr(segment_module.os, "fsync", held)

    async def scenario() -> None:
        flusher = LogFlusher()
        log = _small_segments(tmp_path, flusher)
        for _ in range(3):  # one record each, the third past segment.bytes: a roll at 2
            log.append_as_leader(batch(1, value_size=400), 0)
        assert [s.base_offset for s in log.segments] == [0, 2]
        # A follower truncating into the segment that just rolled makes it the active
        # one again; what it appends there next is not on disk.
        log.truncate_to(1)
        log.append_as_leader(batch(2), 0)
        held.release.set()
        await flusher.drain()
        assert [s.base_offset for s in log.segments] == [0]
        assert log.log_end_offset == 3
        assert log.recovery_point == 0
        flusher.close()

    asyncio.run(scenario())


def test_periodic_checkpoints_are_written_on_the_worker(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    log = manager.get_or_create("t", 0, topic_config())
    log.append_as_leader(batch(2), 0)
    log.flush()
    writers: list[str] = []

    def checkpoint() -> None:
        writers.append(threading.current_thread().name)
        manager.periodic_checkpoint({("t", 0): 2})()

    async def scenario() -> None:
        flusher = LogFlusher()
        await flusher.write(checkpoint)
        flusher.close()

    asyncio.run(scenario())
    assert writers == ["log-flusher_0"]
    assert read_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {("t", 0): 2}
    assert read_checkpoint(tmp_path / "replication-offset-checkpoint") == {("t", 0): 2}


def test_an_unchanged_periodic_checkpoint_is_not_written_again(tmp_path: Path) -> None:
    """An idle broker with thousands of logs does not format and fsync the same two
    files every five seconds."""
    manager = LogManager(tmp_path)
    log = manager.get_or_create("t", 0, topic_config())
    log.append_as_leader(batch(2), 0)
    log.flush()
    first = manager.periodic_checkpoint({("t", 0): 2})
    assert first is not None
    assert manager.periodic_checkpoint({("t", 0): 2}) is not None  # not yet written
    first()
    assert manager.periodic_checkpoint({("t", 0): 2}) is None
    moved = manager.periodic_checkpoint({("t", 0): 1})
    assert moved is not None
    moved()
    assert read_checkpoint(tmp_path / "replication-offset-checkpoint") == {("t", 0): 1}
    log.append_as_leader(batch(1), 0)
    log.flush()
    assert manager.periodic_checkpoint({("t", 0): 1}) is not None  # its recovery point moved
    manager.checkpoint({("t", 0): 1})  # a shutdown's is written whatever it holds
    assert read_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {("t", 0): 3}


def test_flush_ms_looks_only_at_logs_holding_records_it_must_fsync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The periodic flush.ms check visits the logs with such records, not every log."""
    visited: list[str] = []
    real = Log.maybe_flush_on_time

    def visit(log: Log, now_ms: int) -> bool:
        visited.append(log.topic)
        return real(log, now_ms)

    monkeypatch.setattr(Log, "maybe_flush_on_time", visit)
    manager = LogManager(tmp_path)
    timed = manager.get_or_create("timed", 0, topic_config(flush_ms=0))
    manager.get_or_create("timed-empty", 0, topic_config(flush_ms=0))
    untimed = manager.get_or_create("untimed", 0, topic_config())
    for n in range(100):
        manager.get_or_create(f"idle-{n}", 0, topic_config())
    timed.append_as_leader(batch(2), 0)
    untimed.append_as_leader(batch(2), 0)
    manager.flush_due(2**62)
    assert visited == ["timed"]
    assert timed.active_segment.unflushed_messages == 0
    assert timed.recovery_point == 2
    visited.clear()
    manager.flush_due(2**62)
    assert visited == []  # flushed: nothing left to look at
    # flush.ms set on a log already holding records: it is looked at from then on.
    untimed.config_changed(topic_config(flush_ms=0))
    manager.flush_due(2**62)
    assert visited == ["untimed"]
    assert untimed.recovery_point == 2


def test_flush_messages_fsyncs_the_active_segment_on_the_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = HeldFsync()
    monkeypatch.setattr(segment_module.os, "fsync", held)

    async def scenario() -> None:
        flusher = LogFlusher()
        manager = LogManager(tmp_path)
        manager.active_segment_flusher = flusher.segment_due
        log = manager.get_or_create("t", 0, topic_config(flush_messages=2))
        log.append_as_leader(batch(2), 0)
        due = log.pending_flush
        assert due is not None
        log.append_as_leader(batch(1), 0)  # appended and counted while the fsync is held
        await asyncio.sleep(0.05)
        assert not due.done()
        assert log.active_segment.unflushed_messages == 1
        held.release.set()
        await due
        segment_fsyncs = [thread for thread, fd in held.calls if fd == log.active_segment.fd]
        assert segment_fsyncs == ["log-flusher_0"]
        assert log.active_segment.unflushed_messages == 1
        flusher.close()

    asyncio.run(scenario())


def test_a_moved_log_start_is_written_on_the_worker_and_waited_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = HeldFsync()
    monkeypatch.setattr(checkpoint_module.os, "fsync", held)

    async def scenario() -> None:
        flusher = LogFlusher()
        manager = LogManager(tmp_path)
        manager.checkpoint_writer = flusher.write
        log = manager.get_or_create("t", 0, topic_config())
        busy = threading.Event()
        flusher.write(lambda: busy.wait(10))  # the worker, held
        # Its new epoch's checkpoint: on the worker too (without an fsync of its own).
        log.append_as_leader(batch(5), 0)
        epochs = log.leader_epoch_cache.path
        await asyncio.sleep(0.05)
        assert not epochs.exists()
        busy.set()
        held.release.set()
        await flusher.drain()
        assert epochs.read_text() == "0\n1\n0 0\n"
        assert held.calls == []
        held.release.clear()
        held.calls.clear()
        assert log.advance_log_start_offset(3)
        written = asyncio.ensure_future(manager.log_starts_written())
        await asyncio.sleep(0.05)
        assert not written.done()
        assert read_checkpoint(tmp_path / LOG_START_FILE) == {}
        assert epochs.read_text() == "0\n1\n0 0\n"
        held.release.set()
        await written
        assert read_checkpoint(tmp_path / LOG_START_FILE) == {("t", 0): 3}
        assert epochs.read_text() == "0\n1\n0 3\n"
        # Both files, the leader epochs' first, on the worker.
        assert [thread for thread, _ in held.calls] == ["log-flusher_0"] * 2
        flusher.close()

    asyncio.run(scenario())


def test_answers_wait_for_their_fsyncs_and_the_broker_serves_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A produce into a flush.messages=1 topic is acknowledged only once its fsync is
    done, a DeleteRecords only once the new log start is on disk; both fsyncs run on the
    flusher's thread, and the event loop answers other requests while they are held."""
    held = HeldFsync()

    async def scenario() -> None:
        async with in_process_broker(tmp_path / "data") as broker:
            try:
                bootstrap = bootstrap_of(broker)
                admin = AdminClient({"bootstrap.servers": bootstrap})
                await asyncio.to_thread(lambda: admin.create_topics([NewTopic(
                    "durable", 1, 1, config={"flush.messages": "1"})])["durable"].result(30))
                monkeypatch.setattr(segment_module.os, "fsync", held)
                producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
                producer.produce("durable", b"kept")
                acknowledged = asyncio.ensure_future(asyncio.to_thread(producer.flush, 30))
                while not held.calls:
                    await asyncio.sleep(0.01)
                # Held: the loop still answers others, the producer still waits.
                bystander = AdminClient({"bootstrap.servers": bootstrap})
                await asyncio.to_thread(bystander.list_topics, timeout=30)
                assert not acknowledged.done()
                held.release.set()
                assert await acknowledged == 0
                assert {thread for thread, _ in held.calls} == {"log-flusher_0"}

                held.release.clear()
                held.calls.clear()
                tp = TopicPartition("durable", 0, 1)
                deleted = asyncio.ensure_future(asyncio.to_thread(
                    lambda: admin.delete_records([tp])[tp].result(30)))
                while not held.calls:
                    await asyncio.sleep(0.01)
                await asyncio.to_thread(bystander.list_topics, timeout=30)
                assert not deleted.done()
                held.release.set()
                assert (await deleted).low_watermark == 1
                assert read_checkpoint(broker.config.log_dir / LOG_START_FILE)[("durable", 0)] == 1
            finally:
                held.release.set()  # a failed assertion must not leave the broker's stop waiting

    asyncio.run(scenario())


def test_a_follower_fetches_again_only_once_its_flush_is_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """flush.messages=1 at acks=all: the follower's fsync runs on its flusher's thread,
    and its next fetch, which moves the leader's high watermark and so answers the
    producer, waits for it."""
    held = HeldFsync()

    async def scenario() -> None:
        async with leading_broker(tmp_path) as (broker, topic):
            flusher = LogFlusher()
            logs = LogManager(tmp_path / "follower")
            logs.active_segment_flusher = flusher.segment_due
            follower = ReplicaManager(
                BrokerConfig.from_mapping({"broker.id": "2",
                                           "log.dirs": str(tmp_path / "follower")}),
                logs, broker_address=lambda b: broker.bound_address if b == 1 else None)
            durable = dataclasses.replace(topic, configs={"flush.messages": "1"})
            follower.apply_partition_state(durable, 0, state(1, 1, (1, 2), (1, 2), 1))
            leader, copy = broker.replica_manager.get("t", 0), follower.get("t", 0)
            assert leader is not None and copy is not None
            monkeypatch.setattr(segment_module.os, "fsync", held)
            try:
                host, port = broker.bound_address
                producer = Producer({"bootstrap.servers": f"{host}:{port}", "acks": "all"})
                producer.produce("t", b"kept", partition=0)
                acknowledged = asyncio.ensure_future(asyncio.to_thread(producer.flush, 30))
                await until(lambda: copy.log_end_offset == 1 and bool(held.calls))
                await asyncio.sleep(0.2)  # fetches the follower would send meanwhile
                assert leader.high_watermark == 0 and not acknowledged.done()
                held.release.set()
                assert await acknowledged == 0
                assert leader.high_watermark == 1
            finally:
                held.release.set()
                await follower.stop()
                flusher.close()

    asyncio.run(scenario())
