"""Spark connector: read and write topics of any Kafka-compatible broker from PySpark.

>>> import gregor.spark
>>> gregor.spark.register(spark)
>>> df = (spark.read.format("gregor")
...       .option("kafka.bootstrap.servers", "127.0.0.1:9092")
...       .option("subscribe", "events").load())
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gregor.spark.source import GregorDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["GregorDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("gregor")`` available in this session (Python data sources are
    registered per session, not discovered)."""
    spark.dataSource.register(GregorDataSource)
