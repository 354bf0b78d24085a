"""Protobuf schemas, as confluent-kafka's ``ProtobufSerializer`` sends them (a
``FileDescriptorProto``, serialized and base64-encoded, decoded by protobuf's own
descriptor classes) or as ``.proto`` text (compiled by protoc), compared by Protobuf's
wire-compatibility rules.

Two message versions read each other's bytes when every field number that both know
keeps a wire-compatible type and label, no message type disappears, and no required
field appears or disappears; fields added or removed are skipped as unknown fields.
Oneofs follow Protobuf's guide ("moving any fields into an existing oneof is not
safe"), as Confluent's registry checks them: fields that were independent must not
become mutually exclusive (the reader would keep only one of those a writer set), and a
member of a oneof that still exists must not disappear.
"""

from __future__ import annotations

import base64
import binascii
import importlib.resources
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from gregor.schemas import errors
from gregor.schemas.schema_types import ParsedSchema, ResolvedReference

_FIELD = descriptor_pb2.FieldDescriptorProto
_WIRE_GROUPS = [
    {_FIELD.TYPE_INT32, _FIELD.TYPE_UINT32, _FIELD.TYPE_INT64, _FIELD.TYPE_UINT64,
     _FIELD.TYPE_BOOL},
    {_FIELD.TYPE_SINT32, _FIELD.TYPE_SINT64},
    {_FIELD.TYPE_FIXED32, _FIELD.TYPE_SFIXED32},
    {_FIELD.TYPE_FIXED64, _FIELD.TYPE_SFIXED64},
    {_FIELD.TYPE_STRING, _FIELD.TYPE_BYTES},
]
"""Scalar types whose encodings read as each other (Protobuf's "compatible" changes)."""
_MAIN_FILE = "schema.proto"


class ProtobufSchema:
    schema_type = "PROTOBUF"

    def __init__(self, text: str, descriptor: descriptor_pb2.FileDescriptorProto) -> None:
        self.text = text
        self.descriptor = descriptor

    def canonical(self) -> str:
        return self.text

    def normalized(self) -> str:
        # Serialization of one descriptor is deterministic: equal descriptors, equal text.
        return self.serialized()

    def serialized(self) -> str:
        """The base64 ``FileDescriptorProto`` (``?format=serialized``, what
        confluent-kafka's deserializer asks for referenced schemas)."""
        return base64.standard_b64encode(
            self.descriptor.SerializeToString(deterministic=True)).decode("ascii")

    def read_problems(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, ProtobufSchema):
            return [f"a {writer.schema_type} schema cannot become a PROTOBUF one"]
        problems = []
        if self.descriptor.package != writer.descriptor.package:
            problems.append(f"package changed from '{writer.descriptor.package}'")
        reader_messages = dict(_messages(self.descriptor.message_type, ""))
        for name, written in _messages(writer.descriptor.message_type, ""):
            read = reader_messages.get(name)
            if read is None:
                problems.append(f"message {name} removed")
            else:
                problems += _field_problems(name, read, written)
        return problems


def parse_protobuf(text: str, references: Sequence[ResolvedReference]) -> ProtobufSchema:
    """A schema in either form Confluent's registry takes: a base64 serialized
    ``FileDescriptorProto`` (confluent-kafka's serializers), or ``.proto`` text (curl,
    the Java and Go clients), compiled by protoc with its references as its imports."""
    descriptor = _decoded(text)
    if descriptor is None:
        descriptor = _compiled(text, references)
    # A file may only gather others (``import public``), as confluent-kafka's own test
    # protos do: a serializer registers it as a reference like any imported file.
    if not (descriptor.message_type or descriptor.enum_type or descriptor.dependency):
        raise errors.invalid_schema("the Protobuf file defines no message or enum "
                                    "and imports nothing")
    known = {r.name for r in references}
    missing = [d for d in descriptor.dependency
               if d not in known and not d.startswith("google/protobuf/")]
    if missing:
        raise errors.invalid_schema(f"imports without a reference: {missing}")
    return ProtobufSchema(text, descriptor)


def _decoded(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The descriptor a base64 schema holds; None for anything else (.proto text)."""
    try:
        descriptor = descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        return None
    return descriptor if descriptor.name or descriptor.message_type else None


def _compiled(text: str, references: Sequence[ResolvedReference],
              ) -> descriptor_pb2.FileDescriptorProto:
    """``.proto`` text compiled by protoc (grpcio-tools ships it, with the well-known
    types): text references become files of the import path they are named by,
    serialized ones a descriptor set protoc reads them from. protoc runs as a child
    process, whose error output is the message of a 42201."""
    with tempfile.TemporaryDirectory(prefix="gregor-proto-") as work:
        root = Path(work)
        imported = descriptor_pb2.FileDescriptorSet()
        for reference in references:
            decoded = _decoded(reference.text)
            if decoded is not None:
                imported.file.append(decoded)
            else:
                (root / reference.name).parent.mkdir(parents=True, exist_ok=True)
                (root / reference.name).write_text(reference.text)
        (root / _MAIN_FILE).write_text(text)
        command = [sys.executable, "-m", "grpc_tools.protoc", f"-I{root}",
                   f"-I{importlib.resources.files('grpc_tools') / '_proto'}",
                   f"--descriptor_set_out={root / 'out.pb'}", _MAIN_FILE]
        if imported.file:
            (root / "imports.pb").write_bytes(imported.SerializeToString())
            command.insert(3, f"--descriptor_set_in={root / 'imports.pb'}")
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise errors.invalid_schema(f"{text}: {done.stderr.strip() or done.stdout}")
        compiled = descriptor_pb2.FileDescriptorSet.FromString((root / "out.pb").read_bytes())
    return compiled.file[0]


def _messages(messages: Sequence[descriptor_pb2.DescriptorProto], scope: str,
              ) -> Iterator[tuple[str, descriptor_pb2.DescriptorProto]]:
    for message in messages:
        name = f"{scope}{message.name}"
        yield name, message
        yield from _messages(message.nested_type, f"{name}.")


def _field_problems(message: str, reader: descriptor_pb2.DescriptorProto,
                    writer: descriptor_pb2.DescriptorProto) -> list[str]:
    problems = []
    writer_fields = {field.number: field for field in writer.field}
    reader_fields = {field.number: field for field in reader.field}
    for number, read in reader_fields.items():
        written = writer_fields.get(number)
        where = f"{message}.{read.name} ({number})"
        if written is None:
            if read.label == _FIELD.LABEL_REQUIRED:
                problems.append(f"{where}: required field added")
            continue
        if (read.label == _FIELD.LABEL_REPEATED) != (written.label == _FIELD.LABEL_REPEATED):
            problems.append(f"{where}: changed between repeated and single")
        if not _same_wire_type(read, written):
            problems.append(f"{where}: type changed")
    for number, written in writer_fields.items():
        if number not in reader_fields and written.label == _FIELD.LABEL_REQUIRED:
            problems.append(f"{message}.{written.name} ({number}): required field removed")
    return problems + _oneof_problems(message, reader, writer)


def _oneof_problems(message: str, reader: descriptor_pb2.DescriptorProto,
                    writer: descriptor_pb2.DescriptorProto) -> list[str]:
    """Confluent's MULTIPLE_FIELDS_MOVED_TO_ONEOF, FIELD_MOVED_TO_EXISTING_ONEOF and
    ONEOF_FIELD_REMOVED: a reader's oneof whose fields the writer kept apart (top-level
    fields, or members of different oneofs; new fields do not count), and a writer's
    oneof member the reader dropped while keeping the oneof or another of its members."""
    problems = []
    written_oneofs = {field.number: _oneof(writer, field) for field in writer.field}
    read_oneofs = {field.number: _oneof(reader, field) for field in reader.field}
    for oneof in dict.fromkeys(o for o in read_oneofs.values() if o is not None):
        kept = [n for n, o in read_oneofs.items() if o == oneof and n in written_oneofs]
        moved = [n for n in kept if written_oneofs[n] is None]
        origins = {written_oneofs[n] or f"field {n}" for n in kept}
        if len(moved) > 1:
            problems.append(f"{message}: fields {', '.join(map(str, moved))} moved into "
                            f"oneof {oneof}")
        elif len(origins) > 1:
            problems.append(f"{message}: oneof {oneof} joins fields written apart "
                            f"({', '.join(sorted(origins))})")
    for number, written_oneof in written_oneofs.items():
        if written_oneof is None or number in read_oneofs:
            continue
        siblings = [n for n, o in written_oneofs.items() if o == written_oneof]
        if written_oneof in read_oneofs.values() or any(n in read_oneofs for n in siblings):
            problems.append(f"{message}: field {number} removed from oneof {written_oneof}")
    return problems


def _oneof(message: descriptor_pb2.DescriptorProto,
           field: descriptor_pb2.FieldDescriptorProto) -> str | None:
    """The name of the oneof holding ``field``, None outside one (a proto3 ``optional``
    field's synthetic oneof is none)."""
    if field.HasField("oneof_index") and not field.proto3_optional:
        return message.oneof_decl[field.oneof_index].name
    return None


def _same_wire_type(read: descriptor_pb2.FieldDescriptorProto,
                    written: descriptor_pb2.FieldDescriptorProto) -> bool:
    if read.type in (_FIELD.TYPE_MESSAGE, _FIELD.TYPE_ENUM, _FIELD.TYPE_GROUP) or \
            written.type in (_FIELD.TYPE_MESSAGE, _FIELD.TYPE_ENUM, _FIELD.TYPE_GROUP):
        return read.type == written.type and \
            read.type_name.rsplit(".", 1)[-1] == written.type_name.rsplit(".", 1)[-1]
    return read.type == written.type or any(
        read.type in group and written.type in group for group in _WIRE_GROUPS)
