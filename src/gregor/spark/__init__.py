"""Spark connector: read and write topics of any Kafka-compatible broker from PySpark.

>>> import gregor.spark
>>> gregor.spark.register(spark)
>>> df = (spark.read.format("gregor")
...       .option("kafka.bootstrap.servers", "127.0.0.1:9092")
...       .option("subscribe", "events").load())

``format("gregor")`` reads through the JVM source (``jvm/``, built by
``scripts/build-spark-jar.sh`` into :data:`JAR`) when that jar is on the session's
classpath (``spark.jars``, which :func:`gregor.spark.session.build_session` sets), and
through the Python data source otherwise. Writes always go to the Python sink.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from gregor.spark.source import GregorDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["JAR", "GregorDataSource", "PythonSourceWarning", "jvm_source_loaded", "register"]

JAR = Path(__file__).parent / "jars" / "gregor-spark.jar"
"""The JVM source, when set-up could build it (it needs a JDK)."""
JVM_PROVIDER = "io.gregor.spark.GregorProvider"


class PythonSourceWarning(UserWarning):
    """``format("gregor")`` is the Python data source in this session: it works, but
    an aggregation over it runs at about half the speed of the JVM source's."""


class GregorPythonDataSource(GregorDataSource):
    """The Python source under the name the JVM source's table hands its writes to
    (``GregorTable.PYTHON_SOURCE``); reading through it takes the Python path even where
    ``gregor`` is the JVM source."""

    @classmethod
    def name(cls) -> str:
        return "gregor_python"


def register(spark: SparkSession) -> None:
    """Make ``format("gregor")`` available in this session (Python data sources are
    registered per session, not discovered).

    The Python source is always registered as ``gregor_python``: the JVM source hands it
    its writes. It is ``gregor`` as well only when the JVM source is not on the
    classpath, because Spark refuses a name that both a JVM and a Python source answer to.
    That fallback warns (:class:`PythonSourceWarning`, once per process): a session built
    by hand without ``spark.jars`` is the usual way to start Spark, and it would otherwise
    run every read at the slower speed without a word.
    """
    spark.dataSource.register(GregorPythonDataSource)
    if not jvm_source_loaded(spark):
        spark.dataSource.register(GregorDataSource)
        _warn_python_path()


@functools.cache
def _warn_python_path() -> None:
    """Said once: a job registers in every session it builds, and once is enough to act."""
    how = (f'start the session with .config("spark.jars", str(gregor.spark.JAR)) ({JAR}) '
           "or build it with gregor.spark.session.build_session()")
    if not JAR.exists():
        how = f"build {JAR} with scripts/build-spark-jar.sh (it needs a JDK), then {how}"
    warnings.warn('format("gregor") reads through the slower Python data source: the JVM '
                  f"source is not on this session's classpath. For the fast one, {how}.",
                  PythonSourceWarning, stacklevel=3)


def jvm_source_loaded(spark: SparkSession) -> bool:
    """Whether the session's JVM can load the JVM source (false for Spark Connect)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(JVM_PROVIDER))
