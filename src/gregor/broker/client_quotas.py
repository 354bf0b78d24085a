"""DescribeClientQuotas and AlterClientQuotas (KIP-546): the quotas behind
``kafka-configs.sh --entity-type users|clients``, Kafka's admin clients'
``describeClientQuotas``/``alterClientQuotas`` and ``gregor quotas``.

Quotas are entity configs of users, client ids and both, named or default
(:mod:`gregor.security.quota_entities`), stored with the users' other configs (ZooKeeper's
``/config/users`` and ``/config/clients`` in a cluster). Describing needs DESCRIBE_CONFIGS
on the cluster, altering ALTER_CONFIGS, as in Kafka; errors are Kafka's, per entity for
an alteration (one bad operation and none of that entity's is applied).
"""

from __future__ import annotations

import datetime
import math
from typing import TYPE_CHECKING, Any

from gregor.broker.authorization import allowed
from gregor.broker.request import Request
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security.acls import Operation, ResourceType
from gregor.security.quota_entities import (
    CLIENT_ID,
    QUOTA_KEYS,
    USER,
    components_of,
    entity_path,
)

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

_NO_THROTTLE = datetime.timedelta(0)
_CLUSTER_DENIED = "Cluster authorization failed."
# DescribeClientQuotas' match types.
_EXACT, _DEFAULT, _SPECIFIED = 0, 1, 2


class _Refused(ValueError):
    """A request Kafka answers with INVALID_REQUEST, and why."""


async def handle_describe(broker: Broker, request: Request):
    key, version = ApiKey.DESCRIBE_CLIENT_QUOTAS, request.version
    schema = response_schema(key, version)
    if not allowed(broker, request, Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return build(schema, throttle_time=_NO_THROTTLE,
                     error_code=ErrorCode.cluster_authorization_failed,
                     error_message=_CLUSTER_DENIED, entries=None)
    try:
        matches = _filter(request.body.components)
    except _Refused as exc:
        return build(schema, throttle_time=_NO_THROTTLE, error_code=ErrorCode.invalid_request,
                     error_message=str(exc), entries=None)
    entry_cls = nested(key, version, "EntryData")
    entity_cls = nested(key, version, "EntityData")
    value_cls = nested(key, version, "ValueData")
    entries = []
    for path, values in sorted(broker.image.client_quotas.entities.items()):
        entity = components_of(path)
        if not _matches(entity, matches, request.body.strict):
            continue
        entries.append(build(
            entry_cls,
            entity=tuple(build(entity_cls, entity_type=kind, entity_name=name)
                         for kind, name in entity.items()),
            values=tuple(build(value_cls, key=name, value=value)
                         for name, value in sorted(values.items()))))
    return build(schema, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none,
                 error_message=None, entries=tuple(entries))


def _filter(components: Any) -> dict[str, tuple[int, str | None]]:
    """The request's filter: entity type -> (match type, name)."""
    result: dict[str, tuple[int, str | None]] = {}
    for component in components:
        kind, match_type, match = (component.entity_type, component.match_type,
                                   component.match)
        if kind not in (USER, CLIENT_ID):
            raise _Refused(f"Custom entity type '{kind}' not supported")
        if kind in result:
            raise _Refused(f"Duplicate filter component entity type {kind}")
        if match_type == _EXACT and match is None:
            raise _Refused(f"Exact match filter component for {kind} needs a name")
        if match_type not in (_EXACT, _DEFAULT, _SPECIFIED):
            raise _Refused(f"Unknown match type {match_type}")
        result[kind] = (match_type, match)
    return result


def _matches(entity: dict[str, str | None], matches: dict[str, tuple[int, str | None]],
             strict: bool) -> bool:
    """Kafka's filter: every component matches the entity's name of its type (exact,
    the default, or any name); strict, the entity has no other type."""
    if strict and entity.keys() - matches.keys():
        return False
    for kind, (match_type, match) in matches.items():
        if kind not in entity:
            return False
        name = entity[kind]
        if match_type == _EXACT and name != match or match_type == _DEFAULT and name is not None \
                or match_type == _SPECIFIED and name is None:
            return False
    return True


async def handle_alter(broker: Broker, request: Request):
    key, version = ApiKey.ALTER_CLIENT_QUOTAS, request.version
    entry_cls = nested(key, version, "EntryData")
    entity_cls = nested(key, version, "EntityData")
    may_alter = allowed(broker, request, Operation.ALTER_CONFIGS, ResourceType.CLUSTER)
    results = []
    changes: dict[str, dict[str, float | None]] = {}
    for entry in request.body.entries:
        error, message = ErrorCode.none, None
        if not may_alter:
            error, message = ErrorCode.cluster_authorization_failed, _CLUSTER_DENIED
        else:
            try:
                path, entity_changes = _alteration(entry)
                if path in changes:
                    raise _Refused("Duplicate quota entity in the request")
                changes[path] = entity_changes
            except _Refused as exc:
                error, message = ErrorCode.invalid_request, str(exc)
        results.append(build(entry_cls, error_code=error, error_message=message, entity=tuple(
            build(entity_cls, entity_type=e.entity_type, entity_name=e.entity_name)
            for e in entry.entity)))
    if changes and not request.body.validate_only:
        await broker.user_configs.alter_quotas(changes)
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 entries=tuple(results))


def _alteration(entry: Any) -> tuple[str, dict[str, float | None]]:
    """One entry's entity path and quota changes, refused as Kafka refuses them."""
    components: dict[str, str | None] = {}
    for entity in entry.entity:
        if entity.entity_type in components:
            raise _Refused(f"Duplicate {entity.entity_type} entity type")
        components[entity.entity_type] = entity.entity_name
    try:
        path = entity_path(components)
    except ValueError as exc:
        raise _Refused(str(exc)) from None
    changes: dict[str, float | None] = {}
    for op in entry.ops:
        whole = QUOTA_KEYS.get(op.key)
        if whole is None:
            raise _Refused(f"Invalid configuration key {op.key}")
        if op.key in changes:
            raise _Refused(f"Duplicate quota key {op.key}")
        if op.remove:
            changes[op.key] = None
            continue
        if not math.isfinite(op.value):
            raise _Refused(f"Configuration {op.key} must be a finite number")
        if whole and op.value != int(op.value):
            raise _Refused(f"Configuration {op.key} must be a Long value")
        if not op.value > 0:
            raise _Refused(f"Configuration {op.key} must be positive")
        changes[op.key] = float(op.value)
    return path, changes
