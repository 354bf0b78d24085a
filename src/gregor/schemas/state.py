"""What the ``_schemas`` topic says, rebuilt by applying its records in order.

Every instance holds one and only the topic's reader changes it, so the answer to a
read is the same on every instance that has read as far, and a restart rebuilds it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from gregor.schemas.schema_types import Reference

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StoredSchema:
    schema_id: int
    schema_type: str
    text: str
    references: tuple[Reference, ...]


@dataclass(frozen=True, slots=True)
class SubjectVersion:
    subject: str
    version: int
    schema: StoredSchema
    deleted: bool


@dataclass
class RegistryState:
    subjects: dict[str, dict[int, SubjectVersion]] = field(default_factory=dict)
    """subject -> version -> what it holds, versions in ascending order."""
    configs: dict[str | None, str] = field(default_factory=dict)
    """Compatibility levels: None is the global one."""
    modes: dict[str | None, str] = field(default_factory=dict)
    by_id: dict[int, StoredSchema] = field(default_factory=dict)
    """The schemas some version (live or soft-deleted) holds, by id."""
    max_id: int = 0
    """The highest schema id ever read: new ids are above it, so none is reused."""
    next_offset: int = 0
    """The offset of the next record to apply: how far this state has read."""

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """Apply one record of ``_schemas``; what this registry does not know (another
        registry's key types, a damaged record) is logged and skipped, as Confluent's
        reader does, rather than stopping every read after it."""
        self.next_offset = offset + 1
        try:
            parsed_key = json.loads(key) if key else None
            parsed_value = json.loads(value) if value else None
            if not isinstance(parsed_key, dict):
                raise ValueError("the key is not a JSON object")
            self._apply(parsed_key, parsed_value)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("skipping _schemas record at offset %d: %s", offset, exc)

    def _apply(self, key: dict, value: dict | None) -> None:
        keytype = key.get("keytype")
        subject = key.get("subject")
        if keytype == "SCHEMA":
            self._apply_schema(str(subject), int(key["version"]), value)
        elif keytype == "CONFIG":
            if value is None:
                self.configs.pop(subject, None)
            else:
                self.configs[subject] = value["compatibilityLevel"]
        elif keytype == "MODE":
            if value is None:
                self.modes.pop(subject, None)
            else:
                self.modes[subject] = value["mode"]
        elif keytype == "DELETE_SUBJECT" and value is not None:
            versions = self.subjects.get(str(subject), {})
            for number, version in list(versions.items()):
                if number <= int(value["version"]) and not version.deleted:
                    versions[number] = SubjectVersion(str(subject), number, version.schema,
                                                      True)

    def _apply_schema(self, subject: str, version: int, value: dict | None) -> None:
        versions = self.subjects.setdefault(subject, {})
        if value is None:
            gone = versions.pop(version, None)
            if gone is not None and not self.versions_of_id(gone.schema.schema_id, True):
                del self.by_id[gone.schema.schema_id]
        else:
            schema_id = int(value["id"])
            references = tuple(Reference(r["name"], r["subject"], int(r["version"]))
                               for r in value.get("references") or ())
            schema = StoredSchema(schema_id, value.get("schemaType") or "AVRO",
                                  value["schema"], references)
            versions[version] = SubjectVersion(subject, version, schema,
                                               bool(value.get("deleted", False)))
            self.subjects[subject] = dict(sorted(versions.items()))
            self.by_id.setdefault(schema_id, schema)
            self.max_id = max(self.max_id, schema_id)
        if not self.subjects[subject]:
            del self.subjects[subject]

    def live_versions(self, subject: str) -> list[SubjectVersion]:
        return [v for v in self.subjects.get(subject, {}).values() if not v.deleted]

    def versions_of_id(self, schema_id: int, deleted: bool = False) -> list[SubjectVersion]:
        return [version for versions in self.subjects.values()
                for version in versions.values()
                if version.schema.schema_id == schema_id and (deleted or not version.deleted)]

    def referrers(self, subject: str, version: int) -> list[SubjectVersion]:
        """Live versions whose schema references ``subject`` ``version``."""
        return [v for versions in self.subjects.values() for v in versions.values()
                if not v.deleted and any(r.subject == subject and r.version == version
                                         for r in v.schema.references)]
