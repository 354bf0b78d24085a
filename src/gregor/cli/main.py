"""Entry point of the ``gregor`` command: one sub-command module per area."""

# ruff: noqa: E402 - the imports wait for the check below
from __future__ import annotations

import sys

if __name__ == "__main__":
    # Run as a program (``python -m gregor.cli.main``: brokers, and every command the
    # tests run), never imported: kio imports Hypothesis whenever it can, to register
    # strategies for its types, which nothing here uses. Where Hypothesis is installed
    # (a test or development environment) that import was half a second of every
    # command's and broker's start; this process never needs it.
    if "hypothesis" not in sys.modules:
        # None in sys.modules is the import system's "cannot be imported".
        sys.modules["hypothesis"] = None  # type: ignore[assignment]

import argparse
import os

from confluent_kafka import KafkaException

from gregor.cli import (
    acls_cmd,
    broker_cmd,
    cluster_cmd,
    console_cmd,
    consume_cmd,
    groups_cmd,
    log_dirs_cmd,
    perf_cmd,
    pipeline_cmd,
    produce_cmd,
    quotas_cmd,
    schema_registry_cmd,
    schemas_cmd,
    topics_cmd,
    transactions_cmd,
    users_cmd,
    zookeeper_cmd,
)
from gregor.cli.errors import CliError, kafka_error_text
from gregor.config import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gregor", description="A Kafka-compatible broker, and Kafka client tools.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    broker_cmd.add_parser(subparsers)
    topics_cmd.add_parser(subparsers)
    cluster_cmd.add_parser(subparsers)
    log_dirs_cmd.add_parser(subparsers)
    produce_cmd.add_parser(subparsers)
    consume_cmd.add_parser(subparsers)
    perf_cmd.add_parser(subparsers)
    groups_cmd.add_parser(subparsers)
    transactions_cmd.add_parser(subparsers)
    users_cmd.add_parser(subparsers)
    acls_cmd.add_parser(subparsers)
    quotas_cmd.add_parser(subparsers)
    pipeline_cmd.add_parser(subparsers)
    zookeeper_cmd.add_parser(subparsers)
    console_cmd.add_parser(subparsers)
    schema_registry_cmd.add_parser(subparsers)
    schemas_cmd.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``gregor consume ... | head``): not an error. Point stdout
        # at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KafkaException as exc:
        return _fail(kafka_error_text(exc))
    except (CliError, ConfigError, OSError) as exc:
        return _fail(str(exc))


def _fail(message: str) -> int:
    print(f"gregor: error: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
