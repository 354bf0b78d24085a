"""``gregor schema-registry``: serve Confluent's schema registry API for a cluster (see
``gregor.schemas``), its state in the cluster's ``_schemas`` topic."""

from __future__ import annotations

import argparse
import logging
import socket
import threading

from gregor.cli.client_config import add_client_arguments, client_config
from gregor.cli.errors import CliError

DEFAULT_LISTEN = "127.0.0.1:8081"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    registry = subparsers.add_parser(
        "schema-registry",
        help="a schema registry with Confluent's REST API, its state in _schemas")
    registry.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                          help=f"address to serve on (default: {DEFAULT_LISTEN}, "
                               "Confluent's port; port 0 picks a free one)")
    registry.add_argument("--advertised-url", metavar="URL",
                          help="the URL other instances forward writes to (default: "
                               "http://HOST:PORT of --listen)")
    registry.add_argument("--group-id", default="schema-registry",
                          help="the Kafka group whose members elect the primary "
                               "(default: schema-registry)")
    registry.add_argument("--topic", default="_schemas",
                          help="the topic holding the schemas (default: _schemas)")
    add_client_arguments(registry)
    registry.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        from gregor.client.connection import client_security
        from gregor.schemas.api import create_app
        from gregor.schemas.forwarding import forward_to_primary
        from gregor.schemas.primary_election import PrimaryElection
        from gregor.schemas.registry import SchemaRegistry
        from gregor.schemas.schema_topic import SchemaTopic
        from gregor.schemas.serving import serve
        from gregor.schemas.state import RegistryState
    except ImportError as exc:
        raise CliError(f"the schema registry needs the 'schemas' extra ({exc}): "
                       "run scripts/setup.sh schemas") from None
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        raise CliError(f"--listen takes HOST:PORT, not {args.listen!r}")
    host = host.strip("[]")
    # Bind before anything else, so a port in use fails at once and port 0 is known.
    try:
        listener = socket.create_server(
            (host, int(port)), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        raise CliError(f"cannot listen on {args.listen}: {exc.strerror}") from None
    # Inherited by every accepted connection: with Nagle's algorithm a small answer on a
    # kept-alive connection could wait for the client's delayed ACK, 40 ms a call.
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config, _ = client_config(args)
    try:
        security = client_security(config)
    except (ValueError, OSError) as exc:
        raise CliError(f"the registry's client security settings: {exc}") from None
    state = RegistryState()
    changed = threading.Condition(threading.RLock())
    topic = SchemaTopic(config, state, changed, args.topic)
    topic.start()
    bound_host, bound_port = listener.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    url = f"http://{shown}:{bound_port}"
    # Instances elect the one that writes; the others forward writes to it.
    election = PrimaryElection(args.bootstrap_server, args.advertised_url or url,
                               on_elected=topic.catch_up, group_id=args.group_id,
                               security=security)
    election.start()
    try:
        app, direct = create_app(SchemaRegistry(state, changed, topic),
                                 forward_to_primary(election, topic.catch_up))
        print(f"gregor schema registry for {args.bootstrap_server} on {url}/ "
              "(Ctrl-C stops it)", flush=True)
        serve(app, listener, direct)
    finally:
        election.close()
        topic.close()
    return 0
