"""The pipelines' tests of ``test_pipelines`` once more, on the standalone Spark cluster
(a master and two workers, the ``cluster`` fixture) instead of ``local[2]``: the same
input, the same comparisons with plain Python, executors in other processes than the
driver.  Deselect with ``-m 'not spark_cluster'``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession
from test_pipelines import *  # noqa: F403 - the same tests and fixtures, collected here again

from gregor.spark.session import build_session
from gregor.spark.standalone import SHARED_APP_CONF, StandaloneCluster

pytestmark = pytest.mark.spark_cluster


@pytest.fixture(scope="module")
def spark(cluster: StandaloneCluster) -> Iterator[SparkSession]:
    """This module's session is an application of the cluster."""
    session = build_session("gregor-pipeline-cluster-tests", cluster.url, **SHARED_APP_CONF)
    yield session
    session.stop()
