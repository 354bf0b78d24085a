"""Consume throughput: the records just produced, read from the start and verified.

Kafka-protocol systems are read twice: by librdkafka (what applications see,
every value checked against the one sent) and by bare Fetch requests (the
broker's fetch path alone, every batch CRC-checked and its records counted),
since a Python consumer materialising each record is slower than a zero-copy
fetch path. Both run with Python's garbage collector paused
(:func:`bench.cpu.collector_paused`).
"""

from __future__ import annotations

from bench.clients import StreamClient
from bench.clients.kafka import KafkaClient
from bench.cpu import Stopwatch, collector_paused
from bench.peers import Peer
from bench.records import RecordSet
from bench.results import Case, Throughput

BARE_FETCH = "fetch"


def consume(peer: Peer, client: StreamClient, topic: str, case: Case, records: RecordSet,
            repetition: int) -> Throughput:
    with collector_paused():
        window = client.consume(topic, case.partitions, records, Stopwatch(peer.server_pids))
    return Throughput(peer.name, "consume", case, repetition, records.count,
                      records.total_bytes, window.seconds, window.client_cores,
                      window.server_cores)


def consume_bare(peer: Peer, client: KafkaClient, topic: str, case: Case, records: RecordSet,
                 repetition: int) -> Throughput:
    with collector_paused():
        window = client.consume_bare(topic, case.partitions, records,
                                     Stopwatch(peer.server_pids))
    return Throughput(peer.name, BARE_FETCH, case, repetition, records.count,
                      records.total_bytes, window.seconds, window.client_cores,
                      window.server_cores)
