"""Reading topics as streams of JSON events and writing JSON rows back, through the
``gregor`` connector: the plumbing every pipeline shares."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.types import StructType


def read_stream(
    spark: SparkSession, bootstrap: str, topics: list[str], max_offsets_per_trigger: int | None
) -> DataFrame:
    """The Kafka-schema stream of ``topics`` from the earliest offset: a pipeline started
    on a fresh checkpoint processes what is already in its topics."""
    reader = (
        spark.readStream.format("gregor")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


def parse_json(df: DataFrame, schema: StructType) -> DataFrame:
    """The JSON fields of the record values as columns, plus ``topic`` and ``event_time``
    (from the ``ts`` field, epoch milliseconds)."""
    parsed = df.select("topic", F.from_json(F.col("value").cast("string"), schema).alias("e"))
    return parsed.select("topic", "e.*").withColumn("event_time", F.timestamp_millis("ts"))


def as_records(df: DataFrame, key: Column) -> DataFrame:
    """Every column as one JSON value, keyed by ``key``: the sink's ``key``/``value``."""
    value = F.to_json(F.struct(*df.columns))
    return df.select(key.cast("string").alias("key"), value.alias("value"))


def write_json(df: DataFrame, bootstrap: str, topic: str, key: Column) -> None:
    """Append the rows of a batch DataFrame to ``topic`` as JSON records.

    Used from foreachBatch: a micro-batch replayed after a failure writes its records
    again, so delivery is at-least-once, as with Spark's Kafka sink.
    """
    _append(as_records(df, key), bootstrap, topic)


def write_avro(df: DataFrame, bootstrap: str, topic: str, key: Column, registry_url: str,
               subject: str) -> None:
    """Append the rows of a batch DataFrame to ``topic`` as Avro records in Confluent's
    framing, written with ``subject``'s latest schema (its fields the columns' names),
    keyed by ``key`` as text; at-least-once, as :func:`write_json`."""
    from gregor.spark.confluent_avro import to_confluent_avro

    value = to_confluent_avro(F.struct(*df.columns), registry_url, subject)
    _append(df.select(key.cast("string").alias("key"), value.alias("value")), bootstrap, topic)


def _append(records: DataFrame, bootstrap: str, topic: str) -> None:
    (
        records.write.format("gregor")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .mode("append")
        .save()
    )


def with_trigger(writer: DataStreamWriter, available_now: bool) -> DataStreamWriter:
    """``available_now``: process what the topics hold now, then stop (Spark's
    ``trigger(availableNow=True)``); otherwise micro-batches run until the query is stopped."""
    return writer.trigger(availableNow=True) if available_now else writer


def ensure_topics(bootstrap: str, topics: Iterable[str]) -> None:
    """Create the output topics that do not exist yet, with the broker's default
    partitions and configs.

    Outputs otherwise appear with their first record, and some may have none for a long
    time (``monitoring-alerts`` while nothing is lost, ``reorders`` while stock is high):
    ``gregor consume`` and other clients refuse an unknown topic, so a user watching an
    output as soon as the pipeline starts would get an error instead of waiting.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic) for topic in topics], request_timeout=30)
    for future in futures.values():
        try:
            future.result(60)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
