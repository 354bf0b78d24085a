"""``gregor perf produce``: the measurement loop of kafka-producer-perf-test on librdkafka.

Latency is librdkafka's own per-record figure (``Message.latency()``: produce() call
to broker acknowledgement), read in the delivery callback, so it includes the time a
record waits in the client's queue exactly as the Java tool's does.
"""

from __future__ import annotations

import argparse
import random
import string
import time
from collections import Counter

from confluent_kafka import KafkaError, Message, Producer

from gregor.cli.client_config import client_config
from gregor.cli.cluster_metadata import topic_metadata
from gregor.cli.errors import CliError
from gregor.cli.produce_cmd import failure_summary, producer_settings
from gregor.cli.progress import Progress

MB = 1024 * 1024
PERCENTILES = (0.5, 0.95, 0.99, 0.999)
# The local queue bounded by bytes, like the Java producer's buffer.memory (32 MiB), and
# not by librdkafka's 100k-message cap, which would throttle small records. The latency
# measured includes the time a record waits in this queue, so its size sets the latency
# figures of an unthrottled run just as buffer.memory does for kafka-producer-perf-test.
PERF_PRODUCER_DEFAULTS = {"queue.buffering.max.messages": 10_000_000,
                          "queue.buffering.max.kbytes": 32 * 1024}
_POLL_EVERY = 1024  # records between poll() calls that serve delivery callbacks


class LatencyRecorder:
    """Delivery callback: collects every acknowledged record's latency, and failures by cause."""

    def __init__(self, record_size: int) -> None:
        self.record_size = record_size
        self.latencies_ms: list[float] = []
        self.failures: Counter[str] = Counter()
        self._window_start = time.monotonic()
        self._window_count = 0
        self._window_latency_ms = 0.0
        self._window_max_ms = 0.0

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.failures[error.str()] += 1
            return
        latency_s = message.latency()
        assert latency_s is not None  # librdkafka times every record it delivers
        latency_ms = latency_s * 1000.0
        self.latencies_ms.append(latency_ms)
        self._window_count += 1
        self._window_latency_ms += latency_ms
        if latency_ms > self._window_max_ms:
            self._window_max_ms = latency_ms

    def window_line(self) -> str:
        """Kafka's progress line for the records acknowledged since the previous one."""
        now = time.monotonic()
        elapsed = max(now - self._window_start, 1e-9)
        count = self._window_count
        line = (f"{count} records sent, {count / elapsed:.1f} records/sec "
                f"({count * self.record_size / MB / elapsed:.2f} MB/sec), "
                f"{self._window_latency_ms / max(count, 1):.1f} ms avg latency, "
                f"{self._window_max_ms:.1f} ms max latency.")
        self._window_start = now
        self._window_count, self._window_latency_ms, self._window_max_ms = 0, 0.0, 0.0
        return line

    def final_line(self, elapsed_s: float) -> str:
        """Kafka's summary line, over all records, with percentiles of the latency."""
        latencies = sorted(self.latencies_ms)
        count = len(latencies)
        average = sum(latencies) / count if count else 0.0
        maximum = latencies[-1] if count else 0.0
        percentiles = ", ".join(f"{percentile(latencies, p):.2f} ms {_ordinal(p)}"
                                for p in PERCENTILES)
        return (f"{count} records sent, {count / elapsed_s:.1f} records/sec "
                f"({count * self.record_size / MB / elapsed_s:.2f} MB/sec), "
                f"{average:.2f} ms avg latency, {maximum:.2f} ms max latency, {percentiles}.")


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile, as kafka-producer-perf-test computes it."""
    if not sorted_values:
        return 0.0
    return sorted_values[min(int(len(sorted_values) * fraction), len(sorted_values) - 1)]


def _ordinal(fraction: float) -> str:
    return f"{fraction * 100:g}th"


class Throttle:
    """kafka-producer-perf-test's throughput throttle: wait while ahead of the target rate."""

    def __init__(self, records_per_s: float) -> None:
        self.records_per_s = records_per_s
        self.start = time.monotonic()

    def wait(self, sent: int, producer: Producer) -> None:
        if self.records_per_s <= 0:
            return
        while (ahead := sent / self.records_per_s - (time.monotonic() - self.start)) > 0.001:
            producer.poll(ahead)  # sleeps, but keeps serving delivery callbacks


def payload(size: int) -> bytes:
    """One random uppercase payload reused for every record, as the Java tool does."""
    return "".join(random.choices(string.ascii_uppercase, k=size)).encode("ascii")


def run(args: argparse.Namespace) -> int:
    if args.num_records <= 0 or args.record_size < 0:
        raise CliError("--num-records must be positive and --record-size not negative")
    recorder = LatencyRecorder(args.record_size)
    config, watch = client_config(
        args, {**PERF_PRODUCER_DEFAULTS, **producer_settings(args), "on_delivery": recorder})
    producer = Producer(config)
    topic_metadata(producer, watch, args.topic)
    value = payload(args.record_size)
    progress = Progress(args.reporting_interval)
    throttle = Throttle(args.throughput)
    cpu_start, start = time.process_time(), time.monotonic()
    produce, topic = producer.produce, args.topic
    # Unthrottled, poll() only every so many records (it costs more than produce());
    # throttled, the loop has time to spare and progress must not wait for 1024 records.
    poll_every = 1 if args.throughput > 0 else _POLL_EVERY
    for sent in range(args.num_records):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                producer.poll(0.001)
        if sent % poll_every == 0:
            producer.poll(0)
            watch.check()
            if progress.due():
                progress.report(recorder.window_line())
        throttle.wait(sent + 1, producer)
    while producer.flush(0.5):  # the records still in flight, 0 once all are acknowledged
        if progress.due():
            progress.report(recorder.window_line())
    elapsed = time.monotonic() - start
    cpu = time.process_time() - cpu_start
    print(recorder.final_line(elapsed))
    print(f"client CPU {cpu:.2f} s ({cpu / elapsed:.0%} of one core)")
    watch.check()
    if recorder.failures:
        raise CliError(f"of {args.num_records} records, {failure_summary(recorder.failures)}")
    return 0
