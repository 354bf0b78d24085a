"""``gregor produce``: one record per input line, like kafka-console-producer.

Lines are read as bytes so that any payload, UTF-8 or not, reaches the topic
unchanged; only the line terminator (``\\n`` or ``\\r\\n``) is removed.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any, BinaryIO

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from gregor.cli.client_config import add_client_arguments, client_config, parse_assignments
from gregor.cli.cluster_metadata import require_partition, topic_metadata
from gregor.cli.errors import CliError, kafka_error_text
from gregor.cli.progress import Progress

ACKS = ("0", "1", "all", "-1")
COMPRESSION_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
_PROGRESS_INTERVAL_S = 5.0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    produce = subparsers.add_parser(
        "produce", help="produce lines from stdin or a file, one record per line")
    produce.add_argument("topic")
    produce.add_argument("--file", "-f", metavar="FILE", help="read lines from FILE, not stdin")
    produce.add_argument("--key-separator", "-K", metavar="SEP",
                         help="split each line at the first SEP into key and value")
    produce.add_argument("--header", "-H", action="append", default=[], metavar="NAME=VALUE",
                         help="add a header to every record (repeatable)")
    produce.add_argument("--partition", "-p", type=int,
                         help="produce to this partition (default: the key's partition, "
                              "or spread keyless records)")
    produce.add_argument("--acks", choices=ACKS, default="all",
                         help="acknowledgements to wait for (default: all)")
    produce.add_argument("--compression", choices=COMPRESSION_CODECS,
                         help="compression codec (default: none)")
    produce.add_argument("--timestamp", type=int, metavar="MS",
                         help="record timestamp in ms since the epoch (default: now)")
    produce.add_argument("--quiet", "-q", action="store_true",
                         help="no progress or summary on stderr; only errors")
    add_client_arguments(produce)
    produce.set_defaults(run=run)


def producer_settings(args: argparse.Namespace) -> dict[str, str]:
    """The flags shared by ``produce`` and ``perf produce``, as librdkafka properties."""
    settings = {"acks": args.acks}
    if args.compression:
        settings["compression.type"] = args.compression
    return settings


class DeliveryTally:
    """librdkafka delivery callback: counts acknowledged records and groups failures by cause."""

    def __init__(self) -> None:
        self.delivered = 0
        self.failures: Counter[str] = Counter()

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.delivered += 1
        else:
            self.failures[error.str()] += 1

    def summary(self, topic: str) -> str:
        records = "record" if self.delivered == 1 else "records"
        line = f"Produced {self.delivered} {records} to topic {topic}"
        return f"{line}; {failure_summary(self.failures)}" if self.failures else line + "."


def failure_summary(failures: Counter[str]) -> str:
    """``N failed: cause (count); ...``, most frequent cause first."""
    causes = "; ".join(f"{cause} ({count})" for cause, count in failures.most_common())
    return f"{sum(failures.values())} failed: {causes}"


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    for line in stream:
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
        yield line


def _send(producer: Producer, topic: str, value: bytes, extra: dict[str, Any]) -> None:
    """produce(), waiting for room when librdkafka's local queue is full."""
    while True:
        try:
            producer.produce(topic, value, **extra)
            return
        except BufferError:
            producer.poll(0.05)


def run(args: argparse.Namespace) -> int:
    separator = args.key_separator.encode() if args.key_separator else None
    headers = [(name, value.encode()) for name, value in parse_assignments(args.header, "--header")]
    tally = DeliveryTally()
    config, watch = client_config(args, {**producer_settings(args), "on_delivery": tally})
    producer = Producer(config)
    topic = topic_metadata(producer, watch, args.topic)
    if args.partition is not None:
        require_partition(topic, args.partition)
    common: dict[str, Any] = {}
    if headers:
        common["headers"] = headers
    if args.partition is not None:
        common["partition"] = args.partition
    if args.timestamp is not None:
        common["timestamp"] = args.timestamp
    progress = Progress(_PROGRESS_INTERVAL_S, enabled=not args.quiet)
    with open(args.file, "rb") if args.file else sys.stdin.buffer as source:
        for line in _lines(source):
            extra = common
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    tally.failures[f"line without key separator {args.key_separator!r}"] += 1
                    continue
                extra = {**common, "key": key}
                line = value
            try:
                _send(producer, args.topic, line, extra)
            except KafkaException as exc:
                tally.failures[kafka_error_text(exc)] += 1
            producer.poll(0)
            if progress.due():
                progress.report(f"{tally.delivered} records produced ...")
    producer.flush()
    watch.check()
    if tally.failures:
        raise CliError(tally.summary(args.topic))
    if not args.quiet:
        print(tally.summary(args.topic), file=sys.stderr)
    return 0
