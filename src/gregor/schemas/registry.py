"""The registry's operations, as Confluent's API defines them: reads answer from the
state ``_schemas`` rebuilt; writes are checked against it, written to the topic and
answered once read back.

Writes run one at a time (``_writing``): a registration's compatibility check, its id
and its version are decided against a state that no other write changes meanwhile.
Several instances keep that true by writing only at the elected primary.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

from gregor.schemas import errors, records
from gregor.schemas.compatibility import DEFAULT_LEVEL, incompatibilities, validate_level
from gregor.schemas.schema_topic import SchemaTopic
from gregor.schemas.schema_types import (
    ParsedSchema,
    Reference,
    ResolvedReference,
    parse_schema,
)
from gregor.schemas.state import RegistryState, StoredSchema, SubjectVersion

MODES = ("READWRITE", "READONLY", "IMPORT")
DEFAULT_MODE = "READWRITE"
_MAX_VERSION = 2**31 - 1
ASKED_IDENTITIES = 10_000
"""How many schemas asked for by lookups keep their parsed identity."""


@dataclass(frozen=True, slots=True)
class SchemaRequest:
    """A schema as a request body gives it (register, lookup, compatibility)."""

    schema_type: str
    text: str
    references: tuple[Reference, ...] = ()
    schema_id: int | None = None
    """IMPORT mode only: the id to keep."""
    version: int | None = None
    """IMPORT mode only: the version to keep."""


def parse_version(text: str) -> int | None:
    """A version path segment: a number in [1, 2^31-1], or "latest" (and -1, its
    alias), which is None; 42202 otherwise."""
    if text in ("latest", "-1"):
        return None
    if text.isdigit() and 1 <= int(text) <= _MAX_VERSION:
        return int(text)
    raise errors.invalid_version(text)


class SchemaRegistry:
    def __init__(self, state: RegistryState, changed: threading.Condition,
                 topic: SchemaTopic) -> None:
        self.state = state
        self.changed = changed
        self.topic = topic
        self._writing = threading.Lock()
        self._parsed: dict[int, ParsedSchema] = {}
        self._ids: dict[tuple[str, str, tuple[Reference, ...]], int] = {}
        """Schema identities (as stored and normalized) -> the id they were given."""
        self._indexed: set[int] = set()
        self._stored_identities: dict[tuple[int, bool], tuple[str, str, tuple[Reference, ...]]] = {}
        """(schema id, normalize) -> its identity: a stored schema never changes."""
        self._asked_identities: dict[tuple[str, str, bool], tuple[str, str, tuple[()]]] = {}
        """(type, text, normalize) of a schema without references that a request gave ->
        its identity, the last :data:`ASKED_IDENTITIES` of them."""
        self._asking = threading.Lock()

    # ----------------------------------------------------------------- reads

    def subjects(self, deleted: bool = False, prefix: str = "",
                 deleted_only: bool = False) -> list[str]:
        """Subjects with a live version; ``deleted`` adds those whose every version
        is soft-deleted, ``deleted_only`` lists only those."""
        with self.changed:
            found = []
            for subject, versions in self.state.subjects.items():
                live = any(not v.deleted for v in versions.values())
                if subject.startswith(prefix) and (
                        (live and not deleted_only) or (not live and (deleted or deleted_only))):
                    found.append(subject)
            return sorted(found)

    def versions(self, subject: str, deleted: bool = False,
                 deleted_only: bool = False) -> list[int]:
        with self.changed:
            versions = list(self.state.subjects.get(subject, {}).values())
        found = [v.version for v in versions
                 if (v.deleted and (deleted or deleted_only)) or not (v.deleted or deleted_only)]
        if not versions or (not found and not deleted_only):
            raise errors.subject_not_found(subject)
        return found

    def version(self, subject: str, version: str, deleted: bool = False) -> SubjectVersion:
        number = parse_version(version)
        with self.changed:
            versions = self.state.subjects.get(subject, {})
            live = [v for v in versions.values() if deleted or not v.deleted]
            if not live:
                raise errors.subject_not_found(subject)
            if number is None:
                return live[-1]
            found = versions.get(number)
            if found is None or (found.deleted and not deleted):
                raise errors.version_not_found(number)
            return found

    def schema(self, schema_id: int) -> StoredSchema:
        with self.changed:
            found = self.state.by_id.get(schema_id)
        if found is None:
            raise errors.schema_not_found(schema_id)
        return found

    def schema_versions(self, schema_id: int, deleted: bool = False) -> list[SubjectVersion]:
        with self.changed:
            if schema_id not in self.state.by_id:
                raise errors.schema_not_found(schema_id)
            return self.state.versions_of_id(schema_id, deleted)

    def all_versions(self, prefix: str = "", deleted: bool = False,
                     latest_only: bool = False) -> list[SubjectVersion]:
        with self.changed:
            found = []
            for subject in sorted(self.state.subjects):
                if not subject.startswith(prefix):
                    continue
                versions = [v for v in self.state.subjects[subject].values()
                            if deleted or not v.deleted]
                found += versions[-1:] if latest_only else versions
            return found

    def lookup(self, subject: str, request: SchemaRequest, normalize: bool,
               deleted: bool = False) -> SubjectVersion:
        """The subject's (latest) version holding ``request``'s schema. A serializer
        asks this for every schema it writes with (``auto.register.schemas=false``),
        so the identity of a schema asked for before is not parsed again
        (:meth:`parsed_already`)."""
        identity = self._request_identity(request, normalize)
        with self.changed:
            versions = [v for v in self.state.subjects.get(subject, {}).values()
                        if deleted or not v.deleted]
        if not versions:
            raise errors.subject_not_found(subject)
        for version in reversed(versions):
            if self._identity_of(version.schema, normalize) == identity:
                return version
        raise errors.schema_not_found()

    def referenced_by(self, subject: str, version: str) -> list[int]:
        """The ids of the live versions whose schema references this one."""
        found = self.version(subject, version)
        with self.changed:
            return sorted({v.schema.schema_id
                           for v in self.state.referrers(subject, found.version)})

    def compatibility_level(self, subject: str | None = None,
                            default_to_global: bool = True) -> str:
        with self.changed:
            if subject is not None and subject in self.state.configs:
                return self.state.configs[subject]
            if subject is not None and not default_to_global:
                raise errors.subject_config_not_found(subject)
            return self.state.configs.get(None, DEFAULT_LEVEL)

    def mode(self, subject: str | None = None, default_to_global: bool = True) -> str:
        with self.changed:
            if subject is not None and subject in self.state.modes:
                return self.state.modes[subject]
            if subject is not None and not default_to_global:
                raise errors.subject_mode_not_found(subject)
            return self.state.modes.get(None, DEFAULT_MODE)

    def check(self, subject: str, request: SchemaRequest, version: str | None,
              normalize: bool = False) -> list[str]:
        """Why ``request`` breaks the subject's level against ``version`` (every
        version the level checks when None); empty when compatible."""
        new = self._parse(request)
        level = self.compatibility_level(subject)
        if version is None:
            with self.changed:
                earlier = [self._parsed_of(v.schema) for v in self.state.live_versions(subject)]
            return incompatibilities(level, new, earlier)
        old = self.version(subject, version)
        return incompatibilities(level.removesuffix("_TRANSITIVE"), new,
                                 [self._parsed_of(old.schema)])

    def text_in_format(self, schema: StoredSchema, fmt: str | None) -> str:
        """The schema's text, or with ``fmt`` "serialized" a Protobuf schema as a
        base64 ``FileDescriptorProto`` whichever form it was registered in."""
        if fmt != "serialized" or schema.schema_type != "PROTOBUF":
            return schema.text
        from gregor.schemas.protobuf_format import ProtobufSchema
        parsed = self._parsed_of(schema)
        assert isinstance(parsed, ProtobufSchema)
        return parsed.serialized()

    # ----------------------------------------------------------------- writes

    def register(self, subject: str, request: SchemaRequest, normalize: bool = False) -> int:
        with self._writing:
            mode = self.mode(subject)
            if mode == "READONLY":
                raise errors.operation_not_permitted(f"Subject {subject} is in read-only mode")
            importing = request.schema_id is not None or request.version is not None
            if importing and mode != "IMPORT":
                raise errors.operation_not_permitted(
                    f"Subject {subject} is not in import mode: a schema id or version "
                    "cannot be given")
            new = self._parse(request)
            identity = self._identity(request.schema_type, new, request.references, normalize)
            with self.changed:
                versions = list(self.state.subjects.get(subject, {}).values())
            live = [v for v in versions if not v.deleted]
            for version in live:
                if self._identity_of(version.schema, normalize) == identity and not importing:
                    return version.schema.schema_id
            if mode != "IMPORT":
                problems = self.check(subject, request, None, normalize)
                if problems:
                    raise errors.incompatible(subject, problems)
            schema_id = self._id_for(identity, request.schema_id)
            number = request.version or (versions[-1].version + 1 if versions else 1)
            text = identity[1]
            self.topic.write(records.schema_key(subject, number),
                             records.schema_value(subject, number, schema_id,
                                                  request.schema_type, text,
                                                  request.references, False))
            return schema_id

    def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        with self._writing:
            with self.changed:
                versions = list(self.state.subjects.get(subject, {}).values())
            if not versions:
                raise errors.subject_not_found(subject)
            live = [v for v in versions if not v.deleted]
            if permanent and live:
                raise errors.subject_not_soft_deleted(subject)
            if not permanent and not live:
                raise errors.subject_soft_deleted(subject)
            self._refuse_if_referenced(live if live else versions)
            if not permanent:
                self.topic.write(records.delete_subject_key(subject),
                                 records.delete_subject_value(subject, live[-1].version))
                return [v.version for v in live]
            for version in versions:
                self.topic.write(records.schema_key(subject, version.version), None)
            with self.changed:
                configured = subject in self.state.configs
            if configured:
                self.topic.write(records.config_key(subject), None)
            return [v.version for v in versions]

    def delete_version(self, subject: str, version: str, permanent: bool) -> int:
        with self._writing:
            number = parse_version(version)
            with self.changed:
                versions = self.state.subjects.get(subject, {})
                if not versions:
                    raise errors.subject_not_found(subject)
                if number is None:
                    live = [v for v in versions.values() if not v.deleted]
                    if not live:
                        raise errors.version_not_found(version)
                    found: SubjectVersion | None = live[-1]
                else:
                    found = versions.get(number)
            if found is None:
                raise errors.version_not_found(version)
            if permanent and not found.deleted:
                raise errors.version_not_soft_deleted(subject, found.version)
            if not permanent and found.deleted:
                raise errors.version_soft_deleted(subject, found.version)
            self._refuse_if_referenced([found])
            schema = found.schema
            key = records.schema_key(subject, found.version)
            self.topic.write(key, None if permanent else records.schema_value(
                subject, found.version, schema.schema_id, schema.schema_type, schema.text,
                schema.references, True))
            return found.version

    def set_compatibility(self, subject: str | None, level: object) -> str:
        level = validate_level(level)
        with self._writing:
            self.topic.write(records.config_key(subject), records.config_value(level))
        return level

    def delete_compatibility(self, subject: str | None) -> str:
        """Forget a level (the global one returns to BACKWARD); the level it had."""
        with self._writing:
            previous = self.compatibility_level(subject)
            if subject is not None and subject not in self.subjects(deleted=True):
                raise errors.subject_not_found(subject)
            self.topic.write(records.config_key(subject), None)
            return previous

    def set_mode(self, subject: str | None, mode: object, force: bool = False) -> str:
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise errors.invalid_mode(mode)
        mode = mode.upper()
        with self._writing:
            if mode == "IMPORT" and not force and self.subjects(
                    deleted=True, prefix=subject or ""):
                raise errors.operation_not_permitted(
                    "Cannot import since found existing subjects")
            self.topic.write(records.mode_key(subject), records.mode_value(mode))
        return mode

    def delete_mode(self, subject: str) -> str:
        with self._writing:
            previous = self.mode(subject)
            self.topic.write(records.mode_key(subject), None)
            return previous

    # --------------------------------------------------------------- helpers

    def _parse(self, request: SchemaRequest) -> ParsedSchema:
        return parse_schema(request.schema_type, request.text,
                            list(self._resolve(request.references, set())))

    def _parsed_of(self, schema: StoredSchema) -> ParsedSchema:
        """A stored schema parsed once: the topic's records never change."""
        parsed = self._parsed.get(schema.schema_id)
        if parsed is None:
            parsed = self._parse(SchemaRequest(schema.schema_type, schema.text,
                                               schema.references))
            self._parsed[schema.schema_id] = parsed
        return parsed

    def _resolve(self, references: tuple[Reference, ...], seen: set[Reference],
                 ) -> Iterator[ResolvedReference]:
        """The referenced schemas, each after the ones it references; 42201 for a
        reference to no live version."""
        for reference in references:
            if reference in seen:
                continue
            seen.add(reference)
            with self.changed:
                found = self.state.subjects.get(reference.subject, {}).get(reference.version)
            if found is None or found.deleted:
                raise errors.invalid_schema(
                    f"reference {reference.name} to {reference.subject} version "
                    f"{reference.version}: no such version")
            yield from self._resolve(found.schema.references, seen)
            yield ResolvedReference(reference.name, found.schema.schema_type,
                                    found.schema.text)

    @staticmethod
    def _identity(schema_type: str, parsed: ParsedSchema, references: tuple[Reference, ...],
                  normalize: bool) -> tuple[str, str, tuple[Reference, ...]]:
        """What makes two registrations the same schema (and so the same id)."""
        return (schema_type, parsed.normalized() if normalize else parsed.canonical(),
                references)

    def _identity_of(self, schema: StoredSchema, normalize: bool,
                     ) -> tuple[str, str, tuple[Reference, ...]]:
        key = (schema.schema_id, normalize)
        found = self._stored_identities.get(key)
        if found is None:
            found = self._identity(schema.schema_type, self._parsed_of(schema),
                                   schema.references, normalize)
            self._stored_identities[key] = found
        return found

    def parsed_already(self, request: SchemaRequest, normalize: bool) -> bool:
        """Whether :meth:`lookup` answers ``request`` without parsing it: a schema
        without references asked for recently. (One with references is parsed each
        time: parsing checks that what it references is still there.)"""
        return (request.schema_type, request.text, normalize) in self._asked_identities

    def _request_identity(self, request: SchemaRequest, normalize: bool,
                          ) -> tuple[str, str, tuple[Reference, ...]]:
        if request.references:
            return self._identity(request.schema_type, self._parse(request),
                                  request.references, normalize)
        key = (request.schema_type, request.text, normalize)
        found = self._asked_identities.get(key)
        if found is None:
            identity = self._identity(request.schema_type, self._parse(request), (), normalize)
            found = (identity[0], identity[1], ())
            with self._asking:
                if len(self._asked_identities) >= ASKED_IDENTITIES:
                    # The oldest goes (dicts keep insertion order); parsed again if asked.
                    del self._asked_identities[next(iter(self._asked_identities))]
                self._asked_identities[key] = found
        return found

    def _id_for(self, identity: tuple[str, str, tuple[Reference, ...]],
                wanted: int | None) -> int:
        """The id of the same schema under any subject, else the next never used; in
        IMPORT mode the id asked for, unless it holds another schema."""
        with self.changed:
            known = dict(self.state.by_id)
            max_id = self.state.max_id
        if wanted is not None:
            taken = known.get(wanted)
            if taken is not None and self._identity_of(taken, False)[1:] != identity[1:]:
                raise errors.operation_not_permitted(
                    f"Overwrite new schema with id {wanted} is not permitted.")
            return wanted
        for schema_id, schema in known.items():
            if schema_id not in self._indexed:
                self._indexed.add(schema_id)
                for normalize in (False, True):
                    self._ids.setdefault(self._identity_of(schema, normalize), schema_id)
        found = self._ids.get(identity)
        # A permanently deleted schema's id is not handed out again for it.
        return found if found in known else max_id + 1

    def _refuse_if_referenced(self, versions: list[SubjectVersion]) -> None:
        with self.changed:
            for version in versions:
                if self.state.referrers(version.subject, version.version):
                    raise errors.reference_exists(version.subject, version.version)
