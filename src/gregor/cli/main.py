"""Entry point of the ``gregor`` command: one sub-command module per area."""

from __future__ import annotations

import argparse
import sys

from gregor.cli import broker_cmd
from gregor.config import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gregor", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    broker_cmd.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except (ConfigError, OSError) as exc:
        print(f"gregor: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
