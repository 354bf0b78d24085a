"""``build_session``'s settings reach Spark where they act: those of the driver's own JVM
(memory, Java options) only when the JVM starts, which ``gregor pipeline run --conf``
relies on in local mode. In a process of its own, since a JVM keeps what it started with.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("pyspark", reason="install the 'spark' extra to run the Spark tests")

_SCRIPT = """
from gregor.spark.session import build_session
spark = build_session('gregor-session-settings', 'local[1]', **{
    'spark.driver.memory': '700m',
    'spark.driver.extraJavaOptions': '-Dgregor.session.test=launched',
    'spark.sql.shuffle.partitions': '3'})
runtime = spark._jvm.java.lang.Runtime.getRuntime()
print('max heap MiB:', runtime.maxMemory() // 2**20)
print('property:', spark._jvm.java.lang.System.getProperty('gregor.session.test'))
print('shuffle partitions:', spark.conf.get('spark.sql.shuffle.partitions'))
"""


def test_driver_settings_reach_the_jvm_it_starts() -> None:
    run = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    lines = dict(line.split(": ", 1) for line in run.stdout.splitlines() if ": " in line)
    # The JVM reports a little less than -Xmx; Spark's local default would be 1 GiB.
    assert 600 <= int(lines["max heap MiB"]) <= 700
    assert lines["property"] == "launched"
    assert lines["shuffle partitions"] == "3"
