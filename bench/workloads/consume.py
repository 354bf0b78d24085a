"""Consume throughput: the records just produced, read from the start and verified."""

from __future__ import annotations

from bench.clients import StreamClient
from bench.cpu import Stopwatch
from bench.peers import Peer
from bench.records import RecordSet
from bench.results import Case, Throughput


def consume(peer: Peer, client: StreamClient, topic: str, case: Case, records: RecordSet,
            repetition: int) -> Throughput:
    window = client.consume(topic, case.partitions, records, Stopwatch(peer.server_pids))
    return Throughput(peer.name, "consume", case, repetition, records.count,
                      records.total_bytes, window.seconds, window.client_cores,
                      window.server_cores)
