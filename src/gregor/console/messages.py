"""The message browser: read a window of a topic, or follow it live, with filters.

Like ``gregor consume``, partitions are assigned directly (no group): looking at a
topic must not disturb any group's offsets. A browse reads each partition from its
start position up to its log end offset as it was when the browse began, so it ends
even while producers keep writing; a follow starts at the log end offsets it looked
up itself, so a record produced after it said "ready" is never missed.

Keys, values and header values travel as base64: they are bytes, and the browser
decides how to show them (text, JSON or hex).
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from gregor.cli.cluster_metadata import ConnectionWatch, require_partition, topic_metadata
from gregor.cli.consume_cmd import ASSIGN_ONLY_CONSUMER
from gregor.cli.errors import CliError, kafka_error_text
from gregor.cli.output_formats import consumed_headers
from gregor.console.admin import CALL_TIMEOUT_S, ClusterAdmin

Start = Literal["beginning", "end", "offset", "timestamp"]
MAX_LIMIT = 1000
# A browse with filters stops after this many records or seconds, whichever comes
# first, and says so: the user can continue from where it stopped.
SCAN_BUDGET_RECORDS = 200_000
SCAN_BUDGET_S = 8.0
# Bytes of a key, value or header shown; larger ones are cut and marked.
SHOWN_BYTES = 64 * 1024
_TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: "CreateTime", TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime"}
_MISSING = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                      KafkaError._UNKNOWN_PARTITION})
_BROWSE_CONSUMER = {**ASSIGN_ONLY_CONSUMER, "enable.partition.eof": True}
_PROBE_S = 0.5


@dataclass(frozen=True, slots=True)
class Filters:
    """Case-insensitive text a record's key, value or one of its headers must contain."""

    key: str = ""
    value: str = ""
    header: str = ""

    def matches(self, message: Message) -> bool:
        if self.key and self.key.casefold() not in _text(message.key()):
            return False
        if self.value and self.value.casefold() not in _text(message.value()):
            return False
        if self.header:
            wanted = self.header.casefold()
            return any(wanted in name.casefold() or wanted in _text(value)
                       for name, value in consumed_headers(message))
        return True

    @property
    def active(self) -> bool:
        return bool(self.key or self.value or self.header)


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", "replace").casefold()


def _bytes(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data[:SHOWN_BYTES]).decode("ascii")


ValueDecoder = Callable[[bytes | None], dict[str, Any]]
"""Fields to add for a value in Confluent's framing (``RegistryView.decoded``)."""


def record(message: Message, values: ValueDecoder | None = None) -> dict[str, Any]:
    kind, timestamp = message.timestamp()
    key, value = message.key(), message.value()
    headers = consumed_headers(message)
    decoded = {} if values is None else values(value)
    return {**decoded, "partition": message.partition(), "offset": message.offset(),
            "timestamp": timestamp if kind in _TIMESTAMP_TYPES else None,
            "timestamp_type": _TIMESTAMP_TYPES.get(kind),
            "key": _bytes(key), "value": _bytes(value),
            "key_size": None if key is None else len(key),
            "value_size": None if value is None else len(value),
            "headers": [[name, _bytes(data)] for name, data in headers],
            "truncated": any(data is not None and len(data) > SHOWN_BYTES
                             for data in (key, value, *(d for _, d in headers)))}


class _Reader:
    """An assign-only consumer on one topic (or one of its partitions)."""

    def __init__(self, admin: ClusterAdmin, topic: str, partition: int | None) -> None:
        self.topic = topic
        config, self.watch = admin.client_config(_BROWSE_CONSUMER)
        self.consumer = Consumer(config)
        try:
            found = topic_metadata(self.consumer, self.watch, topic, timeout=CALL_TIMEOUT_S)
            if partition is not None:
                require_partition(found, partition)
            self.partitions = [partition] if partition is not None else sorted(found.partitions)
            self.watermarks = {p: self._watermarks(p) for p in self.partitions}
        except BaseException:
            self.consumer.close()
            raise

    def _watermarks(self, partition: int) -> tuple[int, int]:
        try:
            return self.consumer.get_watermark_offsets(
                TopicPartition(self.topic, partition), timeout=CALL_TIMEOUT_S)
        except KafkaException as exc:
            raise CliError(f"cannot read the offsets of {self.topic!r} partition {partition}: "
                           f"{kafka_error_text(exc)}") from None

    def check(self, error: KafkaError) -> None:
        """Raise for consumer errors that end a read; others (a broker reconnecting) pass."""
        if error.code() in _MISSING:
            raise CliError(f"unknown topic or partition: {self.topic!r} ({error.str()})")
        if error.fatal():
            raise CliError(error.str())

    def close(self) -> None:
        self.consumer.close()


def _start_offsets(reader: _Reader, start: Start, at: int | Mapping[int, int],
                   limit: int) -> dict[int, int]:
    """Where each partition's read begins, inside [log start, log end]; ``at`` is a
    time, an offset for every partition, or one per partition (a partition left out
    has nothing more to read)."""
    offsets = {}
    if start == "timestamp":
        assert isinstance(at, int), "a time is one for all partitions"
        try:
            found = reader.consumer.offsets_for_times(
                [TopicPartition(reader.topic, p, at) for p in reader.partitions],
                timeout=CALL_TIMEOUT_S)
        except KafkaException as exc:
            raise CliError(f"cannot look up offsets by time in {reader.topic!r}: "
                           f"{kafka_error_text(exc)}") from None
        by_time = {tp.partition: tp.offset for tp in found}
    for partition, (low, high) in reader.watermarks.items():
        if start == "beginning":
            offsets[partition] = low
        elif start == "end":
            offsets[partition] = max(low, high - limit)
        elif start == "offset":
            wanted = at.get(partition, high) if isinstance(at, Mapping) else at
            offsets[partition] = min(max(wanted, low), high)
        else:  # no record at or after that time: nothing to read there
            offset = by_time[partition]
            offsets[partition] = high if offset < 0 else min(max(offset, low), high)
    return offsets


def browse(admin: ClusterAdmin, topic: str, partition: int | None, start: Start,
           at: int | Mapping[int, int], limit: int, filters: Filters,
           values: ValueDecoder | None = None) -> dict[str, Any]:
    """Up to ``limit`` matching records; from the end, the newest ``limit`` of the last
    ``limit`` records of each partition, newest first (as a tail is read), else the first
    ones from the start position, oldest first.

    ``next`` holds each partition's next offset, for a browse that continues there.
    """
    limit = max(1, min(limit, MAX_LIMIT))
    reader = _Reader(admin, topic, partition)
    try:
        positions = _start_offsets(reader, start, at, limit)
        ends = {p: high for p, (_, high) in reader.watermarks.items()}
        pending = {p for p, offset in positions.items() if offset < ends[p]}
        reader.consumer.assign([TopicPartition(topic, p, positions[p]) for p in sorted(pending)])
        matches: list[dict[str, Any]] = []
        scanned = 0
        deadline = time.monotonic() + SCAN_BUDGET_S
        while pending and (start == "end" or len(matches) < limit):
            if scanned >= SCAN_BUDGET_RECORDS or time.monotonic() >= deadline:
                break
            for message in reader.consumer.consume(500, 0.2):
                if start != "end" and len(matches) >= limit:
                    break  # the rest stays unread: ``next`` points at it
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(message.partition())
                    else:
                        reader.check(error)
                    continue
                p = message.partition()
                if p not in pending:
                    continue  # already past its end (or fetched before it was finished)
                offset = message.offset()
                assert offset is not None  # a record (not an error) has one
                positions[p] = offset + 1
                if positions[p] >= ends[p]:
                    pending.discard(p)
                scanned += 1
                if filters.matches(message):
                    matches.append(record(message, values))
            reader.watch.check()
    finally:
        reader.close()
    matches.sort(key=lambda r: (r["timestamp"] or 0, r["partition"], r["offset"]))
    if start == "end":
        matches = matches[-limit:][::-1]
    return {"messages": matches, "scanned": scanned, "complete": not pending,
            "next": {str(p): offset for p, offset in sorted(positions.items())},
            "end": {str(p): offset for p, offset in sorted(ends.items())}}


class Follower:
    """A live tail: records produced after ``open`` returned, as they arrive.

    ``poll`` and ``close`` may come from different threads (a stream's reader and its
    cancellation); a lock keeps them off the consumer at the same time.
    """

    def __init__(self, admin: ClusterAdmin, topic: str, partition: int | None,
                 filters: Filters, values: ValueDecoder | None = None) -> None:
        self.filters = filters
        self.values = values
        self._lock = threading.Lock()
        self._closed = False
        self.down = False  # an outage was reported and no broker has answered since
        self._reader = _Reader(admin, topic, partition)
        self.start = {p: high for p, (_, high) in self._reader.watermarks.items()}
        self._reader.consumer.assign([TopicPartition(topic, p, offset)
                                      for p, offset in self.start.items()])

    @property
    def watch(self) -> ConnectionWatch:
        return self._reader.watch

    def poll(self, timeout: float) -> list[dict[str, Any]]:
        with self._lock:
            if self._closed:
                return []
            found = []
            for message in self._reader.consumer.consume(500, timeout):
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        self._reader.check(error)
                    continue
                if self.filters.matches(message):
                    found.append(record(message, self.values))
            return found

    def outage(self) -> str | None:
        """Why no broker can be reached, once per outage librdkafka reports."""
        if not self.watch.all_brokers_down:
            return None
        self.watch.all_brokers_down = False
        self.down = True
        return str(self.watch.unreachable("no broker answers"))

    def recovered(self) -> bool:
        """After an outage, whether a broker answers again (once): librdkafka reports
        brokers going down, not coming back, so ask for the topic's metadata."""
        if not self.down:
            return False
        with self._lock:
            if self._closed:
                return False
            try:
                self._reader.consumer.list_topics(self._reader.topic, timeout=_PROBE_S)
            except KafkaException:
                return False
        self.down = False
        self.watch.connection_error = None
        return True

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._reader.close()
