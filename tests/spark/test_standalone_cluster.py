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
import re
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

import pyspark
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from gregor.broker.process import BrokerProcess
from gregor.pipelines.generators import activity_events, publish
from gregor.spark.session import build_session

pytestmark = pytest.mark.spark_cluster

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
START_TIMEOUT_S = 120.0
APP_CONF = {"spark.cores.max": "2", "spark.executor.cores": "1",
            "spark.executor.memory": "512m"}


class SparkDaemon:
    """A master or worker in the foreground, its log read line by line so that tests wait
    for what it says rather than for a while."""

    def __init__(self, name: str, *args: str) -> None:
        env = {**os.environ, "SPARK_HOME": str(SPARK_CLASS.parent.parent),
               "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        self.name = name
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            [str(SPARK_CLASS), *args], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)
        threading.Thread(target=self._read, name=f"log-{name}", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, pattern: str) -> re.Match[str]:
        regex = re.compile(pattern)
        deadline = time.monotonic() + START_TIMEOUT_S
        seen = 0
        with self._changed:
            while True:
                for line in self.lines[seen:]:
                    if found := regex.search(line):
                        return found
                seen = len(self.lines)
                left = deadline - time.monotonic()
                assert self.process.poll() is None, f"{self.name} ended:\n{''.join(self.lines)}"
                assert left > 0, f"{self.name} never logged {pattern!r}:\n{''.join(self.lines)}"
                self._changed.wait(left)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@dataclass(frozen=True)
class Cluster:
    url: str
    """``spark://127.0.0.1:PORT``, for applications"""
    web: str
    """the master's web UI, whose ``/json/`` says what runs where"""

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.web}/json/", timeout=30) as answer:
            return json.load(answer)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master with two registered workers."""
    work = tmp_path_factory.mktemp("standalone")
    master = SparkDaemon("master", "org.apache.spark.deploy.master.Master",
                         "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
    daemons = [master]
    try:
        url = master.wait_for(r"Starting Spark master at (spark://\S+)").group(1)
        web = master.wait_for(r"MasterWebUI.* started at (http://\S+)").group(1)
        for index in (1, 2):
            worker = SparkDaemon(f"worker-{index}", "org.apache.spark.deploy.worker.Worker",
                                 "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                                 "--cores", "2", "--memory", "2g",
                                 "--work-dir", str(work / f"worker-{index}"), url)
            daemons.append(worker)
        for worker in daemons[1:]:
            worker.wait_for("Successfully registered with master")
        yield Cluster(url, web)
    finally:
        for daemon in reversed(daemons):
            daemon.stop()


@pytest.fixture(scope="module")
def cluster_spark(cluster: Cluster) -> Iterator[SparkSession]:
    session = build_session("gregor-cluster-tests", cluster.url, **APP_CONF)
    yield session
    session.stop()


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


def test_batch_read_runs_on_both_workers(cluster_spark: SparkSession, cluster: Cluster,
                                         broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, 4)
    expected = produce(broker.bootstrap, topic, 4000, 4)
    df = (cluster_spark.read.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", topic).option("includeHeaders", "true").load())
    rows = df.select("partition", "key", "value", "offset", "headers").collect()
    assert Counter((r.partition, bytes(r.key), bytes(r.value)) for r in rows) == expected
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


def test_gregor_pipeline_run_with_master_and_conf(cluster: Cluster, broker: BrokerProcess,
                                                  cluster_spark: SparkSession,
                                                  tmp_path: Path) -> None:
    """The CLI as a user runs it against the cluster, beside the tests' own application;
    the warehouse's batch load, whose output is easy to check."""
    topic = new_topic(broker.bootstrap, 2)
    day = 24 * 3600 * 1000
    midnight = int(time.time() * 1000) // day * day
    events = list(islice(activity_events(5, midnight - 20 * 60_000, 6000, topic), 300))
    publish(events, {"bootstrap.servers": broker.bootstrap}, reports_topic=None)
    output = tmp_path / "warehouse"
    conf = [arg for name, value in APP_CONF.items() for arg in ("--conf", f"{name}={value}")]
    run = subprocess.run(
        [sys.executable, "-m", "gregor.cli.main", "pipeline", "run", "warehouse",
         "-b", broker.bootstrap, "--topic", topic, "--output", str(output),
         "--from", datetime.fromtimestamp(events[0].ts_ms / 1000, UTC).isoformat(),
         "--to", datetime.fromtimestamp((events[-1].ts_ms + 1) / 1000, UTC).isoformat(),
         "--master", cluster.url, *conf],
        capture_output=True, text=True, timeout=START_TIMEOUT_S * 2)
    assert run.returncode == 0, run.stderr
    rows = cluster_spark.read.parquet(str(output)).select("value").collect()
    assert Counter(r.value for r in rows) == Counter(json.dumps(e.value) for e in events)
    [app] = [a for a in cluster.state()["completedapps"] if a["name"] == "gregor-warehouse"]
    assert app["memoryperexecutor"] == 512  # from --conf spark.executor.memory=512m


def python_wrapper(path: Path, role: str, marker: Path) -> None:
    """A ``bin/python`` that notes who started it, then runs this venv's Python."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho {role} >> "{marker}"\nexec "{sys.executable}" "$@"\n')
    path.chmod(0o755)


def test_executors_take_their_python_from_spark_archives(cluster: Cluster, broker: BrokerProcess,
                                                         cluster_spark: SparkSession,
                                                         tmp_path: Path) -> None:
    """What the README says for executors on other machines: a packed environment shipped
    with ``spark.archives`` and named by ``spark.pyspark.python``, the same relative path
    unpacked beside the driver.  The environment here is a wrapper around this venv's
    Python that leaves a mark, which is what a venv-pack archive's interpreter would be."""
    marker = tmp_path / "started"
    packed = tmp_path / "packed"
    python_wrapper(packed / "bin" / "python", "executor", marker)
    archive = tmp_path / "gregor-env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(packed / "bin", arcname="bin")
    driver_dir = tmp_path / "driver"
    python_wrapper(driver_dir / "environment" / "bin" / "python", "driver", marker)
    topic = new_topic(broker.bootstrap, 2)
    day = 24 * 3600 * 1000
    events = list(islice(activity_events(7, int(time.time() * 1000) // day * day, 1000, topic),
                         50))
    publish(events, {"bootstrap.servers": broker.bootstrap}, reports_topic=None)
    conf = {**APP_CONF, "spark.archives": f"{archive}#environment",
            "spark.pyspark.python": "./environment/bin/python"}
    run = subprocess.run(
        [sys.executable, "-m", "gregor.cli.main", "pipeline", "run", "warehouse",
         "-b", broker.bootstrap, "--topic", topic, "--output", str(tmp_path / "out"),
         "--from", datetime.fromtimestamp(events[0].ts_ms / 1000, UTC).isoformat(),
         "--to", datetime.fromtimestamp((events[-1].ts_ms + 1) / 1000, UTC).isoformat(),
         "--master", cluster.url,
         *[arg for name, value in conf.items() for arg in ("--conf", f"{name}={value}")]],
        cwd=driver_dir, capture_output=True, text=True, timeout=START_TIMEOUT_S * 2)
    assert run.returncode == 0, run.stderr
    assert cluster_spark.read.parquet(str(tmp_path / "out")).count() == len(events)
    assert set(marker.read_text().split()) == {"driver", "executor"}
