"""Avro schemas: parsed and checked by fastavro, compared by the Avro specification's
schema resolution rules (what a reader schema can read of a writer schema's data).

fastavro validates a schema and resolves its named types (those of referenced schemas
too) but checks resolution only while decoding data, so the static check walks the
two parsed schemas by the specification's rules, as Avro's Java SchemaCompatibility
does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import fastavro.schema
from fastavro.schema import SchemaParseException, UnknownType

from gregor.schemas import errors
from gregor.schemas.schema_types import ParsedSchema, ResolvedReference

_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
"""Writer type -> the reader types it is promoted to."""

_NAMED = ("record", "enum", "fixed", "error")


class AvroSchema:
    schema_type = "AVRO"

    def __init__(self, raw: Any, parsed: Any, named: dict[str, Any]) -> None:
        self.raw = raw
        self.parsed = parsed
        self.named = named

    def canonical(self) -> str:
        return json.dumps(self.raw, separators=(",", ":"))

    def normalized(self) -> str:
        return json.dumps(self.raw, separators=(",", ":"), sort_keys=True)

    def read_problems(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, AvroSchema):
            return [f"a {writer.schema_type} schema cannot become an AVRO one"]
        resolution = _Resolution(self.named, writer.named)
        resolution.check(self.parsed, writer.parsed, "/")
        return resolution.problems


def parse_avro(text: str, references: Sequence[ResolvedReference]) -> AvroSchema:
    named: dict[str, Any] = {}
    try:
        for reference in references:
            fastavro.schema.parse_schema(json.loads(reference.text), named_schemas=named)
        raw = json.loads(text)
        parsed = fastavro.schema.parse_schema(raw, named_schemas=named)
    except (ValueError, TypeError, KeyError, SchemaParseException, UnknownType) as exc:
        raise errors.invalid_schema(f"{text}: {exc}") from None
    return AvroSchema(raw, parsed, named)


class _Resolution:
    """One reader/writer comparison; remembers the named pairs under way, so that
    recursive types end."""

    def __init__(self, reader_named: dict[str, Any], writer_named: dict[str, Any]) -> None:
        self.reader_named = reader_named
        self.writer_named = writer_named
        self.seen: set[tuple[str, str]] = set()
        self.problems: list[str] = []

    def check(self, reader: Any, writer: Any, path: str) -> None:
        reader = self._resolve(reader, self.reader_named)
        writer = self._resolve(writer, self.writer_named)
        if isinstance(writer, list):
            for index, branch in enumerate(writer):
                self.check(reader, branch, f"{path}{index}/")
            return
        if isinstance(reader, list):
            for branch in reader:
                probe = _Resolution(self.reader_named, self.writer_named)
                probe.seen = set(self.seen)
                probe.check(branch, writer, path)
                if not probe.problems:
                    return
            self.problems.append(f"{path}: reader union lacks writer type {_type_of(writer)}")
            return
        reader_type, writer_type = _type_of(reader), _type_of(writer)
        if reader_type != writer_type:
            if reader_type not in _PROMOTIONS.get(writer_type, ()):
                self.problems.append(
                    f"{path}: reader type {reader_type} not compatible with writer type "
                    f"{writer_type}")
            return
        if reader_type in _NAMED:
            if _short_name(reader["name"]) != _short_name(writer["name"]) and not _aliased(
                    reader, writer["name"]):
                self.problems.append(f"{path}: name mismatch, reader {reader['name']} and "
                                     f"writer {writer['name']}")
                return
            pair = (reader["name"], writer["name"])
            if pair in self.seen:
                return
            self.seen.add(pair)
        if reader_type in ("record", "error"):
            self._check_record(reader, writer, path)
        elif reader_type == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                self.problems.append(f"{path}: reader enum lacks symbols {missing}")
        elif reader_type == "fixed":
            if reader["size"] != writer["size"]:
                self.problems.append(f"{path}: fixed size {writer['size']} became "
                                     f"{reader['size']}")
        elif reader_type == "array":
            self.check(reader["items"], writer["items"], f"{path}items/")
        elif reader_type == "map":
            self.check(reader["values"], writer["values"], f"{path}values/")

    def _check_record(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        writer_fields = {field["name"]: field for field in writer["fields"]}
        for field in reader["fields"]:
            names = [field["name"], *field.get("aliases", ())]
            match = next((writer_fields[n] for n in names if n in writer_fields), None)
            if match is None:
                if "default" not in field:
                    self.problems.append(f"{path}fields/{field['name']}: reader field has "
                                         "no default and the writer has no such field")
                continue
            self.check(field["type"], match["type"], f"{path}fields/{field['name']}/")

    @staticmethod
    def _resolve(schema: Any, named: dict[str, Any]) -> Any:
        """A reference to a named type (fastavro leaves the full name as a string)
        becomes the type's definition."""
        if isinstance(schema, str) and schema in named:
            return named[schema]
        return schema


def _type_of(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, dict):
        kind = schema["type"]
        return kind if isinstance(kind, str) else _type_of(kind)
    return "union"


def _short_name(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _aliased(reader: dict[str, Any], writer_name: str) -> bool:
    return any(_short_name(alias) == _short_name(writer_name)
               for alias in reader.get("aliases", ()))
