"""The local SparkSession that ``gregor pipeline run`` executes pipelines in."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

import gregor.spark

SHUFFLE_PARTITIONS = 4
"""Stateful operators keep one state store per shuffle partition and visit each in every
micro-batch; Spark's default of 200 costs seconds per batch on a small machine.  The
number is fixed in a query's checkpoint the first time it starts."""


def local_session(app_name: str, master: str = "local[2]") -> SparkSession:
    """A session with the ``gregor`` source registered, on loopback, whose Python workers
    run this interpreter (so they find gregor and confluent-kafka in its environment)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    gregor.spark.register(spark)
    return spark
