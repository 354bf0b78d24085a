"""Offset maps and their JSON form, shared by option parsing and the stream reader.

Spark stores a streaming source's offsets in the checkpoint as JSON text and decides
whether a micro-batch has new data by comparing that text.  Every offset map that
leaves this package therefore goes through :func:`offsets_to_json`, which always
orders topics by name and partitions by number, so equal maps give equal text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

TopicPartition = tuple[str, int]
"""A ``(topic, partition)`` pair; hashable and picklable, unlike confluent_kafka's."""

Offsets = dict[TopicPartition, int]
"""Offset (or timestamp) per topic-partition."""

EARLIEST = -2
"""Kafka's (and Spark's JSON option) marker for "the log start offset"."""
LATEST = -1
"""Kafka's (and Spark's JSON option) marker for "the log end offset"."""


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Nested ``{topic: {"partition": offset}}`` dict in a stable key order."""
    nested: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        nested.setdefault(topic, {})[str(partition)] = offsets[(topic, partition)]
    return nested


def offsets_from_json(nested: Mapping[str, Mapping[str, int]]) -> Offsets:
    """Inverse of :func:`offsets_to_json`; validates shape so bad user JSON fails clearly."""
    if not isinstance(nested, Mapping):
        raise ValueError(f"expected a JSON object of topics, got {nested!r}")
    offsets: Offsets = {}
    for topic, partitions in nested.items():
        if not isinstance(partitions, Mapping):
            raise ValueError(f"expected a JSON object of partitions for topic {topic!r}")
        for partition, value in partitions.items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"offset for {topic}-{partition} must be an integer: {value!r}")
            offsets[(topic, int(partition))] = value
    return offsets


def parse_offsets_json(text: str, option: str) -> Offsets:
    """Parse a per-partition option such as ``{"t": {"0": 23, "1": -2}}``."""
    try:
        return offsets_from_json(json.loads(text))
    except (json.JSONDecodeError, ValueError) as exc:
        raise ValueError(f"option {option!r}: invalid per-partition JSON {text!r}: {exc}") from exc


def describe(tp: TopicPartition) -> str:
    """Kafka's usual ``topic-partition`` spelling, for error messages."""
    return f"{tp[0]}-{tp[1]}"
