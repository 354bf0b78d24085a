"""Produce throughput: every record sent, timed from the first send to the last ack.

The load generator runs with Python's garbage collector paused
(:func:`bench.cpu.collector_paused`), as every consumer does.
"""

from __future__ import annotations

from bench.clients import StreamClient
from bench.cpu import Stopwatch, collector_paused
from bench.peers import Peer
from bench.records import RecordSet
from bench.results import Case, Throughput

SIZES = (100, 1024)
PARTITIONS = (1, 8)
ACKS = ("1", "all")
CASES = [Case(size, partitions, acks)
         for size in SIZES for partitions in PARTITIONS for acks in ACKS]


def cases_for(client: StreamClient) -> list[Case]:
    """Systems without a producer acks setting run each size/partition pair once."""
    if client.distinguishes_acks:
        return CASES
    return [case for case in CASES if case.acks == ACKS[0]]


def produce(peer: Peer, client: StreamClient, topic: str, case: Case, records: RecordSet,
            repetition: int) -> Throughput:
    with collector_paused():
        window = client.produce(topic, case.partitions, records, case.acks,
                                Stopwatch(peer.server_pids))
    return Throughput(peer.name, "produce", case, repetition, records.count,
                      records.total_bytes, window.seconds, window.client_cores,
                      window.server_cores)
