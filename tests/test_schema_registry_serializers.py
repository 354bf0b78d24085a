"""confluent-kafka's Avro, JSON Schema and Protobuf serializers and deserializers,
unchanged, through real topics of a broker with a ``gregor schema-registry`` process;
and a registry restarted from ``_schemas`` alone."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any
from urllib.parse import quote

import pytest
from clients import TIMEOUT
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from gregor.broker.process import BrokerProcess
from gregor.schemas.framed_values import FramedValueDecoder
from gregor.schemas.process import RegistryProcess

USER_AVRO = json.dumps({"type": "record", "name": "User", "namespace": "test", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "int"}]})
USER_JSON = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#",
                        "title": "User", "type": "object",
                        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                        "required": ["name"]})


@pytest.fixture
def client(registry: RegistryProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url})


def round_trip(bootstrap: str, topic: str, values: list[Any], serializer: Any,
               deserializer: Any) -> tuple[list[bytes], list[Any]]:
    """Produce ``values`` serialized, consume them back: (raw values, decoded values)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value=serializer(
            value, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(TIMEOUT) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    raw: list[bytes] = []
    try:
        while len(raw) < len(values):
            message = consumer.poll(TIMEOUT)
            assert message is not None and message.error() is None
            raw.append(message.value())
    finally:
        consumer.close()
    context = SerializationContext(topic, MessageField.VALUE)
    return raw, [deserializer(value, context) for value in raw]


def framed_id(raw: bytes) -> int:
    """The schema id of a record in Confluent's framing: magic byte 0, 4-byte id."""
    assert raw[0] == 0
    return int.from_bytes(raw[1:5], "big")


def test_avro_auto_register_then_latest(broker: BrokerProcess, client: SchemaRegistryClient,
                                        topic_name: str) -> None:
    users = [{"name": "ada", "age": 36}, {"name": "alan", "age": 41}]
    raw, decoded = round_trip(broker.bootstrap, topic_name, users,
                              AvroSerializer(client, USER_AVRO), AvroDeserializer(client))
    assert decoded == users
    registered = client.get_latest_version(f"{topic_name}-value")
    assert {framed_id(r) for r in raw} == {registered.schema_id}
    # A reader without a schema of its own (the console) decodes with the writer's.
    decoder = FramedValueDecoder(client._rest_client.base_urls[0])
    assert [decoder.decode(r) for r in raw] == [(registered.schema_id, u) for u in users]
    assert decoder.decode(b"plain text") is None
    # auto.register.schemas off: the serializer finds the subject's latest version.
    evolved = json.dumps({**json.loads(USER_AVRO), "fields": [
        *json.loads(USER_AVRO)["fields"], {"name": "email", "type": ["null", "string"],
                                           "default": None}]})
    fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})
    with pytest.raises(Exception, match="40403|not found"):
        AvroSerializer(fresh, evolved, conf={"auto.register.schemas": False})(
            users[0], SerializationContext(topic_name, MessageField.VALUE))
    latest = AvroSerializer(fresh, USER_AVRO, conf={"auto.register.schemas": False,
                                                    "use.latest.version": True})
    context = SerializationContext(topic_name, MessageField.VALUE)
    value = latest(users[0], context)
    assert framed_id(value) == registered.schema_id
    # A reader with a newer schema resolves the writer's schema, found by its id.
    assert AvroDeserializer(fresh, evolved)(value, context) == {**users[0], "email": None}


def test_json_schema_round_trip(broker: BrokerProcess, client: SchemaRegistryClient,
                                topic_name: str) -> None:
    users = [{"name": "grace", "age": 85}, {"name": "edsger"}]
    raw, decoded = round_trip(broker.bootstrap, topic_name, users,
                              JSONSerializer(USER_JSON, client),
                              JSONDeserializer(USER_JSON, schema_registry_client=client))
    assert decoded == users
    latest = client.get_latest_version(f"{topic_name}-value")
    assert latest.schema.schema_type == "JSON"
    assert {framed_id(r) for r in raw} == {latest.schema_id}
    decoder = FramedValueDecoder(client._rest_client.base_urls[0])
    assert [decoder.decode(r) for r in raw] == [(latest.schema_id, u) for u in users]


def user_message_class(package: str) -> Any:
    """A Protobuf message class built at run time, as protoc's output would define it."""
    file = descriptor_pb2.FileDescriptorProto(name=f"{package}/user.proto", package=package,
                                              syntax="proto3")
    message = file.message_type.add(name="User")
    field = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="name", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    message.field.add(name="age", number=2, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.User"))


def test_protobuf_round_trip(broker: BrokerProcess, client: SchemaRegistryClient,
                             topic_name: str) -> None:
    user_class = user_message_class(f"p{uuid.uuid4().hex[:8]}")
    users = [user_class(name="barbara", age=86), user_class(name="donald", age=88)]
    raw, decoded = round_trip(broker.bootstrap, topic_name, users,
                              ProtobufSerializer(user_class, client,
                                                 {"use.deprecated.format": False}),
                              ProtobufDeserializer(user_class,
                                                   {"use.deprecated.format": False}))
    assert decoded == users
    latest = client.get_latest_version(f"{topic_name}-value")
    assert latest.schema.schema_type == "PROTOBUF"
    assert {framed_id(r) for r in raw} == {latest.schema_id}
    decoder = FramedValueDecoder(client._rest_client.base_urls[0])
    assert [decoder.decode(r) for r in raw] == [
        (latest.schema_id, {"name": "barbara", "age": 86}),
        (latest.schema_id, {"name": "donald", "age": 88})]
    # Changing a field's type breaks the subject's BACKWARD level.
    changed = descriptor_pb2.FileDescriptorProto.FromString(
        user_class.DESCRIPTOR.file.serialized_pb)
    changed.message_type[0].field[1].type = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
    assert not client.test_compatibility(f"{topic_name}-value", Schema(
        base64.b64encode(changed.SerializeToString()).decode(), "PROTOBUF"))


def test_restart_finds_every_schema(broker: BrokerProcess, registry: RegistryProcess,
                                    client: SchemaRegistryClient, topic_name: str) -> None:
    subject = f"{topic_name}-value"
    client.set_compatibility(subject, "FULL")
    schema_id = client.register_schema(subject, Schema(USER_AVRO, "AVRO"))
    keys = schemas_topic_keys(broker.bootstrap)
    assert (b'{"keytype":"SCHEMA","subject":"%s","version":1,"magic":1}' % subject.encode()
            in keys)
    assert b'{"keytype":"CONFIG","subject":"%s","magic":0}' % subject.encode() in keys
    # Subjects are path segments: another test's may hold "/" (sent as %2F).
    before = {s: registry.call("GET", f"/subjects/{quote(s, safe='')}/versions")[1]
              for s in registry.call("GET", "/subjects")[1]}
    registry.stop()
    registry.start()
    after = {s: registry.call("GET", f"/subjects/{quote(s, safe='')}/versions")[1]
             for s in registry.call("GET", "/subjects")[1]}
    assert after == before
    assert registry.call("GET", f"/config/{subject}")[1] == {"compatibilityLevel": "FULL"}
    assert json.loads(registry.call("GET", f"/schemas/ids/{schema_id}")[1]["schema"]) == \
        json.loads(USER_AVRO)
    # The next id continues after every id the topic holds.
    next_id = registry.call("POST", f"/subjects/{subject}-new/versions", {
        "schema": json.dumps({"type": "record", "name": "R", "fields": []})})[1]["id"]
    assert next_id > max(schema_id, *(framed_id_of(registry, s) for s in after))


def framed_id_of(registry: RegistryProcess, subject: str) -> int:
    return registry.call("GET", f"/subjects/{quote(subject, safe='')}/versions/latest")[1]["id"]


def schemas_topic_keys(bootstrap: str) -> list[bytes]:
    """Every key of ``_schemas``, read as Confluent's registry or Karapace would."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "keys",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition("_schemas", 0, 0)])
    keys = []
    try:
        while (message := consumer.poll(TIMEOUT)) is not None and message.error() is None:
            keys.append(message.key())
    finally:
        consumer.close()
    return keys
