"""Retention and log start offsets at the Log and LogManager level: whole segments
deleted oldest first by time and by size, DeleteRecords, and log start offsets that
survive clean and unclean restarts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from storage_helpers import BASE_TS, batch, open_log, read_all, topic_config

from gregor.storage.log import Log, OffsetOutOfRange
from gregor.storage.log_manager import LogManager

SEGMENTS = {"segment_bytes": 1200, "index_interval_bytes": 100}
HOUR = 3600_000
DAY = 24 * HOUR


def fill_hours(log: Log, hours: int, per_hour: int = 6) -> None:
    """Batches stamped one per 10 minutes from BASE_TS, ``hours`` hours of them."""
    for i in range(hours * per_hour):
        log.append_as_leader(batch(2, tag=f"h{i}", value_size=40,
                                   timestamp=BASE_TS + i * HOUR // per_hour), 0)


def test_retention_ms_deletes_segments_by_their_largest_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(retention_ms=HOUR, **SEGMENTS))
    fill_hours(log, 5)
    assert len(log.segments) > 4
    now = BASE_TS + 5 * HOUR
    expected_kept = [s for s in log.segments if now - s.max_timestamp <= HOUR]
    deleted = log.delete_expired_segments(now)
    assert deleted > 0
    assert log.segments == expected_kept
    assert log.log_start_offset == expected_kept[0].base_offset
    # A segment whose max timestamp is recent is kept whole, older records and all.
    assert min(r.timestamp for r in read_all(log)) < now - HOUR
    with pytest.raises(OffsetOutOfRange):
        log.read(log.log_start_offset - 1, 1000)
    assert log.delete_expired_segments(now) == 0


def test_when_every_segment_expired_the_log_keeps_its_end(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(retention_ms=HOUR, **SEGMENTS))
    fill_hours(log, 3)
    end = log.log_end_offset
    log.delete_expired_segments(BASE_TS + 10 * HOUR)
    assert len(log.segments) == 1 and log.active_segment.size == 0
    assert log.log_start_offset == log.log_end_offset == end
    assert log.read(end, 1000) is None
    assert log.append_as_leader(batch(1), 0).first_offset == end


def test_retention_bytes_deletes_oldest_segments_beyond_the_limit(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(retention_bytes=3000, **SEGMENTS))
    fill_hours(log, 6)
    assert log.size > 3000 + 2 * log.segments[0].size
    assert log.delete_expired_segments(BASE_TS) >= 2
    # As in Kafka, a segment goes only if the log stays at or above the limit without
    # it: deleting one more would take it below.
    assert log.size - log.segments[0].size < 3000 <= log.size
    assert [r.offset for r in read_all(log)] == list(range(log.log_start_offset,
                                                           log.log_end_offset))


def test_segments_without_timestamps_age_by_file_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(retention_ms=HOUR, **SEGMENTS))
    for _ in range(30):
        log.append_as_leader(batch(2, timestamp=-1, value_size=40), 0)
    old = log.segments[0]
    assert old.max_timestamp == -1
    mtime = os.stat(old.log_path).st_mtime
    os.utime(old.log_path, (mtime - 2 * 3600, mtime - 2 * 3600))
    assert log.delete_expired_segments(int(mtime * 1000)) == 1
    assert log.segments[0] is not old


def test_compacted_topics_are_not_deleted_by_retention(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(retention_ms=HOUR, cleanup_policy="compact",
                                          **SEGMENTS))
    fill_hours(log, 3)
    assert log.delete_expired_segments(BASE_TS + 10 * HOUR) == 0


def test_delete_records_moves_the_log_start_inside_a_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, topic_config(**SEGMENTS))
    fill_hours(log, 3)
    segments = len(log.segments)
    target = log.segments[2].base_offset + 1
    assert log.advance_log_start_offset(target)
    assert log.log_start_offset == target
    assert len(log.segments) == segments - 2
    assert read_all(log)[0].offset == target
    with pytest.raises(OffsetOutOfRange):
        log.read(target - 1, 1000)
    assert not log.advance_log_start_offset(target - 5)
    # Up to the log end: everything goes, the offsets go on.
    end = log.log_end_offset
    assert log.advance_log_start_offset(end)
    assert (log.log_start_offset, log.size, len(log.segments)) == (end, 0, 1)
    assert log.append_as_leader(batch(1), 0).first_offset == end


@pytest.mark.parametrize("shutdown", ["clean", "unclean"])
def test_log_start_offset_survives_a_restart(tmp_path: Path, shutdown: str) -> None:
    config = topic_config(**SEGMENTS)
    manager = LogManager(tmp_path)
    log = manager.get_or_create("t", 0, config)
    fill_hours(log, 2)
    target = log.segments[1].base_offset + 3
    log.advance_log_start_offset(target)
    # DeleteRecords persists at once: a crash right after must not bring records back.
    if shutdown == "clean":
        manager.shutdown({})
    restarted = LogManager(tmp_path)
    assert restarted.had_clean_shutdown == (shutdown == "clean")
    restarted.load_logs(lambda topic: config)
    reopened = restarted.logs[("t", 0)]
    assert reopened.log_start_offset == target
    assert read_all(reopened)[0].offset == target


def test_log_start_after_retention_survives_a_crash(tmp_path: Path) -> None:
    config = topic_config(retention_ms=HOUR, **SEGMENTS)
    manager = LogManager(tmp_path)
    log = manager.get_or_create("t", 0, config)
    fill_hours(log, 4)
    assert manager.apply_retention(BASE_TS + 4 * HOUR, DAY) > 0
    restarted = LogManager(tmp_path)
    restarted.load_logs(lambda topic: config)
    assert restarted.logs[("t", 0)].log_start_offset == log.log_start_offset > 0


def test_idle_producers_expire_with_the_retention_pass(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    log = manager.get_or_create("t", 0, topic_config())
    log.append_as_leader(batch(1, producer_id=3, producer_epoch=0, base_sequence=0,
                               timestamp=BASE_TS), 0)
    log.append_as_leader(batch(1, producer_id=4, producer_epoch=0, base_sequence=0,
                               timestamp=BASE_TS + DAY), 0)
    manager.apply_retention(BASE_TS + DAY + 1, DAY)
    assert set(log.producer_state.producers) == {4}
    # A forgotten producer is a new one: any sequence goes.
    assert log.append_as_leader(batch(1, producer_id=3, producer_epoch=0, base_sequence=9),
                                0).first_offset == 2
