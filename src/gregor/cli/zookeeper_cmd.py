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
        "start", help="run ZooKeeper in the foreground (Ctrl-C or SIGTERM stops it)")
    start.add_argument("--data-dir", default="./data/zookeeper",
                       help="its snapshots, transaction log, zoo.cfg and zookeeper.log "
                            "(default ./data/zookeeper)")
    start.add_argument("--port", type=int, default=2181, help="client port (default 2181)")
    start.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1)")
    start.set_defaults(run=run_start)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_start(args: argparse.Namespace) -> int:
    from gregor.cluster.zookeeper_server import ZooKeeperServer

    server = ZooKeeperServer(Path(args.data_dir), port=args.port, host=args.host)
    # SIGTERM (a service manager, run-cluster.sh) stops it as Ctrl-C does. ZooKeeper
    # runs in a session of its own, so neither signal reaches it before it is told.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        try:
            server.start()
        except (RuntimeError, OSError) as exc:
            raise CliError(f"cannot start ZooKeeper: {exc}") from None
        print(f"ZooKeeper serving on {server.connect} (data in {args.data_dir}, "
              f"log in {server.log_path}); Ctrl-C stops it", flush=True)
        assert server.proc is not None
        code = server.proc.wait()
        raise CliError(f"ZooKeeper exited with {code}:\n{server.log_tail()}")
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()
