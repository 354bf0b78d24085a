"""Parse the data source options, named and interpreted as Spark's built-in Kafka source does.

Users move jobs between ``format("kafka")`` and ``format("gregor")`` by changing one word,
so option names, defaults, precedence and the batch/streaming restrictions follow Spark's
Kafka integration guide.  Parsing happens on the driver, where a bad option fails the
query before any task starts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from gregor.client.java_names import librdkafka_security
from gregor.spark.offsets import (
    EARLIEST,
    LATEST,
    Offsets,
    TopicPartition,
    parse_offsets_json,
)

KAFKA_PREFIX = "kafka."
DEFAULT_POLL_TIMEOUT_MS = 120_000
"""Spark's default for ``kafkaConsumer.pollTimeoutMs`` (``spark.network.timeout``)."""
DEFAULT_MAX_TRIGGER_DELAY = "15m"
"""Spark's default for ``maxTriggerDelay``."""
_TIME_UNITS_MS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000,
                  "h": 3_600_000, "d": 86_400_000}
"""Suffixes of Spark's time strings (``JavaUtils.timeStringAsMs``); none means ms."""
AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly-once"
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
"""Kafka's default ``transaction.max.timeout.ms``, the longest a broker accepts unless
configured otherwise: an exactly-once micro-batch's transactions must outlive a crashed
driver until the query restarts and commits them."""
DEFAULT_FETCH_OFFSET_RETRIES = 3
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 1000
"""Spark's defaults for ``fetchOffset.numRetries`` and ``fetchOffset.retryIntervalMs``."""
REFUSED_CLIENT_CONFIG = {
    "auto.offset.reset": ": set the source option 'startingOffsets' to 'earliest' or 'latest' "
    "instead (it applies when a query starts; a restarted query resumes from its checkpoint)",
    "enable.auto.commit": ": the checkpoint, not a consumer group, holds a query's progress",
    "interceptor.classes": ": interceptors could change the records",
    "key.deserializer": ": keys are read as bytes; deserialize them with DataFrame operations",
    "value.deserializer": ": values are read as bytes; deserialize them with DataFrame operations",
}
"""Consumer settings Spark's Kafka source refuses, because the source, not the consumer,
decides what is read and how (KafkaSourceProvider's messages, in short)."""
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
"""Topics a Java consumer leaves out of pattern subscriptions (``exclude.internal.topics``)."""


@dataclass(frozen=True)
class EarliestOrLatest:
    """Every partition starts or ends at its log start (``EARLIEST``) or end (``LATEST``)."""

    marker: int


@dataclass(frozen=True)
class SpecificOffsets:
    """Per-partition offsets; a value may be ``EARLIEST`` (-2) or ``LATEST`` (-1)."""

    offsets: Offsets


@dataclass(frozen=True)
class AtTimestamp:
    """Every partition at the first record whose timestamp is >= ``timestamp_ms``."""

    timestamp_ms: int


@dataclass(frozen=True)
class SpecificTimestamps:
    """Per-partition timestamps in milliseconds."""

    timestamps: Offsets


OffsetBound = EarliestOrLatest | SpecificOffsets | AtTimestamp | SpecificTimestamps


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions a query reads: exactly one of Spark's three ways to say it."""

    topics: frozenset[str] = frozenset()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def select(self, partition_counts: Mapping[str, int]) -> list[TopicPartition]:
        """The subscribed partitions, given the partition count of every topic in metadata.

        A pattern selects the topics it is found in, not only those it matches whole:
        Spark's Kafka source (its SubscribePatternStrategy, ``findFirstIn``) selects
        ``orders-eu`` for ``orders``; anchor it (``^orders$``) for one topic.  Assigned
        partitions are those of them that exist, as in Spark (AssignStrategy): one created
        later is picked up by a stream when it appears.
        """
        if self.assigned:
            return sorted((t, p) for t, p in self.assigned if p < partition_counts.get(t, 0))
        if self.pattern is not None:
            regex = re.compile(self.pattern)
            names = [t for t in partition_counts if t not in INTERNAL_TOPICS and regex.search(t)]
        else:
            names = [t for t in partition_counts if t in self.topics]
        return sorted((t, p) for t in names for p in range(partition_counts[t]))


@dataclass(frozen=True)
class SourceOptions:
    """Everything the readers need, parsed once on the driver."""

    client_config: dict[str, str]
    subscription: Subscription
    starting: OffsetBound
    ending: OffsetBound
    fail_if_no_timestamp_match: bool
    include_headers: bool
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    poll_timeout_ms: int
    max_records_per_partition: int | None = None
    fetch_offset_num_retries: int = DEFAULT_FETCH_OFFSET_RETRIES
    fetch_offset_retry_interval_ms: int = DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS


@dataclass(frozen=True)
class SinkOptions:
    """Everything the writers need; ``topic`` overrides a ``topic`` column, as in Spark."""

    client_config: dict[str, str]
    topic: str | None
    exactly_once: bool = False
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """Client configuration: every ``kafka.``-prefixed option with the prefix removed (for
    librdkafka on the driver and in the sink, and the executors' Fetch settings).

    ``bootstrap.servers`` is also accepted unprefixed, because that is how every other
    Kafka client spells it. Security settings may be librdkafka's or, as Spark's Kafka
    source takes them, the Java client's (``kafka.sasl.jaas.config``,
    ``kafka.ssl.truststore.location``), which are renamed to librdkafka's here
    (:func:`gregor.client.java_names.librdkafka_security`).
    """
    config = {
        key[len(KAFKA_PREFIX) :]: value
        for key, value in options.items()
        if key.lower().startswith(KAFKA_PREFIX)
    }
    if "bootstrap.servers" not in config and options.get("bootstrap.servers"):
        config["bootstrap.servers"] = options["bootstrap.servers"]
    if not config.get("bootstrap.servers"):
        raise ValueError("option 'kafka.bootstrap.servers' is required")
    return librdkafka_security(config)


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate and interpret the read options for a batch or streaming query."""
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if options.get(name) is not None:
                raise ValueError(f"option {name!r} is not valid for streaming queries")
    starting = _offset_bound(
        options,
        "starting",
        default=EarliestOrLatest(LATEST if streaming else EARLIEST),
        forbidden=None if streaming else LATEST,
    )
    ending = (
        EarliestOrLatest(LATEST)
        if streaming
        else _offset_bound(options, "ending", default=EarliestOrLatest(LATEST), forbidden=EARLIEST)
    )
    strategy = options.get("startingOffsetsByTimestampStrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise ValueError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {strategy!r}"
        )
    config = client_config(options)
    for name, why in sorted(REFUSED_CLIENT_CONFIG.items()):
        if name in config:
            raise ValueError(f"Kafka option {KAFKA_PREFIX + name!r} is not supported{why}")
    subscription = _subscription(options)
    max_offsets = _positive_int(options, "maxOffsetsPerTrigger")
    min_offsets = _positive_int(options, "minOffsetsPerTrigger")
    if min_offsets and max_offsets and min_offsets > max_offsets:
        raise ValueError(f"option 'minOffsetsPerTrigger' ({min_offsets}) is higher than "
                         f"option 'maxOffsetsPerTrigger' ({max_offsets})")
    return SourceOptions(
        client_config=config,
        subscription=subscription,
        starting=starting,
        ending=ending,
        fail_if_no_timestamp_match=strategy == "error",
        include_headers=_bool(options, "includeHeaders", default=False),
        fail_on_data_loss=_bool(options, "failOnDataLoss", default=True),
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=_duration_ms(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY),
        min_partitions=_positive_int(options, "minPartitions"),
        poll_timeout_ms=_positive_int(options, "kafkaConsumer.pollTimeoutMs")
        or DEFAULT_POLL_TIMEOUT_MS,
        max_records_per_partition=_positive_int(options, "maxRecordsPerPartition"),
        fetch_offset_num_retries=_positive_int(options, "fetchOffset.numRetries")
        or DEFAULT_FETCH_OFFSET_RETRIES,
        fetch_offset_retry_interval_ms=_positive_int(options, "fetchOffset.retryIntervalMs")
        or DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS,
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate and interpret the write options.

    ``deliveryGuarantee`` is named and valued as in Flink's Kafka sink, whose two-phase
    commit the exactly-once mode follows (Spark's Kafka sink has no such option): the
    default ``at-least-once`` is Spark's behaviour.  ``kafka.transaction.timeout.ms`` is
    the Kafka producer's setting of that name.
    """
    guarantee = (options.get("deliveryGuarantee") or AT_LEAST_ONCE).strip().lower()
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise ValueError(f"option 'deliveryGuarantee' must be {AT_LEAST_ONCE!r} or "
                         f"{EXACTLY_ONCE!r}, got {options['deliveryGuarantee']!r}")
    config = client_config(options)
    return SinkOptions(
        client_config=config,
        topic=options.get("topic") or None,
        exactly_once=guarantee == EXACTLY_ONCE,
        transaction_timeout_ms=_positive_int(config, "transaction.timeout.ms")
        or DEFAULT_TRANSACTION_TIMEOUT_MS,
    )


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = {
        name: options[name] for name in ("subscribe", "subscribePattern", "assign")
        if options.get(name) is not None
    }
    if len(given) != 1:
        raise ValueError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' "
            f"must be given, got {sorted(given) or 'none'}"
        )
    ((name, value),) = given.items()
    if name == "subscribe":
        topics = frozenset(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ValueError("option 'subscribe' names no topic")
        return Subscription(topics=topics)
    if name == "subscribePattern":
        if not value.strip():
            raise ValueError("option 'subscribePattern' names no pattern")
        try:
            re.compile(value.strip())
        except re.error as exc:
            raise ValueError(f"option 'subscribePattern': invalid regex {value!r}: {exc}") from exc
        return Subscription(pattern=value.strip())
    return Subscription(assigned=_assignment(value))


def _assignment(text: str) -> tuple[TopicPartition, ...]:
    try:
        parsed = json.loads(text)
        assigned = tuple(
            (topic, int(partition))
            for topic, partitions in parsed.items()
            for partition in partitions
        )
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError) as exc:
        raise ValueError(
            f"option 'assign' must look like {{\"topic\": [0, 1]}}, got {text!r}"
        ) from exc
    if not assigned:
        raise ValueError("option 'assign' names no partition")
    return assigned


def _offset_bound(
    options: Mapping[str, str], side: str, *, default: OffsetBound, forbidden: int | None
) -> OffsetBound:
    """``startingX``/``endingX`` options with Spark's precedence: the global timestamp
    first, then per-partition timestamps, then offsets."""
    timestamp = options.get(f"{side}Timestamp")
    if timestamp is not None:
        return AtTimestamp(_non_negative(f"{side}Timestamp", timestamp))
    by_timestamp = options.get(f"{side}OffsetsByTimestamp")
    if by_timestamp is not None:
        name = f"{side}OffsetsByTimestamp"
        timestamps = parse_offsets_json(by_timestamp, name)
        for value in timestamps.values():
            _non_negative(name, str(value))
        return SpecificTimestamps(timestamps)
    name = f"{side}Offsets"
    text = options.get(name)
    if text is None:
        return default
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        bound = EarliestOrLatest(EARLIEST if word == "earliest" else LATEST)
        if bound.marker == forbidden:
            raise ValueError(f"option {name!r}: {word!r} is not valid for batch queries")
        return bound
    offsets = parse_offsets_json(text, name)
    for tp, offset in offsets.items():
        if offset < EARLIEST or offset == forbidden:
            raise ValueError(f"option {name!r}: offset {offset} for {tp} is not valid here")
    return SpecificOffsets(offsets)


def _bool(options: Mapping[str, str], name: str, *, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"option {name!r} must be 'true' or 'false', got {value!r}")
    return lowered == "true"


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError(f"option {name!r} must be a positive integer, got {value!r}")
    return number


def _duration_ms(options: Mapping[str, str], name: str, default: str) -> int:
    """A Spark time string such as ``15m``, ``30s`` or ``500`` (milliseconds)."""
    value = options.get(name) or default
    found = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", value.lower())
    if found is None or found.group(2) not in ("", *_TIME_UNITS_MS):
        raise ValueError(f"option {name!r} must be a duration such as 15m, 30s or 500ms, "
                         f"got {value!r}")
    return int(found.group(1)) * _TIME_UNITS_MS.get(found.group(2), 1)


def _non_negative(name: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise ValueError(f"option {name!r} must be a timestamp in ms >= 0, got {value!r}")
    return number
