"""Flags every client command shares, and the librdkafka configuration built from them.

All commands are plain librdkafka clients so they work against any Kafka-compatible
broker; ``-X name=value`` passes any librdkafka property through unchanged and wins
over the command's own defaults.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, ClusterMetadata

from gregor.cli.cluster_metadata import ConnectionWatch, cluster_metadata
from gregor.cli.errors import CliError, kafka_error_text
from gregor.config import parse_properties

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "GREGOR_BOOTSTRAP"


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server", "-b", metavar="HOST:PORT",
        default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
        help=f"broker(s) to bootstrap from (default: ${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP})")
    parser.add_argument(
        "--command-config", metavar="FILE",
        help="client properties file (Kafka tools' --command-config, e.g. the security "
             "settings scripts/run-cluster.sh --secure writes); -X wins over it")
    parser.add_argument(
        "-X", dest="client_properties", action="append", default=[], metavar="NAME=VALUE",
        help="librdkafka client property, e.g. -X linger.ms=10 (repeatable; "
             "-X log_level=7 shows librdkafka's own log)")


def parse_assignments(items: Iterable[str], flag: str) -> list[tuple[str, str]]:
    """Split ``name=value`` arguments, keeping order and repeats (headers may repeat)."""
    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"{flag} expects NAME=VALUE, got {item!r}")
        pairs.append((name, value))
    return pairs


def client_config(args: argparse.Namespace, defaults: Mapping[str, Any] | None = None,
                  ) -> tuple[dict[str, Any], ConnectionWatch]:
    """The librdkafka configuration: command defaults < flags < ``-X`` properties.

    librdkafka logs every failed connection attempt to stderr; a command reports
    connection trouble itself in one line, so the library log stays off unless the
    user asks for it with ``-X log_level=...`` or ``-X debug=...``.
    """
    user = {**_command_config(getattr(args, "command_config", None)),
            **dict(parse_assignments(args.client_properties, "-X"))}
    config: dict[str, Any] = {"bootstrap.servers": args.bootstrap_server, **(defaults or {})}
    if "debug" not in user:
        config["log_level"] = 0
    config.update(user)
    watch = ConnectionWatch(str(config["bootstrap.servers"]))
    config["error_cb"] = watch
    return config, watch


def _command_config(path: str | None) -> dict[str, str]:
    """The properties of a ``--command-config`` file (none without one)."""
    if path is None:
        return {}
    try:
        return parse_properties(Path(path).read_text())
    except OSError as exc:
        raise CliError(f"--command-config {path}: {exc.strerror}") from None


def described_cluster(args: argparse.Namespace, timeout_s: float) -> tuple[ClusterMetadata, Any]:
    """Every topic's metadata and DescribeCluster's answer (brokers with their racks, the
    controller), with the command's client settings; CliError if either fails."""
    config, watch = client_config(args)
    admin = AdminClient(config)
    metadata = cluster_metadata(admin, watch)
    try:
        described = admin.describe_cluster(request_timeout=timeout_s).result()
    except Exception as exc:  # KafkaException, or a timeout of the future
        raise CliError(f"cannot describe the cluster: {kafka_error_text(exc)}") from None
    return metadata, described
