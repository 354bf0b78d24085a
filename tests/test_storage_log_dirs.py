"""The LogManager over several log directories, on real files: a move between
directories interrupted by a stop carries on, one interrupted mid-swap by a crash
leaves the caught-up copy as the partition's log (never two, never none), and a move
follows what happens to the log it copies."""

from __future__ import annotations

import asyncio
from pathlib import Path

from storage_helpers import batch, read_all, topic_config

from gregor.cluster.log_dir_moves import LogDirMoves
from gregor.cluster.partition import Partition
from gregor.cluster.partition_state import PartitionState
from gregor.cluster.replication_quota import ReplicationQuota
from gregor.protocol.record_batch import patch_offsets
from gregor.storage.log_manager import DELETE_SUFFIX, LogManager, marked_dir_name

CONFIG = topic_config()


def _dirs(tmp_path: Path) -> list[Path]:
    return [(tmp_path / "a").resolve(), (tmp_path / "b").resolve()]


def _values(manager: LogManager) -> list[bytes | None]:
    return [r.value for r in read_all(manager.logs[("t", 0)])]


def test_a_move_a_stop_interrupted_is_found_again(tmp_path: Path) -> None:
    dirs = _dirs(tmp_path)
    manager = LogManager(dirs)
    log = manager.get_or_create("t", 0, CONFIG)
    assert manager.dir_of(log) == dirs[0]
    for i in range(5):
        log.append_as_leader(batch(3, tag=f"b{i}"), 0)
    future = manager.create_future(("t", 0), dirs[1])
    future.append_as_follower(log.read(0, 1 << 20).read())
    manager.shutdown({("t", 0): log.log_end_offset})
    restarted = LogManager(dirs)
    restarted.load_logs(lambda topic: CONFIG)
    assert restarted.dir_of(restarted.logs[("t", 0)]) == dirs[0]
    assert restarted.dir_of(restarted.futures[("t", 0)]) == dirs[1]
    assert restarted.futures[("t", 0)].log_end_offset == log.log_end_offset


def test_a_crash_mid_swap_leaves_the_caught_up_copy(tmp_path: Path) -> None:
    """The swap renames the current log ``-delete`` first, then the future into place:
    a crash in between finds only the future, which had caught up, and promotes it."""
    dirs = _dirs(tmp_path)
    manager = LogManager(dirs)
    log = manager.get_or_create("t", 0, CONFIG)
    for i in range(4):
        log.append_as_leader(batch(2, tag=f"b{i}"), 0)
    future = manager.create_future(("t", 0), dirs[1])
    future.append_as_follower(log.read(0, 1 << 20).read())
    expected = _values(manager)
    future.close()
    log.close()
    log.directory.rename(log.directory.with_name(marked_dir_name(("t", 0), DELETE_SUFFIX)))
    restarted = LogManager(dirs)
    restarted.load_logs(lambda topic: CONFIG)
    assert restarted.dir_of(restarted.logs[("t", 0)]) == dirs[1]
    assert not restarted.futures
    assert _values(restarted) == expected
    assert [p.name for p in dirs[0].iterdir() if p.is_dir()] == []
    assert [p.name for p in dirs[1].iterdir() if p.is_dir()] == ["t-0"]


def test_replacing_the_current_log_keeps_every_record_and_epoch(tmp_path: Path) -> None:
    dirs = _dirs(tmp_path)
    manager = LogManager(dirs)
    log = manager.get_or_create("t", 0, CONFIG)
    log.append_as_leader(batch(2, tag="a"), 0)
    log.append_as_leader(batch(2, tag="b"), 3)
    log.leader_epoch_cache.assign(5, log.log_end_offset)  # a leader that wrote nothing yet
    future = manager.create_future(("t", 0), dirs[1])
    future.append_as_follower(log.read(0, 1 << 20).read())
    expected = _values(manager)
    moved = manager.replace_current_with_future(("t", 0))
    assert manager.logs[("t", 0)] is moved and manager.dir_of(moved) == dirs[1]
    assert _values(manager) == expected
    assert moved.leader_epoch_cache.epochs == [0, 3, 5]
    assert not (dirs[0] / "t-0").exists()


def test_a_move_follows_a_truncation_of_the_current_log(tmp_path: Path) -> None:
    """A follower's log truncated (it diverged from its leader) while being copied: the
    copy drops what the log dropped, so the swapped-in log holds the new records, not
    the old ones past the truncation."""
    dirs = _dirs(tmp_path)
    manager = LogManager(dirs)
    log = manager.get_or_create("t", 0, CONFIG)
    for i in range(6):
        log.append_as_follower(_at(batch(2, tag=f"old{i}"), 2 * i, 1))
    partition = Partition("t", 0, log, 2, PartitionState(1, 1, (1, 2), (1, 2)))
    future = manager.create_future(("t", 0), dirs[1])
    future.append_as_follower(log.read(0, 1 << 20).read())  # copied up to the end
    log.truncate_to(4)
    for i in range(4):
        log.append_as_follower(_at(batch(2, tag=f"new{i}"), 4 + 2 * i, 2))
    expected = _values(manager)

    async def move() -> None:
        moves = LogDirMoves(manager, {("t", 0): partition}.get, ReplicationQuota())
        moves.resume()
        while manager.futures:
            await asyncio.sleep(0.01)
        await moves.stop()

    asyncio.run(move())
    assert manager.dir_of(partition.log) == dirs[1]
    assert _values(manager) == expected
    assert [v for v in expected if v is not None and v.startswith(b"old")] == [
        b"old0-0", b"old0-1", b"old1-0", b"old1-1"]


def _at(data: bytes, base_offset: int, epoch: int) -> bytes:
    """A producer's batch as a leader stored it: its base offset and leader epoch set."""
    stamped = bytearray(data)
    patch_offsets(stamped, 0, base_offset, epoch)
    return bytes(stamped)
