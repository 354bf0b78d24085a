"""A broker fsyncs rolled segments and writes checkpoints on a worker thread, so the
event loop never waits for the disk; the recovery point passes a segment only once it
is on disk."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest
from storage_helpers import batch, open_log, topic_config

from gregor.broker.log_flusher import LogFlusher
from gregor.storage import segment as segment_module
from gregor.storage.checkpoint_file import read_checkpoint
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager


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
