"""``gregor zookeeper start``: a standalone ZooKeeper for a cluster, like Kafka's
``zookeeper-server-start.sh`` (Debian's ``zookeeper`` package provides the server)."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from types import FrameType

from gregor.cli.errors import CliError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    zookeeper = subparsers.add_parser("zookeeper", help="run a standalone ZooKeeper")
    actions = zookeeper.add_subparsers(dest="action", required=True)
    start = actions.add_parser(
        "start", help="run ZooKeeper in the foreground on loopback (Ctrl-C stops it)")
    start.add_argument("--data-dir", default="./data/zookeeper", help="where its data lives")
    start.add_argument("--port", type=int, default=2181, help="client port (default 2181)")
    start.add_argument("--host", default="127.0.0.1", help="address to listen on")
    start.set_defaults(run=run_start)


def run_start(args: argparse.Namespace) -> int:
    from gregor.cluster.zookeeper_server import ZooKeeperServer

    server = ZooKeeperServer(Path(args.data_dir), port=args.port, host=args.host)
    try:
        server.start()
    except (RuntimeError, FileNotFoundError) as exc:
        raise CliError(f"cannot start ZooKeeper: {exc} (is Debian's zookeeper package "
                       "installed? scripts/install-zookeeper.sh installs it)") from None
    print(f"ZooKeeper serving on {server.connect}, data in {args.data_dir}; logging to "
          f"{server.log_path}", flush=True)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        assert server.proc is not None
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
