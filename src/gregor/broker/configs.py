"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics (and broker reads)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gregor.broker.request import Request
from gregor.cluster.controller import ControllerError
from gregor.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigError,
    ConfigSource,
    TopicConfig,
    format_value,
)
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.broker.broker import Broker

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
_SET, _DELETE, _APPEND, _SUBTRACT = 0, 1, 2, 3
_NO_THROTTLE = datetime.timedelta(0)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    config_source: int
    config_type: int
    documentation: str
    synonyms: tuple[tuple[str, str, int], ...]


def describe_topic_configs(broker: Broker, overrides: Mapping[str, str],
                           keys: tuple[str, ...] | None) -> list[ConfigEntry]:
    config = TopicConfig(broker.config, overrides)
    entries = []
    for name, definition in sorted(TOPIC_CONFIGS.items()):
        if keys and name not in keys:
            continue
        synonyms = []
        if name in config.overrides:
            synonyms.append((name, format_value(config[name]), ConfigSource.DYNAMIC_TOPIC_CONFIG))
        broker_value, broker_source = broker.config.topic_default(name)
        if definition.broker_synonym and broker_source == ConfigSource.STATIC_BROKER_CONFIG:
            synonyms.append((definition.broker_synonym, format_value(broker_value), broker_source))
        entries.append(ConfigEntry(name, format_value(config[name]), False, config.source(name),
                                   definition.type, definition.doc, tuple(synonyms)))
    return entries


def _describe_broker_configs(broker: Broker, keys: tuple[str, ...] | None) -> list[ConfigEntry]:
    entries = []
    for name, definition in sorted(BROKER_CONFIGS.items()):
        if keys and name not in keys:
            continue
        source = (ConfigSource.STATIC_BROKER_CONFIG if name in broker.config.explicit
                  else ConfigSource.DEFAULT_CONFIG)
        entries.append(ConfigEntry(name, format_value(broker.config[name]), True, source,
                                   definition.type, definition.doc, ()))
    return entries


async def handle_describe(broker: Broker, request: Request):
    version = request.version
    key = ApiKey.DESCRIBE_CONFIGS
    result_cls = nested(key, version, "DescribeConfigsResult")
    entry_cls = nested(key, version, "DescribeConfigsResourceResult")
    synonym_cls = nested(key, version, "DescribeConfigsSynonym")
    include_synonyms = getattr(request.body, "include_synonyms", False)
    include_docs = getattr(request.body, "include_documentation", False)
    results = []
    for resource in request.body.resources:
        keys = tuple(resource.configuration_keys) if resource.configuration_keys else None
        error, message, entries = ErrorCode.none, None, []
        if resource.resource_type == TOPIC_RESOURCE:
            topic = broker.image.topics.get(resource.resource_name)
            if topic is None:
                error, message = ErrorCode.unknown_topic_or_partition, "unknown topic"
            else:
                entries = describe_topic_configs(broker, topic.configs, keys)
        elif resource.resource_type == BROKER_RESOURCE:
            if resource.resource_name not in ("", str(broker.broker_id)):
                error, message = ErrorCode.invalid_request, "unknown broker"
            else:
                entries = _describe_broker_configs(broker, keys)
        else:
            error, message = ErrorCode.invalid_request, "unsupported resource type"
        configs = tuple(build(
            entry_cls, name=e.name, value=e.value, read_only=e.read_only,
            config_source=e.config_source,
            is_default=e.config_source == ConfigSource.DEFAULT_CONFIG,
            is_sensitive=False,
            synonyms=tuple(build(synonym_cls, name=n, value=v, source=s) for n, v, s in e.synonyms)
            if include_synonyms else (),
            config_type=e.config_type, documentation=e.documentation if include_docs else None)
            for e in entries)
        results.append(build(result_cls, error_code=error, error_message=message,
                             resource_type=resource.resource_type,
                             resource_name=resource.resource_name, configs=configs))
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE, results=tuple(results))


def _incremental_changes(current: Mapping[str, str], configs) -> tuple[dict[str, str], list[str]]:
    set_values: dict[str, str] = {}
    deleted: list[str] = []
    for change in configs:
        op = change.config_operation
        if op == _SET:
            set_values[change.name] = change.value or ""
        elif op == _DELETE:
            deleted.append(change.name)
        elif op in (_APPEND, _SUBTRACT):
            definition = TOPIC_CONFIGS.get(change.name)
            if definition is None or definition.type.name != "LIST":
                raise ConfigError(f"{change.name} is not a list config; cannot append/subtract")
            existing = [v for v in current.get(change.name, format_value(definition.default))
                        .split(",") if v]
            items = [v.strip() for v in (change.value or "").split(",") if v.strip()]
            merged = (existing + [i for i in items if i not in existing] if op == _APPEND
                      else [v for v in existing if v not in items])
            set_values[change.name] = ",".join(merged)
        else:
            raise ConfigError(f"unknown config operation {op}")
    unknown = [name for name in deleted if name not in TOPIC_CONFIGS]
    if unknown:
        raise ConfigError(f"unknown topic config {unknown[0]!r}")
    return set_values, deleted


async def _alter(broker: Broker, request: Request, key: ApiKey, incremental: bool):
    version = request.version
    response_cls = nested(key, version, "AlterConfigsResourceResponse")
    responses = []
    for resource in request.body.resources:
        error, message = ErrorCode.none, None
        if resource.resource_type != TOPIC_RESOURCE:
            error = ErrorCode.invalid_request
            message = "only topic configs can be altered; broker configs are static"
        else:
            topic = broker.image.topics.get(resource.resource_name)
            try:
                if topic is None:
                    raise ControllerError(ErrorCode.unknown_topic_or_partition, "unknown topic")
                if incremental:
                    set_values, deleted = _incremental_changes(topic.configs, resource.configs)
                else:
                    set_values = {c.name: c.value or "" for c in resource.configs}
                    deleted = []
                await broker.controller.alter_topic_configs(
                    topic.name, set_values, deleted, validate_only=request.body.validate_only,
                    replace=not incremental)
            except ConfigError as exc:
                error, message = ErrorCode.invalid_config, str(exc)
            except ControllerError as exc:
                error, message = exc.error, str(exc)
        responses.append(build(response_cls, error_code=error, error_message=message,
                               resource_type=resource.resource_type,
                               resource_name=resource.resource_name))
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 responses=tuple(responses))


async def handle_incremental_alter(broker: Broker, request: Request):
    return await _alter(broker, request, ApiKey.INCREMENTAL_ALTER_CONFIGS, incremental=True)


async def handle_alter(broker: Broker, request: Request):
    return await _alter(broker, request, ApiKey.ALTER_CONFIGS, incremental=False)
