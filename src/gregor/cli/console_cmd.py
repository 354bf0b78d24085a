"""``gregor console``: serve the web console for a cluster (see ``gregor.console``)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import urllib.parse
from typing import TYPE_CHECKING

from gregor.cli.client_config import add_client_arguments
from gregor.cli.errors import CliError

if TYPE_CHECKING:
    from gregor.console.admin import ClusterAdmin

DEFAULT_PORT = 8080


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    console = subparsers.add_parser(
        "console", help="a web console: cluster, topics, messages, consumer groups")
    console.add_argument("--host", default="127.0.0.1",
                         help="address to listen on (default: 127.0.0.1, this machine only)")
    console.add_argument("--port", type=int, default=DEFAULT_PORT,
                         help=f"port to listen on (default: {DEFAULT_PORT}; 0 picks a free one)")
    console.add_argument("--refresh", type=float, default=5.0, metavar="S",
                         help="seconds between samples of offsets (rates, lag charts) and "
                              "between page refreshes (default: 5)")
    console.add_argument("--history", type=float, default=15.0, metavar="MIN",
                         help="minutes of samples kept for the charts (default: 15)")
    console.add_argument("--metrics", action="append", default=[], metavar="URL",
                         help="a broker's Prometheus metrics (http://HOST:PORT/metrics), "
                              "scraped every --refresh for bytes in and out per second and "
                              "log sizes; once per broker, summed over them. Brokers with "
                              "metrics.listener set are found without it; this adds those "
                              "behind other addresses")
    console.add_argument("--schema-registry", metavar="URL",
                         default=os.environ.get("GREGOR_SCHEMA_REGISTRY"),
                         help="a schema registry (Confluent's API): its subjects and "
                              "versions, and message values in Confluent's framing decoded "
                              "(default: $GREGOR_SCHEMA_REGISTRY, else none)")
    add_client_arguments(console)
    console.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from gregor.console.admin import ClusterAdmin
        from gregor.console.history import History
        from gregor.console.metrics import BrokerMetrics
        from gregor.console.server import WEB_DIST, create_app
    except ImportError as exc:
        raise CliError(f"the console needs the 'console' extra ({exc}): "
                       "run scripts/setup.sh console") from None
    if args.refresh <= 0 or args.history <= 0:
        raise CliError("--refresh and --history must be positive")
    for url in args.metrics:
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise CliError(f"--metrics takes http://HOST:PORT/metrics, not {url!r}")
    if not (WEB_DIST / "index.html").is_file():
        raise CliError("the console's front end is not built: run scripts/build-console.sh "
                       "(scripts/setup.sh console runs it too)")
    # Bind before anything else, so a port in use fails at once and --port 0 is known.
    try:
        listener = socket.create_server((args.host, args.port), family=_family(args.host))
    except OSError as exc:
        raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    admin = ClusterAdmin(args)
    urls = [*args.metrics, *(url for url in _discovered_metrics(admin)
                             if url not in args.metrics)]
    metrics = BrokerMetrics(urls, args.refresh, args.history * 60) if urls else None
    registry = None
    if args.schema_registry:
        try:
            from gregor.console.schemas import RegistryView
        except ImportError as exc:
            raise CliError(f"--schema-registry needs the 'schemas' extra ({exc}): "
                           "run scripts/setup.sh schemas") from None
        registry = RegistryView(args.schema_registry)
    history = History(admin, args.refresh, args.history * 60, metrics)
    app = create_app(admin, history, _allowed_hosts(args.host), registry)
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"gregor console for {admin.bootstrap} on http://{shown}:{port}/ (Ctrl-C stops it)",
          flush=True)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2,
                            lifespan="on")
    uvicorn.Server(config).run(sockets=[listener])
    return 0


def _discovered_metrics(admin: ClusterAdmin) -> list[str]:
    """The brokers' own ``metrics.listener`` endpoints, so that a cluster started with
    them (``scripts/run-cluster.sh``) needs no ``--metrics``; none if the cluster cannot
    be asked now (the pages say so on their own)."""
    try:
        return admin.metrics_urls()
    except CliError:
        return []


def _allowed_hosts(host: str) -> list[str]:
    """The names a browser may use for a console on a loopback address: only loopback
    names, so that no page elsewhere reaches it through a name of its own that resolves
    to 127.0.0.1 (DNS rebinding). Listening elsewhere (--host) allows any name."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    return ["127.0.0.1", "localhost", "[::1]"] if loopback else ["*"]


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
