"""One local SparkSession per test module, with the ``gregor`` source registered.

``format("gregor")`` is the JVM source whenever set-up built its jar (a JDK was there),
so most tests read through it; tests that take ``source_format`` also read through the
Python data source it falls back to. The broker comes from the top-level ``broker``
fixture (tests/conftest.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="install the 'spark' extra to run the Spark tests")

from pyspark.sql import SparkSession  # noqa: E402

from gregor.spark.session import build_session  # noqa: E402
from gregor.spark.standalone import StandaloneCluster  # noqa: E402

os.environ["SPARK_CONF_DIR"] = str(Path(__file__).with_name("spark-conf"))
"""Every Spark JVM the tests start (here, in ``gregor pipeline`` and spark-submit
subprocesses, the standalone cluster's executors) takes spark-conf/spark-defaults.conf:
the JIT's first tier only, which cuts a short-lived driver's CPU by a third or more."""


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A module shares one session. Only the first in a test process starts Spark's JVM
    (~10 s); a new session in it took 0.5-1.2 s (at load 6-10), so sharing one across
    modules would save little and carry one module's session state into the next."""
    session = build_session("gregor-spark-tests")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _stop_queries_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """Stop the streaming queries a test leaves running in its module's session (a test
    that fails while they run leaves them): the module's next test would fail as well
    when it starts a query of the same name ("a query with that name is already active
    in this SparkSession"), and the leftover queries would keep the cores busy."""
    yield
    for name in ("spark", "cluster_spark"):
        if name in request.fixturenames:
            session: SparkSession = request.getfixturevalue(name)
            for query in session.streams.active:
                query.stop()


@pytest.fixture(params=["gregor", "gregor_python"], ids=["jvm", "python"])
def source_format(request: pytest.FixtureRequest) -> str:
    """Both paths of the source: ``gregor`` (the JVM source, when built) and
    ``gregor_python``, the Python data source every session registers under that name
    (the one ``gregor`` is without the jar, and the JVM source's writer)."""
    return str(request.param)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A standalone master and two workers of two cores, started from the PySpark package
    once for every module that runs applications on it (~15 s)."""
    with StandaloneCluster(tmp_path_factory.mktemp("standalone")) as started:
        yield started


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "spark_cluster: starts a standalone Spark master and two workers "
        "(deselect with -m 'not spark_cluster')")
