"""``minOffsetsPerTrigger`` and ``maxTriggerDelay``: the stream reader's planning calls
against a real broker, as Spark's planner process makes them, with a clock the test
moves instead of waiting."""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.spark.options import parse_source_options
from gregor.spark.stream_reader import GregorStreamReader


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, b"v", partition=i % 2)
    assert producer.flush(30) == 0


def test_triggers_wait_for_min_offsets_or_max_trigger_delay(broker: Any) -> None:
    topic = f"min-offsets-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    options = parse_source_options({
        "kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
        "startingOffsets": "earliest", "minOffsetsPerTrigger": "10",
        "maxTriggerDelay": "1m"}, streaming=True)
    clock = Clock()
    reader = GregorStreamReader(options, clock)
    limit = reader.getDefaultReadLimit()
    start = reader.initialOffset()
    produce(broker.bootstrap, topic, 4)

    first = reader.latestOffset(start, limit)  # a run's first trigger is never held
    assert first == {topic: {"0": 2, "1": 2}}
    produce(broker.bootstrap, topic, 6)
    clock.now += 59
    assert reader.latestOffset(first, limit) == first  # 6 new offsets < 10, 59 s < 1 min
    clock.now += 1
    second = reader.latestOffset(first, limit)  # a minute since the last micro-batch
    assert second == {topic: {"0": 5, "1": 5}}
    produce(broker.bootstrap, topic, 10)
    third = reader.latestOffset(second, limit)  # 10 new offsets
    assert third == {topic: {"0": 10, "1": 10}}

    # availableNow reads what there is, however little: waiting could never end.
    produce(broker.bootstrap, topic, 2)
    reader.prepareForTriggerAvailableNow()
    assert reader.latestOffset(third, limit) == {topic: {"0": 11, "1": 11}}
