"""End-to-end latency: time from a record's send to its arrival at a consumer, at a fixed rate.

The rate is half of the system's own measured produce maximum (100 B records,
one partition), i.e. every system is measured at the same relative load, but at
most ``RATE_CAP``: the sender stamps every record in Python, and beyond that it
would queue records itself and measure its own backlog. The rate achieved is
reported beside the one offered. The
consumer runs in a child process so that producer and consumer do not share a
GIL; both read CLOCK_MONOTONIC, which all processes of the machine share. Both
run with Python's garbage collector paused, as the throughput loops do. Every
record carries a sequence number: the consumer must see each exactly once and
in order. The first second of records is discarded as warm-up (connections,
first fetches).
"""

from __future__ import annotations

import array
import multiprocessing
import os
import time
import uuid
from typing import Any

from bench.clients import LatencyConsumer, StreamClient
from bench.cpu import Stopwatch, collector_paused
from bench.peers import Peer
from bench.records import PROBE_BYTES, VerificationError
from bench.results import Latency, percentile

SIZE = 100
RATE_CAP = 50_000.0
_WARMUP_S = 1.0
_TIMEOUT_S = 60.0


def measure_latency(peer: Peer, client: StreamClient, rate: float, seconds: float) -> Latency:
    topic = f"latency-{uuid.uuid4().hex[:8]}"
    count = max(int(rate * seconds), 100)
    filler = os.urandom(SIZE - PROBE_BYTES)
    client.create(topic, 1)
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    ready = context.Event()
    consumer = context.Process(target=_without_collector,
                               args=(client.latency_consumer, client.address, topic, count,
                                     ready, sender), daemon=True)
    consumer.start()
    try:
        if not ready.wait(_TIMEOUT_S):
            raise RuntimeError(f"{peer.name}: latency consumer did not start")
        watch = Stopwatch(peer.server_pids, lambda: [os.getpid(), consumer.pid or 0])
        watch.start()
        sending = time.perf_counter()
        with collector_paused():
            sent = client.produce_at_rate(topic, filler, rate, count)
        achieved = count / (time.perf_counter() - sending)
        if not receiver.poll(_TIMEOUT_S):
            raise VerificationError(f"{peer.name}: latency consumer did not finish")
        window = watch.stop()
        raw, tally = receiver.recv()
        consumer.join(_TIMEOUT_S)
    finally:
        if consumer.is_alive():
            consumer.kill()
            consumer.join()
    tally.verify([sent], f"{peer.name} latency run")
    latencies = array.array("q")
    latencies.frombytes(raw)
    warmup = min(int(rate * _WARMUP_S), len(latencies) // 4)
    measured = sorted(latencies[warmup:])
    client.delete(topic, 1)

    def ms(fraction: float) -> float:
        return percentile(measured, fraction) / 1e6

    return Latency(peer.name, rate, achieved, SIZE, len(measured), ms(0.50), ms(0.99), ms(0.999),
                   measured[-1] / 1e6, window.client_cores, window.server_cores)


def _without_collector(consumer: LatencyConsumer, *args: Any) -> None:
    """The latency consumer's process: its loop, with the garbage collector paused."""
    with collector_paused():
        consumer(*args)
