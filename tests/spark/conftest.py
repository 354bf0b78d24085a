"""One local SparkSession per test module, with the ``gregor`` source registered.

The broker comes from the top-level ``broker`` fixture (tests/conftest.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark", reason="install the 'spark' extra to run the Spark tests")

from pyspark.sql import SparkSession  # noqa: E402

import gregor.spark  # noqa: E402


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """Starting a session costs ~10 s and 0.5 GB, so a module shares one."""
    # Keep Spark on loopback, and make its Python workers use this interpreter (and so
    # this venv, where gregor and confluent-kafka are installed).
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("gregor-spark-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    gregor.spark.register(session)
    yield session
    session.stop()
