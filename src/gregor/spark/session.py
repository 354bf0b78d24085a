"""The local SparkSession that pipelines, tests and benchmarks run in."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from gregor.spark import register


def build_session(app_name: str = "gregor-pipeline", master: str = "local[2]",
                  **configs: str) -> SparkSession:
    """A session with the ``gregor`` source registered; ``configs`` adds Spark settings.

    Spark binds to loopback and its Python workers run this interpreter (so they import
    gregor and confluent-kafka from the same venv). Two shuffle partitions, because the
    default 200 adds seconds to every stateful micro-batch on a small machine and the
    checkpoint freezes the number at the first run. UTC, so that timestamps in the JSON
    the pipelines write and dates of warehouse partitions do not depend on the machine.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for name, value in configs.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
