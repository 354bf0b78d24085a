"""One local SparkSession per test module, with the ``gregor`` source registered.

``format("gregor")`` is the JVM source whenever set-up built its jar (a JDK was there),
so most tests read through it; tests that take ``source_format`` also read through the
Python data source it falls back to. The broker comes from the top-level ``broker``
fixture (tests/conftest.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="install the 'spark' extra to run the Spark tests")

from pyspark.sql import SparkSession  # noqa: E402

from gregor.spark.session import build_session  # noqa: E402
from gregor.spark.standalone import SHARED_APP_CONF, StandaloneCluster  # noqa: E402

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
    in this SparkSession"), and the leftover queries would keep the cores busy. The
    sessions are taken before the test: a function-scoped one (``cluster_spark``) is torn
    down before this fixture."""
    sessions: list[SparkSession] = [request.getfixturevalue(name)
                                    for name in ("spark", "cluster_spark")
                                    if name in request.fixturenames]
    yield
    for session in sessions:
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


CLUSTER_START_TIMEOUT_S = 120.0
_cluster_app: list[SparkSession] = []
"""The running application of ``cluster_spark``, while there is one."""


@pytest.fixture
def cluster_spark(cluster: StandaloneCluster) -> SparkSession:
    """An application of the cluster with its two executors registered (jobs may start on
    the first, and tests look at where executors run), one for all the tests in a row
    that use it, across modules (test_standalone_cluster's, test_pipelines_on_cluster's):
    an application's start (its executors' JVMs) took 89 s of a loaded suite.

    Stopped after the last test of such a row (``pytest_runtest_teardown`` below): left
    active, it would be the session that the next module's ``build_session`` gets from
    ``getOrCreate`` in this worker, the cluster's instead of a local one."""
    if not _cluster_app:
        from test_standalone_cluster import executors
        session = build_session("gregor-cluster-tests", cluster.url, **SHARED_APP_CONF)
        _cluster_app.append(session)
        deadline = time.monotonic() + CLUSTER_START_TIMEOUT_S
        while executors(session) < 2:
            assert time.monotonic() < deadline, "the cluster never started two executors"
            time.sleep(0.2)
    return _cluster_app[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Stop ``cluster_spark``'s application once the next test does not use it
    (pytest-xdist hands the modules that do to one worker together), after the test's
    fixtures were torn down (``_stop_queries_left_running`` stops its queries)."""
    try:
        yield
    finally:
        if _cluster_app and not (nextitem is not None
                                 and "cluster_spark" in getattr(nextitem, "fixturenames", ())):
            _cluster_app.pop().stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "spark_cluster: starts a standalone Spark master and two workers "
        "(deselect with -m 'not spark_cluster')")
