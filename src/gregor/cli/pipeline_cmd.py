"""``gregor pipeline``: feed the data pipelines with generated events, and run them on a
local Spark (the ``spark`` extra) through the ``gregor`` connector.

Spark is imported only when a pipeline runs, so the rest of the CLI works without it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gregor.cli.client_config import (
    BOOTSTRAP_ENV,
    DEFAULT_BOOTSTRAP,
    add_client_arguments,
    client_config,
)
from gregor.cli.errors import CliError
from gregor.pipelines.generators import Event, activity_events, publish, retail_events

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

GENERATORS = ("retail", "activity")
PIPELINES = ("retail", "activity", "monitoring", "warehouse")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    pipeline = subparsers.add_parser("pipeline", help="generate input for and run data pipelines")
    actions = pipeline.add_subparsers(dest="action", required=True)

    generate = actions.add_parser("generate", help="produce a pipeline's input events")
    generate.add_argument("name", choices=GENERATORS)
    generate.add_argument("--rate", type=float, required=True, help="events per second")
    generate.add_argument("--count", type=int, help="stop after COUNT events (default: never)")
    generate.add_argument("--seed", type=int, default=0,
                          help="same seed, same events (event times follow the clock)")
    generate.add_argument("--reports-topic", default="producer-reports",
                          help="where per-minute sent counts go, for monitoring")
    add_client_arguments(generate)
    generate.set_defaults(run=run_generate)

    run = actions.add_parser("run", help="run a pipeline on Spark (local, or a cluster)")
    run.add_argument("name", choices=PIPELINES)
    run.add_argument(
        "--bootstrap-server", "-b", metavar="HOST:PORT",
        default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
        help=f"broker(s) to bootstrap from (default: ${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP})")
    run.add_argument("--checkpoint", type=Path,
                     help="Spark checkpoint directory: a restart resumes from it")
    run.add_argument("--available-now", action="store_true",
                     help="process what the topics hold now, then exit")
    run.add_argument("--max-offsets-per-trigger", type=int, help="records per micro-batch")
    run.add_argument("--topics", help="monitoring: comma-separated topics to watch")
    run.add_argument("--schema-registry", metavar="URL",
                     help="monitoring: write alerts as Avro in Confluent's framing, their "
                          "schema in this registry (default: JSON)")
    run.add_argument("--topic", help="warehouse: the topic to load")
    run.add_argument("--from", dest="start", type=parse_time,
                     help="warehouse batch: first timestamp (ISO 8601, UTC if no offset)")
    run.add_argument("--to", dest="end", type=parse_time,
                     help="warehouse batch: end timestamp, exclusive")
    run.add_argument("--output", type=Path, help="warehouse: Parquet output directory")
    run.add_argument("--master", metavar="URL",
                     help="Spark master: local[N] (default local[2], or spark-submit's "
                          "--master), spark://HOST:PORT of a standalone cluster, or any URL "
                          "spark-submit takes")
    run.add_argument("--conf", action="append", type=parse_conf, default=[],
                     metavar="NAME=VALUE", help="a Spark setting (repeatable), as spark-submit's")
    run.set_defaults(run=run_pipeline)


def parse_conf(text: str) -> tuple[str, str]:
    """``NAME=VALUE``; the value may itself hold ``=``."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value


def parse_time(text: str) -> int:
    """ISO 8601 to epoch milliseconds."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def run_generate(args: argparse.Namespace) -> int:
    if args.rate <= 0:
        raise CliError("--rate must be positive")
    config, _ = client_config(args)
    start_ms, interval_ms = int(time.time() * 1000), max(1, round(1000 / args.rate))
    events: Iterator[Event] = (
        retail_events(args.seed, start_ms, interval_ms) if args.name == "retail"
        else activity_events(args.seed, start_ms, interval_ms))
    stop = threading.Event()

    def on_sigint(signum: int, frame: object) -> None:
        """First Ctrl-C: finish cleanly (flush, report the last windows); second: now."""
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGINT, on_sigint)
    sent = publish(islice(events, args.count), config, args.rate, args.reports_topic, stop)
    for topic in sorted({topic for topic, _ in sent}):
        total = sum(n for (t, _), n in sent.items() if t == topic)
        print(f"{topic}: {total} events", file=sys.stderr)
    return 130 if stop.is_set() else 0


def run_pipeline(args: argparse.Namespace) -> int:
    try:
        from gregor.spark.session import build_session
    except ImportError as exc:
        raise CliError(
            f"pipelines need the 'spark' extra (pip install 'gregor[spark]'): {exc}") from exc

    def session() -> SparkSession:
        return build_session(f"gregor-{args.name}", args.master, **dict(args.conf))

    if args.name == "warehouse" and args.start is not None:
        if not (args.topic and args.output and args.end is not None):
            raise CliError("a warehouse batch run needs --topic, --from, --to and --output")
        return _until_interrupted(lambda spark: _run_warehouse_range(args, spark), session)
    if args.checkpoint is None:
        raise CliError(f"pipeline {args.name} needs --checkpoint DIR")
    if args.name == "monitoring" and not args.topics:
        raise CliError("monitoring needs --topics TOPIC[,TOPIC...]")
    if args.name == "warehouse" and not (args.topic and args.output):
        raise CliError("warehouse needs --topic and --output (and --from/--to for a batch run)")

    def run(spark: SparkSession) -> int:
        from pyspark.errors import StreamingQueryException

        queries = _start_queries(args, spark)
        try:
            if args.available_now:
                for query in queries:
                    query.awaitTermination()
            else:
                spark.streams.awaitAnyTermination()
        except StreamingQueryException as exc:
            raise CliError(f"pipeline {args.name} failed: {exc}") from exc
        failed = [q for q in queries if q.exception() is not None]
        if failed:
            raise CliError(f"query {failed[0].name} failed: {failed[0].exception()}")
        return 0

    return _until_interrupted(run, session)


def _until_interrupted(
    work: Callable[[SparkSession], int], session: Callable[[], SparkSession]
) -> int:
    """Start Spark and run ``work`` (which blocks in the JVM) until it ends or Ctrl-C; on
    Ctrl-C stop the streaming queries and the session and return 130 after one line on
    stderr.

    Any py4j call that Ctrl-C interrupts in the main thread logs a traceback, and
    PySpark's own SIGINT handler (installed when a session starts in the main thread)
    makes another py4j call from inside the handler.  So the session is started and
    ``work`` runs on a helper thread, and the main thread only waits for it (a wait that
    Python's default SIGINT handler interrupts cleanly) and then stops the queries:
    ``StreamingQuery.stop()`` waits for the running micro-batch to be interrupted, and
    the checkpoint keeps only what was committed, so a restart resumes from there.  A
    second Ctrl-C during that stop exits at once; Spark's JVM ends with this process.
    """
    from gregor.spark.session import silence_spark_console

    signal.signal(signal.SIGINT, signal.default_int_handler)
    done, interrupted = threading.Event(), threading.Event()
    started: list[SparkSession] = []
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            started.append(session())
            if interrupted.is_set():
                return  # Ctrl-C while Spark was starting: start no query
            outcome["result"] = work(started[0])
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="gregor-pipeline", daemon=True).start()
    try:
        done.wait()
    except KeyboardInterrupt:
        interrupted.set()
        silence_spark_console()
        print("gregor: interrupted; stopping the pipeline (a restart with the same "
              "--checkpoint resumes)", file=sys.stderr, flush=True)
        if started:
            _stop(started[0])
        return 130
    if started:
        _stop(started[0])
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _stop(spark: SparkSession) -> None:
    """Stop every query (each waits for its micro-batch to be cancelled), then Spark.

    Spark's log is silenced first: a query stopped mid-batch logs cancelled tasks as
    ERRORs, which say nothing about the pipeline.
    """
    spark.sparkContext.setLogLevel("OFF")
    for query in spark.streams.active:
        query.stop()
    spark.sparkContext.cancelAllJobs()
    spark.stop()


def _start_queries(args: argparse.Namespace, spark: SparkSession) -> list[StreamingQuery]:
    from gregor.pipelines import activity, monitoring, retail, warehouse

    common = {"available_now": args.available_now, "max_offsets": args.max_offsets_per_trigger}
    if args.name == "retail":
        return retail.start(spark, args.bootstrap_server, args.checkpoint, **common)
    if args.name == "activity":
        return activity.start(spark, args.bootstrap_server, args.checkpoint, **common)
    if args.name == "monitoring":
        settings = monitoring.MonitoringSettings(tuple(args.topics.split(",")),
                                                 registry_url=args.schema_registry)
        return [monitoring.start(spark, args.bootstrap_server, args.checkpoint, settings,
                                 **common)]
    return [warehouse.start_streaming(spark, args.bootstrap_server, args.topic, args.output,
                                      args.checkpoint, **common)]


def _run_warehouse_range(args: argparse.Namespace, spark: SparkSession) -> int:
    from gregor.pipelines import warehouse

    if warehouse.export_range(spark, args.bootstrap_server, args.topic, args.start, args.end,
                              args.output):
        print(f"loaded {args.topic} [{args.start}, {args.end}) into {args.output}",
              file=sys.stderr)
    else:
        print(f"{args.topic} [{args.start}, {args.end}) was loaded before: nothing to do",
              file=sys.stderr)
    return 0
