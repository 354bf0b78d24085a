"""The records of the ``_schemas`` topic, byte for byte as Confluent's registry writes
them, so that Confluent's registry or Karapace can read a topic this registry wrote
(and the other way round).

Keys are compact JSON with their fields in Confluent's order: compaction keeps the
latest record per key *bytes*, so a key spelled differently would keep two records
for one thing. SCHEMA keys carry magic 1, the others magic 0. A null value is a
permanent delete (of a version, a subject's config or mode).
"""

from __future__ import annotations

import json
from typing import Any

from gregor.schemas.schema_types import Reference


def _compact(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _compact({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def config_key(subject: str | None) -> bytes:
    return _compact({"keytype": "CONFIG", "subject": subject, "magic": 0})


def mode_key(subject: str | None) -> bytes:
    return _compact({"keytype": "MODE", "subject": subject, "magic": 0})


def delete_subject_key(subject: str) -> bytes:
    return _compact({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0})


def noop_key() -> bytes:
    return _compact({"keytype": "NOOP", "magic": 0})


def schema_value(subject: str, version: int, schema_id: int, schema_type: str, text: str,
                 references: tuple[Reference, ...], deleted: bool) -> bytes:
    value: dict[str, Any] = {"subject": subject, "version": version, "id": schema_id}
    if schema_type != "AVRO":
        value["schemaType"] = schema_type
    if references:
        value["references"] = [r.to_json() for r in references]
    value["schema"] = text
    value["deleted"] = deleted
    return _compact(value)


def config_value(level: str) -> bytes:
    return _compact({"compatibilityLevel": level})


def mode_value(mode: str) -> bytes:
    return _compact({"mode": mode})


def delete_subject_value(subject: str, version: int) -> bytes:
    return _compact({"subject": subject, "version": version})
