"""Confluent-framed Avro and JSON Schema values read from a topic through the ``gregor``
source into typed columns (Avro values written by confluent-kafka's AvroSerializer with
two versions of a schema come out in the shape of the latest), and typed columns
written through the ``gregor`` sink as values confluent-kafka's deserializers read."""

from __future__ import annotations

import datetime
import decimal
import io
import json
from pathlib import Path

import fastavro.schema
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.functions import col

from gregor.broker.process import BrokerProcess
from gregor.schemas.process import RegistryProcess
from gregor.spark.confluent_avro import from_confluent_avro, spark_type, to_confluent_avro
from gregor.spark.confluent_json import from_confluent_json, to_confluent_json

JVM_DECODER_NAME = "gregor_from_confluent_avro"
JVM_ENCODER_NAME = "gregor_to_confluent_avro"

V1 = {"type": "record", "name": "Sale", "fields": [
    {"name": "sku", "type": "string"},
    {"name": "quantity", "type": "int"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                               "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}}]}
V2 = {**V1, "fields": [*V1["fields"],
                       {"name": "note", "type": ["null", "string"], "default": None}]}


def test_spark_types_of_avro() -> None:
    struct = spark_type(fastavro.schema.parse_schema(V2))
    assert struct == T.StructType([
        T.StructField("sku", T.StringType()),
        T.StructField("quantity", T.IntegerType()),
        T.StructField("price", T.DecimalType(9, 2)),
        T.StructField("day", T.DateType()),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField("note", T.StringType())])


@pytest.mark.parametrize("jvm", [True, False], ids=["jvm", "python"])
def test_framed_values_become_typed_columns(spark: SparkSession, broker: BrokerProcess,
                                            registry: RegistryProcess, topic_name: str,
                                            jvm: bool) -> None:
    """Both decoding paths: the JVM's (gregor's jar) and the Python one (Arrow batches
    decoded as columns), which sessions without the jar use."""
    client = SchemaRegistryClient({"url": registry.url})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    context = SerializationContext(topic_name, MessageField.VALUE)
    day = datetime.date(2026, 11, 28)
    old = {"sku": "a-1", "quantity": 2, "price": decimal.Decimal("9.50"), "day": day,
           "tags": ["gift"]}
    producer.produce(topic_name, value=AvroSerializer(client, json.dumps(V1))(old, context))
    producer.produce(topic_name, value=AvroSerializer(client, json.dumps(V2))(
        {**old, "sku": "b-2", "tags": [], "note": "late"}, context))
    producer.produce(topic_name, value=b"not framed")
    assert producer.flush(20) == 0

    frame = (spark.read.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic_name).load()
             .select(from_confluent_avro(col("value"), registry.url, f"{topic_name}-value",
                                         jvm=jvm).alias("sale"))
             .select("sale.*"))
    rows = [row.asDict(recursive=True) for row in frame.collect()]
    assert rows[:2] == [
        {**old, "note": None},  # written with v1: the field v2 added takes its default
        {**old, "sku": "b-2", "tags": [], "note": "late"}]
    assert rows[2] == dict.fromkeys(rows[0])


ADDRESS = {"type": "record", "name": "Address", "namespace": "shop",
           "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "string"}]}
CUSTOMER = {"type": "record", "name": "Customer", "namespace": "shop",
            "fields": [{"name": "name", "type": "string"},
                       {"name": "home", "type": "shop.Address"},
                       {"name": "since", "type": {"type": "long",
                                                  "logicalType": "timestamp-millis"}},
                       {"name": "visits", "type": {"type": "map", "values": "int"}}]}


def test_a_schema_with_references_reads_in_the_jvm(spark: SparkSession, broker: BrokerProcess,
                                                   registry: RegistryProcess,
                                                   topic_name: str) -> None:
    """A value schema that references another subject's (Confluent's schema references)
    decodes with it, in the JVM (gregor's jar is on the test session's classpath): the
    plan calls the JVM decoder, not a Python UDF."""
    client = SchemaRegistryClient({"url": registry.url})
    client.register_schema(f"{topic_name}-address", Schema(json.dumps(ADDRESS), "AVRO"))
    reference = SchemaReference("shop.Address", f"{topic_name}-address", 1)
    customer = Schema(json.dumps(CUSTOMER), "AVRO", [reference])
    client.register_schema(f"{topic_name}-value", customer)
    serialize = AvroSerializer(client, customer, conf={"auto.register.schemas": False,
                                                       "use.latest.version": True})
    since = datetime.datetime(2026, 11, 29, 3, 0, tzinfo=datetime.UTC)
    value = {"name": "Ada", "home": {"city": "Lyon", "zip": "69001"}, "since": since,
             "visits": {"shop-1": 3}}
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic_name, value=serialize(
        value, SerializationContext(topic_name, MessageField.VALUE)))
    assert producer.flush(20) == 0

    frame = (spark.read.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic_name).load()
             .select(from_confluent_avro("value", registry.url, f"{topic_name}-value")
                     .alias("c"))
             .select("c.*"))
    assert JVM_DECODER_NAME in frame._jdf.queryExecution().analyzed().toString()
    [row] = frame.collect()
    got = row.asDict(recursive=True)
    assert got["since"].astimezone(datetime.UTC) == since
    assert {**got, "since": since} == value


@pytest.mark.parametrize("jvm", [True, False], ids=["jvm", "python"])
def test_typed_columns_become_framed_values(spark: SparkSession, broker: BrokerProcess,
                                            registry: RegistryProcess, topic_name: str,
                                            jvm: bool) -> None:
    """Both encoding paths: Apache Avro's writer in the JVM (the plan calls it) and
    fastavro in a pandas UDF."""
    client = SchemaRegistryClient({"url": registry.url})
    subject = f"{topic_name}-value"
    schema_id = client.register_schema(subject, Schema(json.dumps(V2), "AVRO"))
    sales = [("c-3", 5, decimal.Decimal("1.25"), datetime.date(2026, 1, 2), ["x", "y"], None),
             ("d-4", 1, decimal.Decimal("100.00"), datetime.date(2026, 2, 3), [], "n")]
    frame = spark.createDataFrame(sales, "sku STRING, quantity INT, price DECIMAL(9,2), "
                                         "day DATE, tags ARRAY<STRING>, note STRING")
    framed = (frame.selectExpr("struct(*) AS sale")
              .select(to_confluent_avro(col("sale"), registry.url, subject, jvm=jvm)
                      .alias("value")))
    analyzed = framed._jdf.queryExecution().analyzed().toString()
    assert (JVM_ENCODER_NAME in analyzed) == jvm
    (framed.write.format("gregor").mode("append")
     .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic_name).save())

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic_name])
    deserialize = AvroDeserializer(client)
    context = SerializationContext(topic_name, MessageField.VALUE)
    got = []
    try:
        while len(got) < len(sales):
            message = consumer.poll(20)
            assert message is not None and message.error() is None
            assert message.value()[1:5] == schema_id.to_bytes(4, "big")
            got.append(deserialize(message.value(), context))
    finally:
        consumer.close()
    names = ["sku", "quantity", "price", "day", "tags", "note"]
    assert sorted(got, key=lambda r: r["sku"]) == [dict(zip(names, s, strict=True))
                                                   for s in sales]


ORDER_JSON = {"type": "object", "properties": {
    "id": {"type": "integer"}, "total": {"type": "number"},
    "items": {"type": "array", "items": {"type": "string"}},
    "shipping": {"type": "object", "properties": {"city": {"type": "string"}}},
    "note": {"type": ["null", "string"]}}}


def test_json_schema_values_both_ways(spark: SparkSession, broker: BrokerProcess,
                                      registry: RegistryProcess, topic_name: str) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    subject = f"{topic_name}-value"
    orders = [{"id": 1, "total": 9.5, "items": ["a"], "shipping": {"city": "Graz"},
               "note": None},
              {"id": 2, "total": 20.0, "items": [], "shipping": {"city": "Wien"},
               "note": "gift"}]
    serialize = JSONSerializer(json.dumps(ORDER_JSON), client)
    context = SerializationContext(topic_name, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for order in orders:
        producer.produce(topic_name, value=serialize(order, context))
    assert producer.flush(20) == 0

    typed = (spark.read.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic_name).load()
             .select(from_confluent_json(col("value"), registry.url, subject).alias("o"))
             .select("o.*"))
    rows = sorted((row.asDict(recursive=True) for row in typed.collect()),
                  key=lambda r: r["id"])
    assert rows == orders

    copy = f"{topic_name}-copy"
    client.register_schema(f"{copy}-value", Schema(json.dumps(ORDER_JSON), "JSON"))
    (typed.selectExpr("struct(*) AS o")
     .select(to_confluent_json(col("o"), registry.url, f"{copy}-value").alias("value"))
     .write.format("gregor").mode("append")
     .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", copy).save())
    deserialize = JSONDeserializer(json.dumps(ORDER_JSON), schema_registry_client=client)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": copy,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([copy])
    back = []
    try:
        while len(back) < len(orders):
            message = consumer.poll(20)
            assert message is not None and message.error() is None
            back.append(deserialize(message.value(), SerializationContext(
                copy, MessageField.VALUE)))
    finally:
        consumer.close()
    # Spark's to_json leaves null fields out, which the schema allows.
    assert sorted(back, key=lambda r: r["id"]) == [
        {k: v for k, v in order.items() if v is not None} for order in orders]


def test_avro_in_the_jvm_inside_foreach_batch(spark: SparkSession, broker: BrokerProcess,
                                              registry: RegistryProcess, topic_name: str,
                                              tmp_path: Path) -> None:
    """foreachBatch's batches belong to the stream's own clone of the session, whose
    catalog does not see functions registered in the one that started the query: the
    JVM decoder and encoder are column expressions, and by default (the jar is there)
    both run in the JVM there, as the monitoring pipeline's Avro output does."""
    client = SchemaRegistryClient({"url": registry.url})
    subject = f"{topic_name}-value"
    client.register_schema(subject, Schema(json.dumps(V2), "AVRO"))
    sale = {"sku": "e-5", "quantity": 3, "price": decimal.Decimal("4.20"),
            "day": datetime.date(2026, 3, 4), "tags": ["z"], "note": "n"}
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    context = SerializationContext(topic_name, MessageField.VALUE)
    producer.produce(topic_name, value=AvroSerializer(client, json.dumps(V2))(sale, context))
    assert producer.flush(20) == 0
    copy = f"{topic_name}-copy"
    client.register_schema(f"{copy}-value", Schema(json.dumps(V2), "AVRO"))
    plans: list[str] = []

    def each_batch(batch: DataFrame, batch_id: int) -> None:
        typed = batch.select(from_confluent_avro("value", registry.url, subject).alias("s"))
        framed = typed.select(to_confluent_avro("s", registry.url, f"{copy}-value")
                              .alias("value"))
        plans.append(framed._jdf.queryExecution().analyzed().toString())
        (framed.write.format("gregor").mode("append")
         .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", copy).save())

    query = (spark.readStream.format("gregor")
             .option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic_name).option("startingOffsets", "earliest").load()
             .writeStream.foreachBatch(each_batch).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert plans and all(JVM_DECODER_NAME in plan and JVM_ENCODER_NAME in plan
                         for plan in plans)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": copy,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([copy])
    try:
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        assert AvroDeserializer(client)(message.value(), SerializationContext(
            copy, MessageField.VALUE)) == sale
    finally:
        consumer.close()


WRITTEN = {"type": "record", "name": "Item", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"},
    {"name": "gone", "type": {"type": "record", "name": "Gone", "fields": [
        {"name": "a", "type": {"type": "array", "items": "long"}},
        {"name": "b", "type": {"type": "map", "values": ["null", "string"]}},
        {"name": "c", "type": {"type": "fixed", "name": "Three", "size": 3}},
        {"name": "d", "type": "double"}, {"name": "e", "type": "float"},
        {"name": "f", "type": "boolean"}]}},
    {"name": "name", "type": "string"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 4}},
    {"name": "ratio", "type": "float"},
    {"name": "big", "type": "long"},
    {"name": "flag", "type": "boolean"},
    {"name": "when", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "amount", "type": {"type": "fixed", "name": "Amount", "size": 9,
                                "logicalType": "decimal", "precision": 20, "scale": 3}},
    {"name": "small", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6,
                               "scale": 2}},
    {"name": "maybe", "type": ["null", "int"]},
    {"name": "tags", "type": {"type": "map", "values": ["null", "string"]}},
    {"name": "parts", "type": {"type": "array", "items": {
        "type": "record", "name": "Part",
        "fields": [{"name": "n", "type": "int"}, {"name": "w", "type": "double"}]}}},
    {"name": "blob", "type": "string"}]}
_WRITTEN_FIELDS = {field["name"]: field for field in WRITTEN["fields"]}
READ = {**WRITTEN, "fields": [
    _WRITTEN_FIELDS["name"],
    {"name": "id", "type": "long"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["C", "B", "A", "D"]}},
    _WRITTEN_FIELDS["code"],
    {"name": "ratio", "type": "double"},
    {"name": "big", "type": "double"},
    *(_WRITTEN_FIELDS[name] for name in ("flag", "when", "amount", "small")),
    {"name": "maybe", "type": ["null", "long"]},
    _WRITTEN_FIELDS["tags"],
    {"name": "parts", "type": {"type": "array", "items": {
        "type": "record", "name": "Part",
        "fields": [{"name": "w", "type": "double"}, {"name": "n", "type": "long"},
                   {"name": "label", "type": "string", "default": "x"}]}}},
    {"name": "blob", "type": "bytes"},
    {"name": "extra", "type": {"type": "record", "name": "Extra", "fields": [
        {"name": "q", "type": "int"}, {"name": "s", "type": "string"}]},
     "default": {"q": 7, "s": "seven"}},
    {"name": "level", "type": "int", "default": 3},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "weights", "type": {"type": "array", "items": "double"}, "default": [1.5, 2.5]}]}


def _items() -> list[dict[str, object]]:
    when = datetime.datetime(2026, 11, 29, 18, 30, 1, 234567, tzinfo=datetime.UTC)
    gone = {"a": [1, -2], "b": {"k": None, "l": "v"}, "c": b"abc", "d": 0.5, "e": 1.25,
            "f": True}
    return [
        {"id": 1, "gone": gone, "name": "first", "kind": "A", "code": b"\x00\x01\x02\xff",
         "ratio": 0.1, "big": 2**53 + 1, "flag": True, "when": when,
         "amount": decimal.Decimal("12345678901234567.891"),
         "small": decimal.Decimal("-12.34"), "maybe": None, "tags": {"x": None, "y": "z"},
         "parts": [{"n": 1, "w": 0.5}, {"n": -2, "w": -1e300}], "blob": "é"},
        {"id": -7, "gone": {**gone, "a": [], "b": {}}, "name": "", "kind": "C",
         "code": b"abcd", "ratio": -3.5, "big": -1, "flag": False,
         "when": when - datetime.timedelta(days=20000), "amount": decimal.Decimal("-0.001"),
         "small": decimal.Decimal("9999.99"), "maybe": 2**31 - 1, "tags": {}, "parts": [],
         "blob": ""}]


def _comparable(value: object) -> object:
    """A decoded value as fastavro's and Spark's both become: bytes, aware datetimes."""
    if isinstance(value, dict):
        return {key: _comparable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_comparable(item) for item in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC)
    return value


@pytest.mark.parametrize("jvm", [True, False], ids=["jvm", "python"])
def test_schema_resolution_reads_as_fastavro_does(spark: SparkSession, broker: BrokerProcess,
                                                 registry: RegistryProcess, topic_name: str,
                                                 jvm: bool) -> None:
    """Values written with one schema and read with a later one that drops a field of
    every kind, reorders fields and enum symbols, promotes int, long, float and string,
    and adds fields with defaults of every kind (a record, an array, null, an int) read as
    fastavro's own schema resolution reads them, and so do values written with the later
    schema itself: decimals past 18 digits and negative ones, timestamps in microseconds,
    maps and arrays of nullable values and of records included."""
    client = SchemaRegistryClient({"url": registry.url})
    subject = f"{topic_name}-value"
    written_id = client.register_schema(subject, Schema(json.dumps(WRITTEN), "AVRO"))
    read_id = client.register_schema(subject, Schema(json.dumps(READ), "AVRO"))
    writer, reader = fastavro.schema.parse_schema(WRITTEN), fastavro.schema.parse_schema(READ)
    items = _items()
    expected = []
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for item in items:
        payload = io.BytesIO()
        fastavro.schemaless_writer(payload, writer, item)
        expected.append(fastavro.schemaless_reader(io.BytesIO(payload.getvalue()), writer,
                                                   reader))
        producer.produce(topic_name, value=b"\0" + written_id.to_bytes(4, "big")
                         + payload.getvalue())
    later = {**expected[0], "name": "later", "weights": []}
    payload = io.BytesIO()
    fastavro.schemaless_writer(payload, reader, later)
    expected.append(fastavro.schemaless_reader(io.BytesIO(payload.getvalue()), reader))
    producer.produce(topic_name, value=b"\0" + read_id.to_bytes(4, "big") + payload.getvalue())
    assert producer.flush(20) == 0

    frame = (spark.read.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic_name).load()
             .select(from_confluent_avro("value", registry.url, subject, jvm=jvm).alias("i"))
             .select("i.*"))
    got = [_comparable(row.asDict(recursive=True)) for row in frame.collect()]
    assert expected[0]["extra"] == {"q": 7, "s": "seven"} and expected[1]["maybe"] == 2**31 - 1
    assert got == [_comparable(item) for item in expected]
