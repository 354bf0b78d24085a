"""JSON Schemas: checked against their draft's meta-schema by jsonschema, compared by
the rules Confluent's registry applies to JSON Schema evolution.

jsonschema validates schemas and data but has no notion of one schema accepting what
another allows, so the comparison walks both schemas: a reader must accept every
document the writer allows (types, enums, bounds, required and closed properties,
items), as Confluent's JSON Schema diff does for the common keywords.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import jsonschema.exceptions
import jsonschema.validators

from gregor.schemas import errors
from gregor.schemas.schema_types import ParsedSchema, ResolvedReference

_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_ALL_TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})


class JsonSchema:
    schema_type = "JSON"

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def canonical(self) -> str:
        return json.dumps(self.raw, separators=(",", ":"))

    def normalized(self) -> str:
        return json.dumps(self.raw, separators=(",", ":"), sort_keys=True)

    def read_problems(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, JsonSchema):
            return [f"a {writer.schema_type} schema cannot become a JSON one"]
        problems: list[str] = []
        _compare(self.raw, writer.raw, "#", problems)
        return problems


def parse_json_schema(text: str, references: Sequence[ResolvedReference]) -> JsonSchema:
    try:
        raw = json.loads(text)
        for schema in (*(json.loads(r.text) for r in references), raw):
            if not isinstance(schema, (dict, bool)):
                raise ValueError("a JSON Schema is an object or a boolean")
            jsonschema.validators.validator_for(schema).check_schema(schema)
    except (ValueError, jsonschema.exceptions.SchemaError) as exc:
        message = exc.message if isinstance(exc, jsonschema.exceptions.SchemaError) else exc
        raise errors.invalid_schema(f"{text}: {message}") from None
    return JsonSchema(raw)


def _types(schema: Any) -> frozenset[str]:
    if schema is False:
        return frozenset()
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind is None:
        return _ALL_TYPES
    kinds = frozenset([kind] if isinstance(kind, str) else kind)
    # A number schema accepts integers too.
    return kinds | {"integer"} if "number" in kinds else kinds


def _compare(reader: Any, writer: Any, path: str, problems: list[str]) -> None:
    """Append to ``problems`` what ``writer`` allows and ``reader`` refuses."""
    if reader is True or reader == {} or writer is False:
        return
    if reader is False:
        problems.append(f"{path}: the reader accepts nothing")
        return
    if writer is True:
        writer = {}
    lost = _types(writer) - _types(reader)
    if lost:
        problems.append(f"{path}: type narrowed, {sorted(lost)} no longer accepted")
    if "enum" in reader:
        removed = [v for v in writer.get("enum", [None]) if v not in reader["enum"]]
        if "enum" not in writer or removed:
            problems.append(f"{path}: enum narrowed")
    if "const" in reader and writer.get("const", object()) != reader["const"]:
        problems.append(f"{path}: const added or changed")
    for keyword in _LOWER_BOUNDS:
        if keyword in reader and writer.get(keyword, float("-inf")) < reader[keyword]:
            problems.append(f"{path}: {keyword} raised")
    for keyword in _UPPER_BOUNDS:
        if keyword in reader and writer.get(keyword, float("inf")) > reader[keyword]:
            problems.append(f"{path}: {keyword} lowered")
    if "pattern" in reader and writer.get("pattern") != reader["pattern"]:
        problems.append(f"{path}: pattern added or changed")
    required = set(reader.get("required", ())) - set(writer.get("required", ()))
    if required:
        problems.append(f"{path}: required properties added: {sorted(required)}")
    _compare_properties(reader, writer, path, problems)
    if isinstance(reader.get("items"), (dict, bool)):
        _compare(reader["items"], writer.get("items", True), f"{path}/items", problems)


def _compare_properties(reader: dict[str, Any], writer: dict[str, Any], path: str,
                        problems: list[str]) -> None:
    reader_properties = reader.get("properties", {})
    writer_properties = writer.get("properties", {})
    writer_extra = writer.get("additionalProperties", True)
    reader_extra = reader.get("additionalProperties", True)
    for name, schema in reader_properties.items():
        where = f"{path}/properties/{name}"
        if name in writer_properties:
            _compare(schema, writer_properties[name], where, problems)
        elif writer_extra is not False:
            # The writer's documents may already hold this property, of any type its
            # open content model allows.
            _compare(schema, writer_extra, where, problems)
    for name in writer_properties.keys() - reader_properties.keys():
        if reader_extra is False:
            problems.append(f"{path}/properties/{name}: property removed from a closed "
                            "content model")
        else:
            _compare(reader_extra, writer_properties[name], f"{path}/properties/{name}",
                     problems)
    if writer_extra is not False and reader_extra is not True:
        _compare(reader_extra, writer_extra, f"{path}/additionalProperties", problems)
