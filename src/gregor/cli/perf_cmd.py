"""``gregor perf produce|consume``: throughput and latency, after kafka-*-perf-test."""

from __future__ import annotations

import argparse

from gregor.cli import consumer_perf, producer_perf
from gregor.cli.client_config import add_client_arguments
from gregor.cli.produce_cmd import ACKS, COMPRESSION_CODECS


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    perf = subparsers.add_parser("perf", help="measure produce and consume throughput")
    kinds = perf.add_subparsers(dest="kind", required=True)

    produce = kinds.add_parser(
        "produce", help="produce N records of B bytes; print records/s, MB/s, latency percentiles",
        description="Tune the producer with -X, e.g. -X linger.ms=20 -X batch.size=1000000.")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--num-records", type=int, required=True, metavar="N")
    produce.add_argument("--record-size", type=int, required=True, metavar="BYTES")
    produce.add_argument("--throughput", type=float, default=-1, metavar="RECORDS_PER_S",
                         help="throttle to this rate; -1 (default) for as fast as possible")
    produce.add_argument("--acks", choices=ACKS, default="all",
                         help="acknowledgements to wait for (default: all)")
    produce.add_argument("--compression", choices=COMPRESSION_CODECS,
                         help="compression codec (default: none)")
    produce.set_defaults(run=producer_perf.run)

    consume = kinds.add_parser(
        "consume", help="read N records from the start of a topic; print records/s, MB/s")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--messages", type=int, required=True, metavar="N")
    consume.add_argument("--timeout", type=float, default=10.0, metavar="S",
                         help="give up after S seconds without a new record (default: 10)")
    consume.set_defaults(run=consumer_perf.run)

    for command in (produce, consume):
        command.add_argument("--reporting-interval", type=float, default=5.0, metavar="S",
                             help="seconds between progress lines on stderr (0: none)")
        add_client_arguments(command)
