"""The JVM source's driver side against the Python source's, called over py4j with the
same inputs: option parsing (every refusal's message), the offsets JSON, the ranges
planned for ``minPartitions`` and the ``maxOffsetsPerTrigger`` budget split. Both paths
must plan alike, so that a query reads the same whichever one runs it."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.errors import IllegalArgumentException
from pyspark.sql import SparkSession
from test_planning import BAD_OPTIONS, BASE, SETTINGS

from gregor.spark import JAR
from gregor.spark.offsets import Offsets, offsets_to_json
from gregor.spark.options import parse_source_options
from gregor.spark.partition_range import plan_ranges
from gregor.spark.read_limit import cap_offsets


@pytest.fixture(scope="module")
def jvm(spark: SparkSession) -> Iterator[Any]:
    if not JAR.exists():
        pytest.skip("no JDK: the JVM source was not built")
    yield spark._jvm


def java_map(jvm: Any, values: dict[Any, Any]) -> Any:
    mapping = jvm.java.util.HashMap()
    for key, value in values.items():
        mapping.put(key, value)
    return mapping


def java_offsets(jvm: Any, offsets: Offsets) -> Any:
    """Through the checkpoint JSON: py4j would box small offsets as Integer, not Long."""
    return jvm.io.gregor.spark.plan.OffsetsJson.read(json.dumps(offsets_to_json(offsets)))


def python_offsets(java: Any) -> Offsets:
    return {(tp.topic(), tp.partition()): int(o) for tp, o in java.items()}


def parse_in_jvm(jvm: Any, options: dict[str, str], streaming: bool) -> Any:
    given = jvm.org.apache.spark.sql.util.CaseInsensitiveStringMap(java_map(jvm, options))
    return jvm.io.gregor.spark.plan.SourceOptions.parse(given, streaming)


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_bad_options_fail_with_the_python_sources_message(
        jvm: Any, options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as python:
        parse_source_options(options, streaming=False)
    # PySpark turns the JVM's IllegalArgumentException into its own.
    with pytest.raises(IllegalArgumentException) as java:
        parse_in_jvm(jvm, options, False)
    said, expected = str(java.value), str(python.value)
    # The JSON decoder's and the regex compiler's own explanations differ; what names the
    # option and the value does not.
    for detail in ("invalid per-partition JSON", "invalid regex"):
        if detail in expected:
            expected = expected[:expected.index(detail) + len(detail)]
            said = said[:len(expected)]
    assert said == expected


def test_streaming_refuses_ending_options_and_defaults_follow_spark(jvm: Any) -> None:
    with pytest.raises(IllegalArgumentException) as java:
        parse_in_jvm(jvm, {**BASE, "endingOffsets": "latest"}, True)
    assert str(java.value) == (
        "option 'endingOffsets' is not valid for streaming queries")
    stream = parse_in_jvm(jvm, {**BASE, "maxTriggerDelay": "2 min"}, True)
    assert stream.starting().toString() == "EarliestOrLatest[marker=-1]"
    assert (stream.maxOffsetsPerTrigger(), stream.maxTriggerDelayMs()) == (None, 120_000)
    batch = parse_in_jvm(jvm, {"bootstrap.servers": "h:1", "subscribe": "a",
                               "startingOffsets": "earliest", "startingTimestamp": "5"}, False)
    assert batch.starting().toString() == "AtTimestamp[timestampMs=5]"
    assert dict(batch.clientConfig()) == {"bootstrap.servers": "h:1"}


def test_offsets_json_is_the_python_sources_text(jvm: Any) -> None:
    offsets = {("b", 10): 1, ("a", 2): 5, ("b", 9): 7, ("a", 0): 3, ("a.b-c_d", 1): -2}
    text = jvm.io.gregor.spark.plan.OffsetsJson.write(java_offsets(jvm, offsets))
    assert text == json.dumps(offsets_to_json(offsets))
    assert python_offsets(jvm.io.gregor.spark.plan.OffsetsJson.read(text)) == offsets


RANGE = re.compile(r"TopicRange\[topic=([^,]*), partition=(\d+), start=(-?\d+), end=(-?\d+),")


def test_ranges_and_budgets_are_planned_alike(jvm: Any) -> None:
    """40 random plans. Each answer crosses py4j as one text (a list's ``toString``, the
    offsets' JSON): read field by field, the round trips took 40 s of a loaded suite."""
    settings = jvm.io.gregor.spark.read.ReadSettings.fromOptions(
        java_map(jvm, {"bootstrap.servers": "127.0.0.1:9092"}), False, True, 1000)
    plan = jvm.io.gregor.spark.plan
    planner, caps, offsets_json = plan.RangePlanner, plan.OffsetCaps, plan.OffsetsJson

    rng = random.Random(14)
    for _ in range(40):
        tps = [("t", p) for p in range(rng.randrange(1, 5))] + [("u", 0)]
        start = {tp: rng.randrange(0, 50) for tp in tps}
        end = {tp: start[tp] + rng.choice([0, 1, 3, 10, 333, 10_000]) for tp in tps}
        earliest = {tp: rng.randrange(0, start[tp] + 1) for tp in tps}
        min_partitions = rng.choice([None, 2, 5, 7, 16])
        max_records = rng.choice([None, 1, 7, 100, 4000])
        python = [(r.topic, r.partition, r.start, r.end) for r in plan_ranges(
            start, end, earliest, SETTINGS, min_partitions, max_records)]
        java = planner.plan(
            java_offsets(jvm, start), java_offsets(jvm, end), java_offsets(jvm, earliest),
            settings, min_partitions,
            None if max_records is None else jvm.java.lang.Long(max_records))
        text = java.toString()
        assert [(t, int(p), int(s), int(e)) for t, p, s, e in RANGE.findall(text)] == python
        assert text.count("TopicRange[") == len(python)

        budget = rng.choice([1, 2, 7, 100, 5000])
        capped = caps.cap(java_offsets(jvm, start), java_offsets(jvm, end), budget)
        # OffsetsJson.write is the Python source's text (test_offsets_json_is_...).
        assert offsets_json.write(capped) == json.dumps(
            offsets_to_json(cap_offsets(start, end, budget)))
