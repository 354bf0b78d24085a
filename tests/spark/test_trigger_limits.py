"""``minOffsetsPerTrigger`` and ``maxTriggerDelay``: the stream's planning calls against a
real broker, as Spark's planner makes them, with a clock the test moves instead of
waiting, for both paths of the source (the JVM one on Spark's ManualClock)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from gregor.spark import JAR
from gregor.spark.options import parse_source_options
from gregor.spark.stream_reader import GregorStreamReader


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class PythonPlanner:
    """The Python source's stream reader, as Spark's planner process calls it."""

    def __init__(self, options: dict[str, str]) -> None:
        self.clock = Clock()
        self.reader = GregorStreamReader(parse_source_options(options, streaming=True),
                                         self.clock)
        self.limit = self.reader.getDefaultReadLimit()

    def initial(self) -> dict:
        return self.reader.initialOffset()

    def latest(self, start: dict) -> dict:
        return self.reader.latestOffset(start, self.limit)

    def wait(self, seconds: int) -> None:
        self.clock.now += seconds

    def available_now(self) -> None:
        self.reader.prepareForTriggerAvailableNow()


class JvmPlanner:
    """The JVM source's micro-batch stream on Spark's ManualClock, called over py4j as
    Spark's MicroBatchExecution calls it; offsets cross as their checkpoint JSON."""

    def __init__(self, spark: SparkSession, options: dict[str, str]) -> None:
        jvm = spark._jvm
        assert jvm is not None
        given = jvm.java.util.HashMap()
        for name, value in options.items():
            given.put(name, value)
        parsed = jvm.io.gregor.spark.plan.SourceOptions.parse(
            jvm.org.apache.spark.sql.util.CaseInsensitiveStringMap(given), True)
        self.clock = jvm.org.apache.spark.util.ManualClock(1_000_000)
        self.stream = jvm.io.gregor.spark.GregorMicroBatchStream(
            parsed, jvm.io.gregor.spark.SourceSchema.of(False), self.clock)
        self.limit = self.stream.getDefaultReadLimit()

    def initial(self) -> dict:
        return json.loads(self.stream.initialOffset().json())  # type: ignore[no-any-return]

    def latest(self, start: dict) -> dict:
        begin = self.stream.deserializeOffset(json.dumps(start))
        return json.loads(self.stream.latestOffset(begin, self.limit).json())  # type: ignore[no-any-return]

    def wait(self, seconds: int) -> None:
        self.clock.advance(seconds * 1000)

    def available_now(self) -> None:
        self.stream.prepareForTriggerAvailableNow()


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, b"v", partition=i % 2)
    assert producer.flush(30) == 0


@pytest.mark.parametrize("path", ["jvm", "python"])
def test_triggers_wait_for_min_offsets_or_max_trigger_delay(
        broker: Any, path: str, request: pytest.FixtureRequest) -> None:
    topic = f"min-offsets-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    options = {
        "kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
        "startingOffsets": "earliest", "minOffsetsPerTrigger": "10",
        "maxTriggerDelay": "1m"}
    if path == "python":
        planner: PythonPlanner | JvmPlanner = PythonPlanner(options)
    elif not JAR.exists():
        pytest.skip("no JDK: the JVM source was not built")
    else:
        planner = JvmPlanner(request.getfixturevalue("spark"), options)
    start = planner.initial()
    produce(broker.bootstrap, topic, 4)

    first = planner.latest(start)  # a run's first trigger is never held
    assert first == {topic: {"0": 2, "1": 2}}
    produce(broker.bootstrap, topic, 6)
    planner.wait(59)
    assert planner.latest(first) == first  # 6 new offsets < 10, 59 s < 1 min
    planner.wait(1)
    second = planner.latest(first)  # a minute since the last micro-batch
    assert second == {topic: {"0": 5, "1": 5}}
    produce(broker.bootstrap, topic, 10)
    third = planner.latest(second)  # 10 new offsets
    assert third == {topic: {"0": 10, "1": 10}}

    # availableNow reads what there is, however little: waiting could never end.
    produce(broker.bootstrap, topic, 2)
    planner.available_now()
    assert planner.latest(third) == {topic: {"0": 11, "1": 11}}
