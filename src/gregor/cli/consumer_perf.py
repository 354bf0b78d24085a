"""``gregor perf consume``: read N records from the start of a topic as fast as possible.

Fetch figures come from librdkafka's statistics (requests sent and bytes received per
broker), so they describe the wire traffic the broker served, not the Python loop.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from gregor.cli.client_config import client_config
from gregor.cli.cluster_metadata import topic_metadata
from gregor.cli.consume_cmd import ASSIGN_ONLY_CONSUMER, ConsumerErrors
from gregor.cli.errors import CliError
from gregor.cli.producer_perf import MB
from gregor.cli.progress import Progress

_STATS_INTERVAL_MS = 500
# librdkafka pauses fetching for fetch.queue.backoff.ms (default 1 s) once its local
# queue holds queued.min.messages (default 100k): small records then stall the
# consumer at a fraction of what client and broker can do.
PERF_CONSUMER_DEFAULTS = {
    **ASSIGN_ONLY_CONSUMER,
    "fetch.queue.backoff.ms": 10,
    "queued.min.messages": 1_000_000,
    "statistics.interval.ms": _STATS_INTERVAL_MS,
}
_BATCH = 10_000
_POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class ConsumeResult:
    records: int
    value_bytes: int
    elapsed_s: float
    first_record_s: float
    cpu_s: float


class FetchStats:
    """librdkafka ``stats_cb``: totals of Fetch requests and bytes received from brokers."""

    def __init__(self) -> None:
        self.fetch_requests = 0
        self.received_bytes = 0
        self.updated = 0.0

    def __call__(self, stats_json: str) -> None:
        brokers = json.loads(stats_json).get("brokers", {}).values()
        real = [broker for broker in brokers if broker.get("nodeid", -1) >= 0]
        self.fetch_requests = sum(broker.get("req", {}).get("Fetch", 0) for broker in real)
        self.received_bytes = sum(broker.get("rxbytes", 0) for broker in real)
        self.updated = time.monotonic()


def run(args: argparse.Namespace) -> int:
    if args.messages <= 0:
        raise CliError("--messages must be positive")
    stats = FetchStats()
    config, watch = client_config(args, {**PERF_CONSUMER_DEFAULTS, "stats_cb": stats})
    consumer = Consumer(config)
    try:
        topic = topic_metadata(consumer, watch, args.topic)
        consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING)
                         for p in sorted(topic.partitions)])
        result = _consume(consumer, args)
        consumer.unassign()
        _await_stats(consumer, stats, after=time.monotonic())
    finally:
        consumer.close()
    count, elapsed = result.records, result.elapsed_s
    print(f"{count} records received, {count / elapsed:.1f} records/sec "
          f"({result.value_bytes / MB / elapsed:.2f} MB/sec), "
          f"{result.value_bytes / MB:.2f} MB in {elapsed:.2f} s, "
          f"first record after {result.first_record_s * 1000:.0f} ms.")
    requests = max(stats.fetch_requests, 1)
    print(f"{stats.fetch_requests} fetch requests, {stats.received_bytes / MB:.2f} MB received, "
          f"{stats.received_bytes / requests / 1024:.1f} KiB and {count / requests:.0f} records "
          f"per fetch.")
    print(f"client CPU {result.cpu_s:.2f} s ({result.cpu_s / elapsed:.0%} of one core)")
    if count < args.messages:
        raise CliError(f"only {count} of {args.messages} records arrived "
                       f"(no new record for {args.timeout:g} s)")
    return 0


def _consume(consumer: Consumer, args: argparse.Namespace) -> ConsumeResult:
    """Count records and value bytes until N arrived or the topic went quiet."""
    errors = ConsumerErrors(args.topic)
    progress = Progress(args.reporting_interval)
    count = size = 0
    cpu_start, start = time.process_time(), time.monotonic()
    first_record = last_record = window_start = start
    window_count = 0
    while count < args.messages:
        messages = consumer.consume(min(_BATCH, args.messages - count), _POLL_S)
        now = time.monotonic()
        if messages:
            for message in list(messages):
                error = message.error()
                if error is not None:
                    errors.handle(error)
                    messages.remove(message)
            if count == 0 and messages:
                first_record = now
            count += len(messages)
            window_count += len(messages)
            size += sum(map(len, messages))
            last_record = now
        elif now - last_record >= args.timeout:
            break
        if progress.due():
            progress.report(f"{count} records received, "
                            f"{window_count / (now - window_start):.1f} records/sec")
            window_start, window_count = now, 0
    end = time.monotonic()
    elapsed = (last_record if count < args.messages else end) - start
    return ConsumeResult(count, size, max(elapsed, 1e-9), first_record - start,
                         time.process_time() - cpu_start)


def _await_stats(consumer: Consumer, stats: FetchStats, after: float) -> None:
    """Serve callbacks until a statistics report newer than ``after`` arrived (or ~2 intervals)."""
    deadline = after + 2.5 * _STATS_INTERVAL_MS / 1000
    while stats.updated < after and time.monotonic() < deadline:
        consumer.poll(0.05)
