"""The connector and a pipeline on a real Spark standalone cluster: a master and two
workers started from the PySpark package (``spark-class``), as the README tells users to.

Each worker offers two cores; the test session takes one executor core on each worker
(``spark.cores.max=2``, spread out as standalone masters do), which leaves room for
``gregor pipeline run --master`` to start its own application beside it.  Deselect with
``-m 'not spark_cluster'`` when the cluster's start-up (~15 s) is too slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from gregor.broker.process import BrokerProcess
from gregor.cli import main
from gregor.pipelines.generators import activity_events, publish
from gregor.spark import JAR
from gregor.spark.standalone import SHARED_APP_CONF, SPARK_HOME, StandaloneCluster

pytestmark = pytest.mark.spark_cluster

START_TIMEOUT_S = 120.0


def executors(spark: SparkSession) -> int:
    """Executors registered with this application (the driver not counted)."""
    return int(spark.sparkContext._jsc.sc().getExecutorIds().size())  # type: ignore[union-attr]


def new_topic(bootstrap: str, partitions: int) -> str:
    topic = f"cluster-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    return topic


def produce(bootstrap: str, topic: str, count: int, partitions: int) -> Counter:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, b"value-%d" % i, b"key-%d" % i, partition=i % partitions,
                         headers=[("n", b"%d" % i)])
    assert producer.flush(30) == 0
    return Counter((i % partitions, b"key-%d" % i, b"value-%d" % i) for i in range(count))


def test_batch_read_runs_on_both_workers(cluster_spark: SparkSession,
                                         cluster: StandaloneCluster,
                                         broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, 4)
    expected = produce(broker.bootstrap, topic, 4000, 4)
    df = (cluster_spark.read.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", topic).option("includeHeaders", "true").load())
    rows = df.select("partition", "key", "value", "offset", "headers").collect()
    assert Counter((r.partition, bytes(r.key), bytes(r.value)) for r in rows) == expected
    if JAR.exists():
        # The JVM source's tasks ran on the workers' executors: they fetched its jar.
        assert "GregorScan" in df._jdf.queryExecution().executedPlan().toString()
    assert all(r.headers[0].value == bytes(r.value)[6:] for r in rows)
    assert executors(cluster_spark) == 2
    assert [w["coresused"] for w in cluster.state()["workers"]] == [1, 1]


def test_available_now_stream_to_parquet(cluster_spark: SparkSession, broker: BrokerProcess,
                                         tmp_path: Path) -> None:
    topic = new_topic(broker.bootstrap, 3)
    expected = produce(broker.bootstrap, topic, 3000, 3)
    stream = (cluster_spark.readStream.format("gregor")
              .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "1000")
              .load().select("partition", "key", "value"))
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (stream.writeStream.format("parquet").option("path", str(output))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(START_TIMEOUT_S)
    assert query.exception() is None
    rows = cluster_spark.read.parquet(str(output)).collect()
    assert Counter((r.partition, bytes(r.key), bytes(r.value)) for r in rows) == expected
    assert len(list((checkpoint / "commits").glob("[0-9]*"))) == 3


def python_wrapper(path: Path, role: str, marker: Path) -> None:
    """A ``bin/python`` that notes who started it, then runs this venv's Python."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho {role} >> "{marker}"\nexec "{sys.executable}" "$@"\n')
    path.chmod(0o755)


def test_executors_take_their_python_from_spark_archives(
        cluster: StandaloneCluster, fresh_broker: BrokerProcess, cluster_spark: SparkSession,
        tmp_path: Path) -> None:
    """The CLI as a user runs it against the cluster (``--master``, ``--conf``), beside
    the tests' own application, and what the README says for executors on other
    machines: a packed environment shipped with ``spark.archives`` and named by
    ``spark.pyspark.python``, the same relative path unpacked beside the driver.  The
    environment here is a wrapper around this venv's Python that leaves a mark, which is
    what a venv-pack archive's interpreter would be. The activity pipeline, because
    executors write its summaries with the sink's Python (the JVM source reads without
    any); on a broker of its own, for its fixed topics."""
    bootstrap = fresh_broker.start().bootstrap
    marker = tmp_path / "started"
    packed = tmp_path / "packed"
    python_wrapper(packed / "bin" / "python", "executor", marker)
    archive = tmp_path / "gregor-env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(packed / "bin", arcname="bin")
    driver_dir = tmp_path / "driver"
    python_wrapper(driver_dir / "environment" / "bin" / "python", "driver", marker)
    events = list(islice(activity_events(7, int(time.time() * 1000) - 600_000, 1000,
                                         "activity"), 50))
    publish(events, {"bootstrap.servers": bootstrap}, reports_topic=None)
    conf = {**SHARED_APP_CONF, "spark.archives": f"{archive}#environment",
            "spark.pyspark.python": "./environment/bin/python"}
    run = subprocess.run(
        [sys.executable, "-m", "gregor.cli.main", "pipeline", "run", "activity",
         "-b", bootstrap, "--checkpoint", str(tmp_path / "checkpoint"), "--available-now",
         "--master", cluster.url,
         *[arg for name, value in conf.items() for arg in ("--conf", f"{name}={value}")]],
        cwd=driver_dir, capture_output=True, text=True, timeout=START_TIMEOUT_S * 2)
    assert run.returncode == 0, run.stderr
    summaries = (cluster_spark.read.format("gregor").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", "activity-summaries").load())
    assert summaries.where("value LIKE '%page_counts%'").count() > 0
    assert set(marker.read_text().split()) == {"driver", "executor"}
    # An application of the cluster, with executors sized by --conf spark.executor.memory.
    assert any(a["name"] == "gregor-activity" and a["memoryperexecutor"] == 512
               for a in cluster.state()["completedapps"])


def test_spark_submit_of_a_pipeline(cluster: StandaloneCluster, broker: BrokerProcess,
                                    cluster_spark: SparkSession, tmp_path: Path) -> None:
    """``spark-submit`` of gregor's command line: the pipeline takes spark-submit's master
    and settings (no --master of its own), and its executors run on the cluster."""
    topic = new_topic(broker.bootstrap, 2)
    day = 24 * 3600 * 1000
    events = list(islice(activity_events(9, int(time.time() * 1000) // day * day, 1000, topic),
                         40))
    publish(events, {"bootstrap.servers": broker.bootstrap}, reports_topic=None)
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    # spark-submit starts the driver's JVM itself: --jars is how the JVM source gets there.
    jars = ["--jars", str(JAR)] if JAR.exists() else []
    run = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.url,
         "--executor-memory", "640m", "--total-executor-cores", "2", *jars,
         main.__file__, "pipeline", "run", "warehouse",
         "-b", broker.bootstrap, "--topic", topic, "--output", str(tmp_path / "out"),
         "--from", datetime.fromtimestamp(events[0].ts_ms / 1000, UTC).isoformat(),
         "--to", datetime.fromtimestamp((events[-1].ts_ms + 1) / 1000, UTC).isoformat()],
        env=env, capture_output=True, text=True, timeout=START_TIMEOUT_S * 2)
    assert run.returncode == 0, run.stderr
    rows = cluster_spark.read.parquet(str(tmp_path / "out")).select("value").collect()
    assert Counter(r.value for r in rows) == Counter(json.dumps(e.value) for e in events)
    assert any(a["name"] == "gregor-warehouse" and a["memoryperexecutor"] == 640
               for a in cluster.state()["completedapps"])
