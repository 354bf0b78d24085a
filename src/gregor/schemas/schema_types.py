"""What the registry needs of a schema of any format, and the parser of each type.

A format parses a schema's text (with the texts of the schemas it references) into a
``ParsedSchema``: its stored text, its normalized text (``?normalize=true``) and the
format's own resolution rules, which the compatibility levels combine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gregor.schemas import errors

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
"""In the order Confluent's ``GET /schemas/types`` lists them; AVRO is the default."""


@dataclass(frozen=True, slots=True)
class Reference:
    """A reference as the API and ``_schemas`` carry it: the name the referring schema
    uses (an Avro full name, a JSON ``$ref``, a Protobuf import path) and the subject
    version that holds it."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class ResolvedReference:
    """A referenced schema's name and text, dependencies before dependents."""

    name: str
    schema_type: str
    text: str


class ParsedSchema(Protocol):
    schema_type: str

    def canonical(self) -> str:
        """The text stored and served: the schema as given, without insignificant
        whitespace where the format has a JSON form."""

    def normalized(self) -> str:
        """The text under ``normalize=true``: equal for schemas that differ only in
        presentation, so they get the same id."""

    def read_problems(self, writer: ParsedSchema) -> list[str]:
        """Why data written with ``writer`` cannot be read with this schema (empty when
        it can), by the format's own rules."""


def parse_schema(schema_type: str, text: str,
                 references: Sequence[ResolvedReference] = ()) -> ParsedSchema:
    """Parse ``text`` as ``schema_type``; 42201 (invalid schema) when it is not one."""
    if schema_type == "AVRO":
        from gregor.schemas.avro_format import parse_avro
        return parse_avro(text, references)
    if schema_type == "JSON":
        from gregor.schemas.json_format import parse_json_schema
        return parse_json_schema(text, references)
    if schema_type == "PROTOBUF":
        from gregor.schemas.protobuf_format import parse_protobuf
        return parse_protobuf(text, references)
    raise errors.unprocessable(f"Unknown schema type {schema_type}; known types are "
                               f"{', '.join(SCHEMA_TYPES)}")
