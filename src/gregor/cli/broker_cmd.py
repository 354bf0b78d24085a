"""``gregor broker start``: run a broker from Kafka-style properties and flags."""

from __future__ import annotations

import argparse
import asyncio
import logging

from gregor.config import BrokerConfig


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    broker = subparsers.add_parser("broker", help="run a broker")
    actions = broker.add_subparsers(dest="action", required=True)
    start = actions.add_parser(
        "start", help="start a broker in the foreground (Ctrl-C stops it cleanly)")
    start.add_argument("--config", "-c", metavar="FILE",
                       help="server.properties-style file with Kafka property names")
    start.add_argument("--override", "-o", action="append", default=[], metavar="NAME=VALUE",
                       help="set any broker property, e.g. -o num.partitions=3 (repeatable)")
    start.add_argument("--log-dirs", help="data directory (log.dirs)")
    start.add_argument("--listeners", help="e.g. PLAINTEXT://127.0.0.1:9092")
    start.add_argument("--advertised-listeners", help="address clients should use")
    start.add_argument("--node-id", type=int, help="broker id (node.id)")
    start.add_argument("--ready-file", metavar="PATH",
                       help="once the broker serves (logs loaded, listeners accepting, "
                            "registered in its cluster, background tasks running), write "
                            "atomically to PATH the JSON "
                            '{"broker_id", "host", "port", "pid"} of its first listener; '
                            "removed when it stops cleanly. How scripts and tests that start "
                            "it on port 0 learn the port and know it is ready. A listener "
                            "that cannot bind (port in use) ends the broker at once with "
                            "status 1, before it opens its logs")
    start.add_argument("--log-level", default="INFO",
                       choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    start.set_defaults(run=run_start)


def run_start(args: argparse.Namespace) -> int:
    overrides: dict[str, str] = {}
    for item in args.override:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--override expects NAME=VALUE, got {item!r}")
        overrides[name.strip()] = value.strip()
    for flag, name in (("log_dirs", "log.dirs"), ("listeners", "listeners"),
                       ("advertised_listeners", "advertised.listeners"), ("node_id", "node.id")):
        value = getattr(args, flag)
        if value is not None:
            overrides[name] = str(value)
    # Imported here: the broker stack takes ~0.5 s to import, which every client
    # command (gregor topics, produce, consume, ...) would otherwise pay at start.
    from gregor.broker.broker import run_broker

    config = BrokerConfig.load(args.config, overrides)
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run_broker(config, ready_file=args.ready_file))
    return 0
