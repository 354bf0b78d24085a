"""Option parsing, offset JSON, rate limiting and range planning: pure functions, no broker."""

from __future__ import annotations

import json
import pickle

import pytest

from gregor.spark.offsets import EARLIEST, LATEST, offsets_from_json, offsets_to_json
from gregor.spark.options import (
    AtTimestamp,
    EarliestOrLatest,
    SpecificOffsets,
    SpecificTimestamps,
    Subscription,
    parse_source_options,
)
from gregor.spark.partition_leader import READ_COMMITTED, FetchSettings
from gregor.spark.partition_range import DataLossError, ReadSettings, plan_ranges
from gregor.spark.read_limit import cap_offsets

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a"}
FETCH = FetchSettings(bootstrap=(("127.0.0.1", 9092),))
SETTINGS = ReadSettings(FETCH, include_headers=False, fail_on_data_loss=True, poll_timeout_ms=1000)


def test_offsets_json_text_is_stable_whatever_the_insertion_order() -> None:
    one = {("b", 10): 1, ("a", 2): 5, ("b", 9): 7, ("a", 0): 3}
    two = dict(reversed(list(one.items())))
    assert json.dumps(offsets_to_json(one)) == json.dumps(offsets_to_json(two))
    assert list(offsets_to_json(one)) == ["a", "b"]
    assert list(offsets_to_json(one)["b"]) == ["9", "10"]
    assert offsets_from_json(json.loads(json.dumps(offsets_to_json(one)))) == one


def test_defaults_follow_spark_for_batch_and_streaming() -> None:
    batch = parse_source_options(BASE, streaming=False)
    assert batch.starting == EarliestOrLatest(EARLIEST)
    assert batch.ending == EarliestOrLatest(LATEST)
    assert batch.fail_on_data_loss and not batch.include_headers
    assert batch.client_config == {"bootstrap.servers": "127.0.0.1:9092"}
    stream = parse_source_options(BASE, streaming=True)
    assert stream.starting == EarliestOrLatest(LATEST)
    assert stream.max_offsets_per_trigger is None
    assert stream.min_offsets_per_trigger is None
    assert stream.max_trigger_delay_ms == 15 * 60_000


@pytest.mark.parametrize("text, ms", [("30s", 30_000), ("500", 500), ("250ms", 250),
                                      ("2 min", 120_000), ("1h", 3_600_000)])
def test_max_trigger_delay_takes_sparks_time_strings(text: str, ms: int) -> None:
    options = {**BASE, "minOffsetsPerTrigger": "10", "maxTriggerDelay": text}
    parsed = parse_source_options(options, streaming=True)
    assert (parsed.min_offsets_per_trigger, parsed.max_trigger_delay_ms) == (10, ms)


def test_kafka_prefixed_options_pass_through_and_plain_bootstrap_is_accepted() -> None:
    options = {"bootstrap.servers": "h:1", "subscribe": "a", "kafka.fetch.wait.max.ms": "5"}
    parsed = parse_source_options(options, streaming=False)
    assert parsed.client_config == {"bootstrap.servers": "h:1", "fetch.wait.max.ms": "5"}


def test_timestamp_options_take_precedence_over_offsets() -> None:
    options = {
        **BASE,
        "startingOffsets": "earliest",
        "startingOffsetsByTimestamp": '{"a": {"0": 5}}',
        "endingOffsetsByTimestamp": '{"a": {"0": 9}}',
        "endingTimestamp": "100",
    }
    parsed = parse_source_options(options, streaming=False)
    assert parsed.starting == SpecificTimestamps({("a", 0): 5})
    assert parsed.ending == AtTimestamp(100)


def test_per_partition_offsets_and_assign() -> None:
    options = {
        "kafka.bootstrap.servers": "h:1",
        "assign": '{"a": [0, 2], "b": [1]}',
        "startingOffsets": '{"a": {"0": 23, "2": -2}, "b": {"1": 4}}',
    }
    parsed = parse_source_options(options, streaming=True)
    assert parsed.subscription.select({"a": 3, "b": 2}) == [("a", 0), ("a", 2), ("b", 1)]
    # Only the assigned partitions that exist, as in Spark: a stream picks up the others
    # when they are created.
    assert parsed.subscription.select({"a": 1, "c": 5}) == [("a", 0)]
    assert parsed.starting == SpecificOffsets({("a", 0): 23, ("a", 2): EARLIEST, ("b", 1): 4})


BAD_OPTIONS = [
    ({"subscribe": "a"}, "bootstrap.servers"),
    ({"kafka.bootstrap.servers": "h:1"}, "exactly one"),
    ({**BASE, "assign": '{"a": [0]}'}, "exactly one"),
    ({**BASE, "startingOffsets": "latest"}, "not valid for batch"),
    ({**BASE, "endingOffsets": "earliest"}, "not valid for batch"),
    ({**BASE, "startingOffsets": '{"a": {"0": -1}}'}, "not valid here"),
    ({**BASE, "endingOffsets": '{"a": {"0": -2}}'}, "not valid here"),
    ({**BASE, "startingOffsets": '{"a": [1]}'}, "invalid per-partition JSON"),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, "positive integer"),
    ({**BASE, "minOffsetsPerTrigger": "-1"}, "positive integer"),
    ({**BASE, "maxTriggerDelay": "soon"}, "duration such as 15m"),
    ({**BASE, "maxTriggerDelay": "5 weeks"}, "duration such as 15m"),
    ({**BASE, "failOnDataLoss": "maybe"}, "'true' or 'false'"),
    ({**BASE, "startingTimestamp": "-5"}, "timestamp in ms"),
    ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, "invalid regex"),
    ({"kafka.bootstrap.servers": "h:1", "assign": "[0]"}, "must look like"),
    ({"kafka.bootstrap.servers": "h:1", "assign": "{}"}, "names no partition"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": " , "}, "names no topic"),
    ({**BASE, "startingOffsetsByTimestampStrategy": "maybe"}, "'error' or 'latest'"),
    ({**BASE, "startingOffsetsByTimestamp": '{"a": {"0": -3}}'}, "timestamp in ms"),
    ({**BASE, "minPartitions": "many"}, "positive integer"),
    ({**BASE, "maxRecordsPerPartition": "0"}, "positive integer"),
    ({**BASE, "fetchOffset.numRetries": "x"}, "positive integer"),
    ({**BASE, "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "higher than"),
    ({**BASE, "kafka.auto.offset.reset": "earliest"}, "not supported: set .* 'startingOffsets'"),
    ({**BASE, "kafka.value.deserializer": "x.Y"}, "'kafka.value.deserializer' is not supported"),
    ({**BASE, "kafka.enable.auto.commit": "true"}, "'kafka.enable.auto.commit' is not supp"),
    ({"kafka.bootstrap.servers": "h:1", "subscribePattern": " "}, "names no pattern"),
]
"""Batch options each refused, and a word of the message; the JVM source says the same
(test_jvm_planning)."""


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_bad_batch_options_fail_with_a_message_naming_the_problem(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        parse_source_options(options, streaming=False)


def test_ending_options_are_rejected_for_streaming() -> None:
    with pytest.raises(ValueError, match="endingOffsets"):
        parse_source_options({**BASE, "endingOffsets": "latest"}, streaming=True)


def test_pattern_is_searched_in_names_as_spark_and_skips_internal_topics() -> None:
    counts = {"events-1": 2, "events-10x": 1, "x-events-2": 1, "__consumer_offsets": 50}
    assert Subscription(pattern="^events-[0-9]+$").select(counts) == [
        ("events-1", 0),
        ("events-1", 1),
    ]
    assert Subscription(pattern="events-[0-9]+").select(counts) == [
        ("events-1", 0),
        ("events-1", 1),
        ("events-10x", 0),
        ("x-events-2", 0),
    ]
    assert Subscription(pattern=".*").select(counts)[-1] == ("x-events-2", 0)
    assert len(Subscription(pattern=".*").select(counts)) == 4
    assert Subscription(topics=frozenset({"x-events-2", "gone"})).select(counts) == [
        ("x-events-2", 0)
    ]


def test_row_budget_is_shared_fairly_and_never_exceeded() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 0}
    latest = {("t", 0): 1000, ("t", 1): 105, ("t", 2): 1000}
    end = cap_offsets(start, latest, 100)
    taken = {tp: end[tp] - start[tp] for tp in start}
    # The quiet partition takes all it has; the others split the rest evenly.
    assert taken == {("t", 0): 47, ("t", 1): 5, ("t", 2): 48}
    assert sum(cap_offsets(start, latest, 10**9)[tp] - start[tp] for tp in start) == 2005


def test_a_budget_smaller_than_the_partition_count_still_makes_progress() -> None:
    start = {("t", p): 0 for p in range(5)}
    latest = {("t", p): 10 for p in range(5)}
    end = start
    for _ in range(50):
        end = cap_offsets(end, latest, 1)
    assert end == latest


def test_plan_reports_offsets_deleted_before_they_were_read() -> None:
    with pytest.raises(DataLossError, match=r"t-1: expected to read from offset 3.*earliest.* 7"):
        plan_ranges({("t", 1): 3}, {("t", 1): 10}, {("t", 1): 7}, SETTINGS, None)
    tolerant = ReadSettings(FETCH, False, fail_on_data_loss=False, poll_timeout_ms=1000)
    [part] = plan_ranges({("t", 1): 3}, {("t", 1): 10}, {("t", 1): 7}, tolerant, None)
    assert (part.start, part.end) == (7, 10)
    assert plan_ranges({("t", 1): 3}, {("t", 1): 5}, {("t", 1): 7}, tolerant, None) == []


def test_plan_skips_empty_ranges_and_splits_for_min_partitions() -> None:
    start = {("t", 0): 0, ("t", 1): 50, ("u", 0): 0}
    end = {("t", 0): 300, ("t", 1): 50, ("u", 0): 100}
    earliest = dict.fromkeys(end, 0)
    plain = plan_ranges(start, end, earliest, SETTINGS, None)
    assert [(p.topic, p.partition, p.start, p.end) for p in plain] == [
        ("t", 0, 0, 300),
        ("u", 0, 0, 100),
    ]
    split = plan_ranges(start, end, earliest, SETTINGS, 4)
    assert [(p.topic, p.start, p.end) for p in split] == [
        ("t", 0, 100),
        ("t", 100, 200),
        ("t", 200, 300),
        ("u", 0, 100),
    ]


def test_plan_rejects_an_end_before_the_start() -> None:
    with pytest.raises(ValueError, match="before starting offset"):
        plan_ranges({("t", 0): 9}, {("t", 0): 4}, {("t", 0): 0}, SETTINGS, None)


def test_fetch_settings_come_from_the_kafka_options() -> None:
    fetch = FetchSettings.from_config({
        "bootstrap.servers": "PLAINTEXT://a:9092, [::1]:9093", "max.partition.fetch.bytes": "1024",
        "fetch.wait.max.ms": "50", "client.id": "me", "isolation.level": "read_committed"})
    assert fetch.bootstrap == (("a", 9092), ("::1", 9093))
    assert (fetch.partition_max_bytes, fetch.max_wait_ms, fetch.client_id) == (1024, 50, "me")
    assert fetch.isolation_level == READ_COMMITTED


def test_fetch_settings_take_their_tls_context_to_the_executors() -> None:
    """An SSL context cannot be pickled: tasks get the options and build their own."""
    fetch = FetchSettings.from_config({"bootstrap.servers": "a:1", "security.protocol": "SSL"})
    shipped = pickle.loads(pickle.dumps(fetch))
    assert shipped.security is not None and shipped.security.ssl_context is not None
    assert shipped.security_config == (("security.protocol", "SSL"),)


@pytest.mark.parametrize("config, problem", [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"},
     "sasl.mechanism GSSAPI: only"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
     "kafka.ssl.* options cannot be used"),
    ({"fetch.max.bytes": "lots"}, "fetch.max.bytes must be an integer"),
    ({"isolation.level": "serializable"}, "isolation.level"),
])
def test_fetch_settings_the_executors_cannot_honour_fail_at_planning(
        config: dict[str, str], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        FetchSettings.from_config({"bootstrap.servers": "a:1", **config})
