"""``build_session`` in a process of its own, since a JVM keeps what it started with:
its settings reach Spark where they act (those of the driver's own JVM, memory and Java
options, only when the JVM starts, which ``gregor pipeline run --conf`` relies on in local
mode), and a set-up without the JVM source's jar still reads ``format("gregor")``.

One driver serves both tests (a driver's start is 30-60 s of a loaded suite): it is
built as on a machine without a JDK, whose set-up builds no jar, and with driver settings
that differ from Spark's local defaults."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="install the 'spark' extra to run the Spark tests")

from test_connector import new_topic, produce  # noqa: E402

_SCRIPT = """
import sys
from pathlib import Path
from gregor.spark import session
session.JAR = Path('/nonexistent/gregor-spark.jar')
spark = session.build_session('gregor-session-settings', 'local[1]', **{
    'spark.driver.memory': '700m',
    'spark.driver.extraJavaOptions': '-Dgregor.session.test=launched',
    'spark.sql.shuffle.partitions': '3'})
runtime = spark._jvm.java.lang.Runtime.getRuntime()
print('max heap MiB:', runtime.maxMemory() // 2**20)
print('property:', spark._jvm.java.lang.System.getProperty('gregor.session.test'))
print('shuffle partitions:', spark.conf.get('spark.sql.shuffle.partitions'))
import gregor.spark
gregor.spark.register(spark)
df = (spark.read.format('gregor').option('kafka.bootstrap.servers', sys.argv[1])
      .option('subscribe', sys.argv[2]).load())
print('records:', df.count())
print(df._jdf.queryExecution().executedPlan().toString())
"""


@pytest.fixture(scope="module")
def driver(broker: Any) -> subprocess.CompletedProcess[str]:
    """The driver's run: ``build_session`` as a set-up without the jar calls it, with
    driver settings, then ``register`` again and a batch read of 10 records."""
    topic = new_topic(broker.bootstrap, partitions=2)
    produce(broker.bootstrap, topic, 10, partitions=2)
    run = subprocess.run([sys.executable, "-c", _SCRIPT, broker.bootstrap, topic],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run


def test_driver_settings_reach_the_jvm_it_starts(
        driver: subprocess.CompletedProcess[str]) -> None:
    lines = dict(line.split(": ", 1) for line in driver.stdout.splitlines() if ": " in line)
    # The JVM reports a little less than -Xmx; Spark's local default would be 1 GiB.
    assert 600 <= int(lines["max heap MiB"]) <= 700
    assert lines["property"] == "launched"
    assert lines["shuffle partitions"] == "3"


def test_without_the_jar_format_gregor_is_the_python_source(
        driver: subprocess.CompletedProcess[str]) -> None:
    """A set-up without a JDK builds no jar: ``register`` then gives ``gregor`` to the
    Python source, and says so once as a warning naming the way to the fast path, however
    many times it is called."""
    assert "records: 10\n" in driver.stdout
    assert "BatchScan gregor[" in driver.stdout and "(Python)" in driver.stdout
    assert driver.stderr.count("PythonSourceWarning") == 1, driver.stderr
    assert "spark.jars" in driver.stderr and "build_session" in driver.stderr
