"""The registry's REST API as confluent-kafka's SchemaRegistryClient calls it, and the
answers clients branch on, against a real broker and a real ``gregor schema-registry``
process (one of each for the module)."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from confluent_kafka.schema_registry import (
    Schema,
    SchemaReference,
    SchemaRegistryClient,
    SchemaRegistryError,
)
from google.protobuf import descriptor_pb2

from gregor.schemas.process import RegistryProcess


@pytest.fixture
def client(registry: RegistryProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url})


@pytest.fixture
def subject() -> str:
    return f"s-{uuid.uuid4().hex[:10]}-value"


def avro_record(*fields: dict, name: str = "User") -> Schema:
    return Schema(json.dumps({"type": "record", "name": name, "namespace": "test",
                              "fields": list(fields)}), "AVRO")


NAME = {"name": "name", "type": "string"}
AGE = {"name": "age", "type": "int"}
AGE_DEFAULT = {"name": "age", "type": "int", "default": 0}


def error_of(call: object) -> SchemaRegistryError:
    with pytest.raises(SchemaRegistryError) as caught:
        call()  # type: ignore[operator]
    return caught.value


def test_register_get_and_lookup(client: SchemaRegistryClient, subject: str) -> None:
    schema = avro_record(NAME)
    schema_id = client.register_schema(subject, schema)
    assert client.register_schema(subject, schema) == schema_id  # no new version
    latest = client.get_latest_version(subject)
    assert (latest.version, latest.schema_id, latest.subject) == (1, schema_id, subject)
    assert json.loads(latest.schema.schema_str) == json.loads(schema.schema_str)
    assert client.get_version(subject, 1).schema_id == schema_id
    assert client.get_versions(subject) == [1]
    assert subject in client.get_subjects()
    fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})
    assert fresh.lookup_schema(subject, schema).version == 1
    assert json.loads(fresh.get_schema(schema_id).schema_str)["name"] == "User"
    assert [(v.subject, v.version) for v in fresh.get_schema_versions(schema_id)] == \
        [(subject, 1)]


def test_same_schema_two_subjects_same_id_and_ids_increase(
        client: SchemaRegistryClient, subject: str) -> None:
    schema = avro_record(NAME, {"name": "unique", "type": "string", "default": subject})
    first = client.register_schema(subject, schema)
    assert client.register_schema(subject + "-other", schema) == first
    later = client.register_schema(subject, avro_record(
        NAME, {"name": "unique", "type": "string", "default": subject}, AGE_DEFAULT))
    assert later > first


def test_errors_carry_confluent_codes(client: SchemaRegistryClient, registry: RegistryProcess,
                                      subject: str) -> None:
    assert error_of(lambda: client.get_latest_version(subject)).error_code == 40401
    client.register_schema(subject, avro_record(NAME))
    missing_version = error_of(lambda: client.get_version(subject, 7))
    assert (missing_version.http_status_code, missing_version.error_code) == (404, 40402)
    assert error_of(lambda: client.lookup_schema(subject, avro_record(AGE))).error_code == 40403
    assert error_of(lambda: client.get_schema(987654)).error_code == 40403
    invalid = error_of(lambda: client.register_schema(subject, Schema('{"type": "recrd"}',
                                                                      "AVRO")))
    assert (invalid.http_status_code, invalid.error_code) == (422, 42201)
    assert registry.call("GET", f"/subjects/{subject}/versions/0")[1]["error_code"] == 42202
    status, body = registry.call("PUT", "/config/" + subject, {"compatibility": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42203)
    assert set(body) == {"error_code", "message"}


def test_backward_default_refuses_and_check_answers(client: SchemaRegistryClient,
                                                    subject: str) -> None:
    assert client.get_compatibility() == "BACKWARD"
    client.register_schema(subject, avro_record(NAME))
    breaking = avro_record(NAME, AGE)  # a new field without a default
    assert client.test_compatibility(subject, breaking) is False
    refused = error_of(lambda: client.register_schema(subject, breaking))
    assert (refused.http_status_code, refused.error_code) == (409, 409)
    assert client.test_compatibility(subject, avro_record(NAME, AGE_DEFAULT)) is True
    client.set_compatibility(subject, "NONE")
    assert client.get_compatibility(subject) == "NONE"
    assert client.register_schema(subject, breaking) > 0
    assert client.get_versions(subject) == [1, 2]


@pytest.mark.parametrize(("level", "first", "second", "third", "accepted"), [
    # FORWARD: the older schema must read the new one's data; removing a field with
    # no default breaks it, adding one does not.
    ("FORWARD", [NAME, AGE], [NAME, AGE, {"name": "x", "type": "long"}], None, True),
    ("FORWARD", [NAME, AGE], [NAME], None, False),
    ("FULL", [NAME], [NAME, AGE], None, False),
    ("FULL", [NAME], [NAME, AGE_DEFAULT], None, True),
    # Transitive: the third is compatible with the second, not with the first.
    ("BACKWARD", [NAME], [{"name": "name", "type": ["null", "string"], "default": None}],
     [{"name": "name", "type": ["null", "long"], "default": None}], False),
    ("BACKWARD_TRANSITIVE", [NAME, AGE_DEFAULT], [NAME], [NAME, AGE], False),
    ("BACKWARD", [NAME, AGE_DEFAULT], [NAME], [NAME, AGE], False),
    ("NONE", [NAME], [AGE], None, True),
    # Promotions: int -> long is read by a long reader.
    ("BACKWARD", [AGE], [{"name": "age", "type": "long"}], None, True),
    ("BACKWARD", [{"name": "age", "type": "long"}], [AGE], None, False),
])
def test_avro_levels(client: SchemaRegistryClient, subject: str, level: str, first: list,
                     second: list, third: list | None, accepted: bool) -> None:
    client.set_compatibility(subject, level)
    client.register_schema(subject, avro_record(*first))
    last = avro_record(*second)
    if third is not None:
        client.set_compatibility(subject, "NONE")
        client.register_schema(subject, last)
        client.set_compatibility(subject, level)
        last = avro_record(*third)
    assert client.test_compatibility_all_versions(subject, last) is accepted
    if accepted:
        client.register_schema(subject, last)
    else:
        assert error_of(lambda: client.register_schema(subject, last)).error_code == 409


def test_json_schema_evolution(client: SchemaRegistryClient, subject: str) -> None:
    def schema(properties: dict, **extra: object) -> Schema:
        return Schema(json.dumps({"type": "object", "properties": properties, **extra}),
                      "JSON")

    client.register_schema(subject, schema({"a": {"type": "integer"}}))
    # Widening a type reads old data; requiring a new property does not.
    assert client.test_compatibility(subject, schema({"a": {"type": "number"}}))
    assert not client.test_compatibility(
        subject, schema({"a": {"type": "integer"}, "b": {"type": "string"}}, required=["b"]))
    assert not client.test_compatibility(subject, schema({"a": {"type": "string"}}))
    assert client.get_latest_version(subject).schema.schema_type == "JSON"
    bad = error_of(lambda: client.register_schema(subject, Schema('{"type": 12}', "JSON")))
    assert bad.error_code == 42201


@pytest.mark.parametrize(("before", "after", "accepted"), [
    ("int64 id = 1; string note = 2;", "int64 id = 1;", True),
    ("int32 id = 1;", "int64 id = 1;", True),  # one wire type
    ("int64 id = 1;", "string id = 1;", False),
    # Oneofs, as Confluent's registry checks them (Protobuf's guide: moving fields into
    # an existing oneof is not safe): one field moved into a new oneof is compatible ...
    ("int64 id = 1; int64 b = 2;", "int64 id = 1; oneof o { int64 a = 3; int64 b = 2; }",
     True),
    # ... two are not (old data holding both would lose one), nor is a field moved into
    # a oneof that already holds others,
    ("int64 id = 1; int64 b = 2;", "oneof o { int64 id = 1; int64 b = 2; }", False),
    ("int64 id = 1; oneof o { int64 b = 2; }", "oneof o { int64 id = 1; int64 b = 2; }",
     False),
    # nor a member removed from a oneof that stays; a whole oneof removed is compatible.
    ("oneof o { int64 a = 1; int64 b = 2; }", "oneof o { int64 a = 1; }", False),
    ("int64 id = 1; oneof o { int64 a = 2; int64 b = 3; }", "int64 id = 1;", True),
    # proto3 optional fields are no oneof members.
    ("optional int64 a = 1; optional int64 b = 2;", "optional int64 a = 1;", True),
])
def test_protobuf_evolution(client: SchemaRegistryClient, subject: str, before: str,
                            after: str, accepted: bool) -> None:
    def schema(fields: str) -> Schema:
        return Schema(f'syntax = "proto3";\npackage shop;\nmessage Order {{ {fields} }}\n',
                      "PROTOBUF")

    client.register_schema(subject, schema(before))
    assert client.test_compatibility(subject, schema(after)) is accepted


def test_soft_and_permanent_deletes(client: SchemaRegistryClient, registry: RegistryProcess,
                                    subject: str) -> None:
    client.set_compatibility(subject, "NONE")
    first = client.register_schema(subject, avro_record(NAME))
    # A schema of this test alone: a permanent delete drops an id no other subject holds.
    second = client.register_schema(subject, avro_record(
        AGE, {"name": "only", "type": "string", "default": subject}))
    assert client.delete_version(subject, 2) == 2
    assert client.get_versions(subject) == [1]
    assert error_of(lambda: client.delete_version(subject, 2)).error_code == 40406
    assert error_of(lambda: client.delete_version(subject, 1, permanent=True)).error_code \
        == 40407
    assert error_of(lambda: client.delete_subject(subject, permanent=True)).error_code == 40405
    assert client.delete_subject(subject) == [1]
    assert subject not in client.get_subjects()
    assert subject in client.get_subjects(deleted=True)
    assert error_of(lambda: client.delete_subject(subject)).error_code == 40404
    # Soft-deleted schemas still resolve by id: records written with them stay readable.
    assert registry.call("GET", f"/schemas/ids/{first}")[0] == 200
    assert sorted(client.delete_subject(subject, permanent=True)) == [1, 2]
    assert subject not in client.get_subjects(deleted=True)
    assert registry.call("GET", f"/schemas/ids/{second}")[1]["error_code"] == 40403
    # Ids are never reused, and the subject starts again at version 1.
    again = client.register_schema(subject, avro_record(NAME, {"name": "z", "type": "int"}))
    assert again > second
    assert client.get_versions(subject) == [1]


def test_avro_references(client: SchemaRegistryClient, subject: str) -> None:
    address = json.dumps({"type": "record", "name": "Address", "namespace": "test",
                          "fields": [{"name": "city", "type": "string"}]})
    client.register_schema(subject + "-address", Schema(address, "AVRO"))
    user = Schema(json.dumps({"type": "record", "name": "User", "namespace": "test",
                              "fields": [{"name": "home", "type": "test.Address"}]}), "AVRO",
                  [SchemaReference("test.Address", subject + "-address", 1)])
    user_id = client.register_schema(subject, user)
    got = client.get_version(subject, 1)
    assert got.schema_id == user_id
    assert [(r.name, r.subject, r.version) for r in got.schema.references] == \
        [("test.Address", subject + "-address", 1)]
    # Without its reference the type is unknown; a referenced version cannot go.
    unresolved = Schema(user.schema_str, "AVRO")
    assert error_of(lambda: client.register_schema(subject + "-x", unresolved)).error_code \
        == 42201
    assert error_of(lambda: client.delete_subject(subject + "-address")).error_code == 42206
    assert client.get_referenced_by(subject + "-address", 1) == [user_id]


def test_normalize_gives_one_id(client: SchemaRegistryClient, subject: str) -> None:
    compact = {"type": "record", "name": "N", "fields": [{"name": "a", "type": "int"}]}
    reordered = {"fields": [{"type": "int", "name": "a"}], "name": "N", "type": "record"}
    first = client.register_schema(subject, Schema(json.dumps(compact), "AVRO"),
                                   normalize_schemas=True)
    second = client.register_schema(subject, Schema(json.dumps(reordered, indent=2), "AVRO"),
                                    normalize_schemas=True)
    assert first == second
    assert client.get_versions(subject) == [1]


def test_modes_and_types(client: SchemaRegistryClient, registry: RegistryProcess,
                         subject: str) -> None:
    assert registry.call("GET", "/schemas/types") == (200, ["AVRO", "JSON", "PROTOBUF"])
    assert registry.call("GET", "/mode") == (200, {"mode": "READWRITE"})
    assert registry.call("GET", f"/mode/{subject}")[1]["error_code"] == 40409
    assert registry.call("PUT", f"/mode/{subject}", {"mode": "READONLY"}) == \
        (200, {"mode": "READONLY"})
    refused = error_of(lambda: client.register_schema(subject, avro_record(NAME)))
    assert (refused.http_status_code, refused.error_code) == (422, 42205)
    assert registry.call("PUT", f"/mode/{subject}", {"mode": "SIDEWAYS"})[1]["error_code"] \
        == 42204
    assert registry.call("DELETE", f"/mode/{subject}") == (200, {"mode": "READONLY"})
    assert client.register_schema(subject, avro_record(NAME)) > 0
    # IMPORT keeps the id and version it is given (a migration from another registry).
    imported = f"{subject}-import"
    assert registry.call("PUT", f"/mode/{imported}", {"mode": "IMPORT"})[0] == 200
    schema = json.dumps({"type": "record", "name": "I", "fields": []})
    assert registry.call("POST", f"/subjects/{imported}/versions",
                         {"schema": schema, "id": 900001, "version": 5}) == (200, {"id": 900001})
    assert client.get_version(imported, 5).schema_id == 900001


def test_protobuf_text_with_an_import(client: SchemaRegistryClient, registry: RegistryProcess,
                                      subject: str) -> None:
    def dep(kind: str) -> Schema:
        return Schema(f'syntax = "proto3"; package t; message Dep {{ {kind} x = 1; }}',
                      "PROTOBUF")

    client.register_schema(subject + "-dep", dep("string"))
    main = Schema('syntax = "proto3"; package t; import "dep.proto";\n'
                  "message Order { Dep dep = 1; int64 total = 2; }", "PROTOBUF",
                  [SchemaReference("dep.proto", subject + "-dep", 1)])
    client.register_schema(subject, main)
    status, got = registry.call("GET", f"/subjects/{subject}/versions/1?format=serialized")
    descriptor = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(got["schema"]))
    assert [m.name for m in descriptor.message_type] == ["Order"]
    assert list(descriptor.dependency) == ["dep.proto"]
    # string and bytes share their encoding; an int32 is read from other bytes.
    assert client.test_compatibility(subject + "-dep", dep("bytes"))
    assert not client.test_compatibility(subject + "-dep", dep("int32"))
    broken = error_of(lambda: client.register_schema(subject + "-x", Schema(
        'syntax = "proto3"; message { }', "PROTOBUF")))
    assert broken.error_code == 42201 and "schema.proto" in broken.error_message


def test_a_subject_with_a_slash(registry: RegistryProcess) -> None:
    """Protobuf serializers register each imported file under its path
    (``google/protobuf/timestamp.proto``), sent escaped (``%2F``): the registry routes
    on the path as sent, so the subject stays one path segment."""
    client = SchemaRegistryClient({"url": registry.url})
    subject = f"dir-{uuid.uuid4().hex[:8]}/types.proto"
    schema = Schema('syntax = "proto3";\npackage t;\nmessage Id { string v = 1; }\n', "PROTOBUF")
    schema_id = client.register_schema(subject, schema)
    assert subject in client.get_subjects()
    latest = client.get_latest_version(subject)
    assert (latest.subject, latest.version, latest.schema_id) == (subject, 1, schema_id)
    assert client.lookup_schema(subject, schema).schema_id == schema_id


def test_a_protobuf_file_that_only_imports(registry: RegistryProcess) -> None:
    """A file that defines nothing and re-exports another (``import public``), as in
    confluent-kafka's own test protos, registers as a reference of the files using it."""
    client = SchemaRegistryClient({"url": registry.url})
    prefix = uuid.uuid4().hex[:8]
    client.register_schema(f"{prefix}/inner.proto", Schema(
        'syntax = "proto3";\npackage t;\nmessage Inner { string v = 1; }\n', "PROTOBUF"))
    gather = Schema('syntax = "proto3";\nimport public "inner.proto";\n', "PROTOBUF",
                    [SchemaReference("inner.proto", f"{prefix}/inner.proto", 1)])
    assert client.register_schema(f"{prefix}/public.proto", gather) > 0
