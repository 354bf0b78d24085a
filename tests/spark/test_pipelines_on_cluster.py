"""The pipelines' tests of ``test_pipelines`` once more, on the standalone Spark cluster
(a master and two workers, the ``cluster`` fixture) instead of ``local[2]``: the same
input, the same comparisons with plain Python, executors in other processes than the
driver.  Deselect with ``-m 'not spark_cluster'``.

All but one: retail's run straight through to the end is left to ``local[2]``, because
its run stopped mid-stream and restarted compares the same output with plain Python on
the cluster too, and a retail run here takes a minute and more of the suite's time."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from test_pipelines import (  # the same tests and fixtures, collected here again
    retail_input,
    test_activity_matches_plain_python,
    test_monitoring_flags_windows_short_of_what_producers_sent,
    test_retail_stopped_mid_stream_and_restarted_gives_the_same_output,
    test_warehouse_range_into_parquet_once,
    test_warehouse_stream_replayed_batch_adds_nothing,
)

pytestmark = pytest.mark.spark_cluster
__all__ = ["retail_input", "test_activity_matches_plain_python",
           "test_monitoring_flags_windows_short_of_what_producers_sent",
           "test_retail_stopped_mid_stream_and_restarted_gives_the_same_output",
           "test_warehouse_range_into_parquet_once",
           "test_warehouse_stream_replayed_batch_adds_nothing"]


@pytest.fixture
def spark(cluster_spark: SparkSession) -> SparkSession:
    """This module's session is the cluster's application that test_standalone_cluster's
    tests use too (tests/spark/conftest.py), started once for both."""
    return cluster_spark
