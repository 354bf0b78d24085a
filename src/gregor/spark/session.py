"""The local SparkSession that pipelines, tests and benchmarks run in."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import IO
from urllib.parse import urlsplit

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from gregor.spark import JAR, register


def build_session(app_name: str = "gregor-pipeline", master: str | None = None,
                  **configs: str) -> SparkSession:
    """A session with the ``gregor`` source registered; ``configs`` adds Spark settings.

    ``master`` is ``local[2]`` unless given, or under ``spark-submit`` the master and
    Python that ``spark-submit`` was given (its JVM is already running, with its settings).

    With a master on this machine (``local[N]``, or a cluster's on a loopback address)
    Spark binds to loopback; a cluster elsewhere must reach the driver on an address of
    this machine, which ``SPARK_LOCAL_IP`` or ``spark.driver.host`` gives.  Python workers
    run this interpreter (so they import gregor and confluent-kafka from the same venv)
    unless ``spark.pyspark.python`` names another, such as a packed venv's on executors
    elsewhere. Two shuffle partitions, because the
    default 200 adds seconds to every stateful micro-batch on a small machine and the
    checkpoint freezes the number at the first run. UTC, so that timestamps in the JSON
    the pipelines write and dates of warehouse partitions do not depend on the machine.

    The JVM source's jar (:data:`gregor.spark.JAR`, when set-up built it) goes on
    ``spark.jars``, beside any jars the caller names: the driver's classpath when this
    process starts Spark's JVM, and every executor's, which fetch it from the driver.
    Under ``spark-submit`` the JVM is already running, so only ``--jars`` can put it there.
    """
    submitted = _SUBMITTED in os.environ
    if master is None and not submitted:
        master = "local[2]"
    if master is not None and _on_this_machine(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # PySpark hands this to the JVM as the Python of every worker it starts.
    if "spark.pyspark.python" in configs:
        os.environ["PYSPARK_PYTHON"] = configs["spark.pyspark.python"]
    elif submitted:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    else:
        os.environ["PYSPARK_PYTHON"] = sys.executable
    if JAR.exists() and not submitted:
        configs = {**configs, "spark.jars": ",".join(
            filter(None, (configs.get("spark.jars"), str(JAR))))}
    if not submitted:
        _launch_jvm_in_its_own_session(configs)
    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
    builder = (
        builder.appName(app_name)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for name, value in configs.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    _show_source_warnings(session)
    register(session)
    return session


def _show_source_warnings(session: SparkSession) -> None:
    """Let the JVM source's warnings through Spark's ERROR level: records skipped with
    failOnDataLoss=false must be said, as the Python source's workers say them."""
    jvm = session._jvm
    if jvm is not None:
        log4j = jvm.org.apache.logging.log4j
        log4j.core.config.Configurator.setLevel("io.gregor", log4j.Level.WARN)


_SUBMITTED = "PYSPARK_GATEWAY_PORT"
"""Set by ``spark-submit`` for the Python it starts: the JVM to connect to."""


def _on_this_machine(master: str) -> bool:
    host = urlsplit(master).hostname if "://" in master else None
    return master.startswith("local") or host == "localhost" or (host or "").startswith("127.")


def _launch_jvm_in_its_own_session(configs: dict[str, str]) -> None:
    """Start Spark's JVM outside the terminal's process group, once per process, with
    its console output passing through this process.

    Ctrl-C in a terminal signals the whole foreground process group. PySpark makes
    its JVM ignore that SIGINT, but the Python workers the JVM forks restore Python's
    handler: a task running at that moment dies with KeyboardInterrupt, and the JVM
    prints the failed task's Java stack trace after gregor said it was stopping. In
    a session of its own, Spark only stops when gregor stops it; and since its output
    is relayed by gregor, a Ctrl-C while Spark is still starting can silence the
    start-up banner that would otherwise follow gregor's last line. The JVM still
    ends with this process: PySpark's gateway exits when its stdin pipe closes.

    Every setting goes to spark-submit, as PySpark's own builder hands them over when
    it starts the JVM: some only act there, on the driver's JVM itself (``spark.jars``
    on its classpath, where the JVM source must be; ``spark.driver.memory``,
    ``spark.driver.extraJavaOptions``); set on the session later, they would be
    silently ignored in local mode. The JVM lives as long as this process, so the first
    session's settings of that kind stay.
    """
    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False).setAll(list(configs.items()))
    gateway = launch_gateway(conf=conf, popen_kwargs={
        "start_new_session": True, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT})
    threading.Thread(target=_relay, args=(gateway.proc.stdout,), name="spark-console",
                     daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway)


_console_silenced = threading.Event()


def silence_spark_console() -> None:
    """From now on, drop what Spark's JVM and workers print (gregor is stopping)."""
    _console_silenced.set()


def _relay(stream: IO[bytes]) -> None:
    # Reading goes on while silenced, so the JVM never blocks on a full pipe.
    for line in iter(stream.readline, b""):
        if not _console_silenced.is_set():
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()
