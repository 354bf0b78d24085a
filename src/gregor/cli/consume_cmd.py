"""``gregor consume``: print a topic's records, like kafka-console-consumer.

Partitions are assigned directly rather than through a consumer group: reading a
topic for inspection must not disturb (or depend on) any group's committed offsets.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Iterator
from types import FrameType, TracebackType

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    TopicPartition,
)

from gregor.cli.client_config import add_client_arguments, client_config
from gregor.cli.cluster_metadata import require_partition, topic_metadata
from gregor.cli.errors import CliError
from gregor.cli.output_formats import FORMATS, Formatter, TextFields, formatter
from gregor.cli.progress import Progress

# librdkafka needs a group.id to build a consumer even when partitions are assigned
# directly; nothing joins this group and nothing is committed to it.
ASSIGN_ONLY_CONSUMER = {
    "group.id": "gregor-cli",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
}
_BATCH = 500
_POLL_S = 0.5
_PROGRESS_INTERVAL_S = 5.0
_WATERMARK_TIMEOUT_S = 10.0
_MISSING = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                      KafkaError._UNKNOWN_PARTITION})


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    consume = subparsers.add_parser("consume", help="print the records of a topic")
    consume.add_argument("topic")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the log start offset (same as --offset earliest)")
    start.add_argument("--offset", "-o", metavar="N|-N|earliest|latest",
                       help="where to start: an offset (needs --partition), N records before "
                            "the end of each partition, earliest or latest (default)")
    consume.add_argument("--partition", "-p", type=int, help="read only this partition")
    consume.add_argument("--max-messages", "-n", type=int, metavar="N",
                         help="exit after N records")
    consume.add_argument("--timeout", type=float, metavar="S",
                         help="exit after S seconds without a new record (default: wait forever)")
    consume.add_argument("--format", choices=FORMATS, default="text",
                         help="text (value, plus the --print-* fields), json (one object per "
                              "record, all fields), kv (logfmt, all fields), raw (value bytes "
                              "as they are)")
    for field in ("key", "headers", "offset", "partition", "timestamp"):
        consume.add_argument(f"--print-{field}", action="store_true",
                             help=f"text format: print the {field} before the value")
    consume.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"),
                         default="read_uncommitted",
                         help="read_committed: only records of committed transactions, up to "
                              "the last stable offset (default: read_uncommitted, every "
                              "record, as kafka-console-consumer)")
    consume.add_argument("--quiet", "-q", action="store_true",
                         help="no progress or summary on stderr")
    add_client_arguments(consume)
    consume.set_defaults(run=run)


def _start_offsets(consumer: Consumer, args: argparse.Namespace,
                   partitions: list[int]) -> list[TopicPartition]:
    """Translate --from-beginning/--offset into one start offset per partition."""
    spec = "earliest" if args.from_beginning else (args.offset or "latest")
    if spec in ("earliest", "beginning"):
        return [TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions]
    if spec in ("latest", "end"):
        return [TopicPartition(args.topic, p, OFFSET_END) for p in partitions]
    try:
        offset = int(spec)
    except ValueError:
        raise CliError(f"--offset expects a number, earliest or latest, got {spec!r}") from None
    if offset >= 0 and args.partition is None:
        raise CliError("--offset N needs --partition (offsets are per partition); "
                       "use --offset -N for the last N records of every partition")
    assigned = []
    for partition in partitions:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(args.topic, partition), timeout=_WATERMARK_TIMEOUT_S)
        if offset < 0:
            start = max(low, high + offset)
        elif low <= offset <= high:
            start = offset
        else:
            raise CliError(f"offset {offset} is out of range for partition {partition} of "
                           f"{args.topic!r} (log start offset {low}, log end offset {high})")
        assigned.append(TopicPartition(args.topic, partition, start))
    return assigned


class ConsumerErrors:
    """Consumer error events: give up on the ones that will not heal, mention the rest once."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._last_warning: str | None = None

    def handle(self, error: KafkaError) -> None:
        if error.code() in _MISSING:
            raise CliError(f"unknown topic or partition: {self.topic!r} ({error.str()})")
        if error.fatal():
            raise CliError(error.str())
        if error.str() != self._last_warning:
            print(f"gregor: warning: {error.str()}", file=sys.stderr, flush=True)
            self._last_warning = error.str()


def run(args: argparse.Namespace) -> int:
    text_fields = TextFields(timestamp=args.print_timestamp, partition=args.print_partition,
                             offset=args.print_offset, headers=args.print_headers,
                             key=args.print_key)
    render = formatter(args.format, text_fields)
    config, watch = client_config(args, {**ASSIGN_ONLY_CONSUMER,
                                         "isolation.level": args.isolation_level})
    consumer = Consumer(config)
    try:
        topic = topic_metadata(consumer, watch, args.topic)
        if args.partition is not None:
            require_partition(topic, args.partition)
            partitions = [args.partition]
        else:
            partitions = sorted(topic.partitions)
        consumer.assign(_start_offsets(consumer, args, partitions))
        count, interrupted = _print_records(consumer, args, render)
    finally:
        consumer.close()
    if not args.quiet:
        print(f"Processed a total of {count} messages", file=sys.stderr)
    # Like any command a shell user stops: 130 tells scripts it did not end by itself.
    return 130 if interrupted else 0


class _WholeBatches:
    """Ctrl-C while records are printed takes effect once the batch is printed and
    counted; while waiting for records, at once.

    Raised anywhere, the KeyboardInterrupt could fall between a record's write and its
    count: with unbuffered output (``python -u``, PYTHONUNBUFFERED) the record is on
    the terminal and "Processed a total of N messages" leaves it out. A SIGINT that
    the shell set to be ignored stays ignored.
    """

    def __init__(self) -> None:
        self._printing = False
        self._pending = False
        self._previous: object = None

    def __enter__(self) -> _WholeBatches:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if not self._printing:
            raise KeyboardInterrupt
        self._pending = True

    @contextlib.contextmanager
    def printing(self) -> Iterator[None]:
        """One batch being printed and counted."""
        self._printing = True
        try:
            yield
        finally:
            self._printing = False
        if self._pending:
            raise KeyboardInterrupt


def _print_records(consumer: Consumer, args: argparse.Namespace, render: Formatter
                   ) -> tuple[int, bool]:
    """Print records until --max-messages, --timeout of silence, or Ctrl-C; return the
    count and whether Ctrl-C ended it.

    Ctrl-C is how a consumer that follows a topic normally ends: what was read is
    flushed and counted as usual.
    """
    out = sys.stdout.buffer
    errors = ConsumerErrors(args.topic)
    progress = Progress(_PROGRESS_INTERVAL_S, enabled=not args.quiet and not out.isatty())
    count = 0
    last_record = time.monotonic()
    try:
        with _WholeBatches() as interrupts:
            while args.max_messages is None or count < args.max_messages:
                wanted = _BATCH if args.max_messages is None else min(
                    _BATCH, args.max_messages - count)
                wait_s = _POLL_S
                if args.timeout is not None:
                    wait_s = min(wait_s,
                                 max(last_record + args.timeout - time.monotonic(), 0.0))
                batch_start = count
                batch = consumer.consume(wanted, wait_s)
                with interrupts.printing():
                    for message in batch:
                        error = message.error()
                        if error is not None:
                            errors.handle(error)
                            continue
                        out.write(render(message))
                        count += 1
                    if count > batch_start:
                        out.flush()
                        last_record = time.monotonic()
                if (count == batch_start and args.timeout is not None
                        and time.monotonic() - last_record >= args.timeout):
                    break
                if progress.due():
                    progress.report(f"{count} records consumed ...")
    except KeyboardInterrupt:
        out.flush()
        return count, True
    return count, False
