"""How every pipeline reads its input topics and writes its output topics.

All pipelines share one set of settings (:class:`StreamSettings`): where the brokers
are, where checkpoints go, the trigger, and a topic prefix that lets several copies of
the pipelines (or tests) share a cluster.  Output records are JSON with the event times
in UTC, keyed so that everything about one product, page or user lands in one
partition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from gregor.spark.pipelines.event_time import JSON_TIMESTAMP_FORMAT

DEFAULT_PARTITIONS = 3
TOPIC_CREATION_TIMEOUT_S = 30.0
JSON_OPTIONS = {"timestampFormat": JSON_TIMESTAMP_FORMAT, "timeZone": "UTC"}
"""``to_json``/``from_json`` options: ISO times in UTC whatever the session time zone."""


@dataclass(frozen=True)
class StreamSettings:
    bootstrap_servers: str
    checkpoint: Path
    """Each query of a pipeline checkpoints in its own sub-directory of this one."""
    available_now: bool = False
    """Process what is in the topics now, then stop (``trigger(availableNow=True)``)."""
    trigger_seconds: float = 5.0
    topic_prefix: str = ""
    starting_offsets: str = "earliest"
    """Where a query starts the first time; afterwards its checkpoint decides."""
    fail_on_data_loss: bool = True
    client_config: Mapping[str, str] = field(default_factory=dict)
    """Extra librdkafka properties for every client (the ``kafka.`` options)."""

    def topic(self, name: str) -> str:
        return self.topic_prefix + name

    def kafka_options(self) -> dict[str, str]:
        options = {f"kafka.{name}": value for name, value in self.client_config.items()}
        return {**options, "kafka.bootstrap.servers": self.bootstrap_servers}


def ensure_topics(settings: StreamSettings, names: list[str]) -> None:
    """Create the pipeline's topics that do not exist yet, so that a pipeline can start
    before its generator (and its outputs exist before anyone subscribes to them)."""
    config = {**settings.client_config, "bootstrap.servers": settings.bootstrap_servers}
    create_missing_topics(config, [settings.topic(n) for n in names])


def create_missing_topics(client_config: Mapping[str, Any], topics: list[str]) -> None:
    """Create ``topics`` with ``DEFAULT_PARTITIONS`` each unless they exist."""
    admin = AdminClient(dict(client_config))
    wanted = [NewTopic(topic, DEFAULT_PARTITIONS) for topic in topics]
    for future in admin.create_topics(wanted).values():
        try:
            future.result(TOPIC_CREATION_TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def read_topics(
    spark: SparkSession, settings: StreamSettings, names: list[str], **options: str
) -> DataFrame:
    """A streaming DataFrame of the named topics, in Spark's Kafka source schema;
    ``options`` are further source options."""
    return (
        spark.readStream.format("gregor")
        .options(**settings.kafka_options())
        .option("subscribe", ",".join(settings.topic(n) for n in names))
        .option("startingOffsets", settings.starting_offsets)
        .option("failOnDataLoss", str(settings.fail_on_data_loss).lower())
        .options(**options)
        .load()
    )


def parse_json(records: DataFrame, schema: str) -> DataFrame:
    """The fields of each record's JSON value, plus the record's topic and timestamp.

    Records that are not JSON objects come out with null fields; each pipeline drops
    the rows it cannot use.
    """
    value = F.from_json(F.col("value").cast("string"), schema, JSON_OPTIONS)
    return records.select(value.alias("event"), "topic", "timestamp").select(
        "event.*", "topic", F.col("timestamp").alias("record_timestamp")
    )


def json_value(*columns: Column | str) -> Column:
    return F.to_json(F.struct(*columns), JSON_OPTIONS)


def write_topic(
    records: DataFrame, settings: StreamSettings, query_name: str, output_mode: str = "append"
) -> StreamingQuery:
    """Start a query producing ``records`` (columns ``topic``, ``key``, ``value``).

    Delivery is at-least-once, as with Spark's Kafka sink: a micro-batch that fails or is
    interrupted after some records were produced is produced again from the checkpoint.
    Every output record carries an id that is the same on such a replay, so consumers
    that must not see duplicates can drop them.
    """
    writer = (
        records.writeStream.format("gregor")
        .options(**settings.kafka_options())
        .queryName(settings.topic(query_name))
        .outputMode(output_mode)
    )
    return with_trigger(writer, settings, query_name).start()


def with_trigger(
    writer: DataStreamWriter, settings: StreamSettings, query_name: str
) -> DataStreamWriter:
    """The checkpoint and trigger every pipeline query uses."""
    writer = writer.option("checkpointLocation", str(settings.checkpoint / query_name))
    if settings.available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{settings.trigger_seconds} seconds")
