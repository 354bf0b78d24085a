"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topics' configs, and the
brokers', of which the topics' defaults can change while brokers run (for one broker,
named by its id, or for the cluster, named by the empty string), as with Kafka's
``kafka-configs.sh --entity-type brokers``; and a broker's loggers' levels
(``broker_loggers``)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gregor.broker import logger_configs
from gregor.broker.authorization import allowed, topic_allowed
from gregor.broker.logger_configs import BROKER_LOGGER_RESOURCE
from gregor.broker.request import Request
from gregor.cluster.controller import ControllerError, changed_broker_configs
from gregor.cluster.metadata_image import DEFAULT_BROKER_CONFIGS
from gregor.config import (
    BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigError,
    ConfigSource,
    ConfigType,
    TopicConfig,
    format_value,
    is_key_store_config,
    is_sasl_config,
)
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.codec import build, nested, response_schema
from gregor.protocol.errors import ErrorCode
from gregor.security import tls
from gregor.security.acls import Operation, ResourceType
from gregor.security.sasl_mechanisms import listener_sasl

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
        if definition.broker_synonym and broker_source != ConfigSource.DEFAULT_CONFIG:
            synonyms.append((definition.broker_synonym, format_value(broker_value), broker_source))
        entries.append(ConfigEntry(name, format_value(config[name]), False, config.source(name),
                                   definition.type, definition.doc, tuple(synonyms)))
    return entries


def _describe_broker_configs(broker: Broker, keys: tuple[str, ...] | None) -> list[ConfigEntry]:
    """This broker's configs, each from where its value comes: set while running for it
    or for the cluster, the static configuration, or the default (the synonyms list
    every one of those that is set, in that order)."""
    config = broker.config
    layers = ((config.dynamic, ConfigSource.DYNAMIC_BROKER_CONFIG),
              (config.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
              ({n: config[n] for n in config.explicit}, ConfigSource.STATIC_BROKER_CONFIG))
    entries = []
    for name, definition in sorted(BROKER_CONFIGS.items()):
        if keys and name not in keys:
            continue
        value, source = config.broker_value(name)
        synonyms = tuple((name, format_value(values[name]), layer_source)
                         for values, layer_source in layers if name in values)
        read_only = (name not in DYNAMIC_BROKER_CONFIGS and not is_key_store_config(name)
                     and not is_sasl_config(name))
        entries.append(ConfigEntry(name, format_value(value), read_only,
                                   source, definition.type, definition.doc, synonyms))
    return entries


def _describe_cluster_default(broker: Broker, keys: tuple[str, ...] | None) -> list[ConfigEntry]:
    """The empty broker name: the cluster's default dynamic configs alone, as Kafka."""
    stored = broker.image.broker_configs.get(DEFAULT_BROKER_CONFIGS, {})
    source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    return [ConfigEntry(name, value, False, source, BROKER_CONFIGS[name].type,
                        BROKER_CONFIGS[name].doc, ((name, value, source),))
            for name, value in sorted(stored.items()) if not keys or name in keys]


def _denied(broker: Broker, request: Request, resource: Any, operation: Operation
            ) -> tuple[ErrorCode, str] | None:
    """Topic configs need the operation on the topic, broker (and logger) configs on the
    cluster."""
    if resource.resource_type == TOPIC_RESOURCE:
        if not topic_allowed(broker, request, operation, resource.resource_name):
            return ErrorCode.topic_authorization_failed, "Authorization failed."
    elif resource.resource_type in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE) and not allowed(
            broker, request, operation, ResourceType.CLUSTER):
        return ErrorCode.cluster_authorization_failed, "Authorization failed."
    return None


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
        denied = _denied(broker, request, resource, Operation.DESCRIBE_CONFIGS)
        if denied is not None:
            error, message = denied
        elif resource.resource_type == TOPIC_RESOURCE:
            topic = broker.image.topics.get(resource.resource_name)
            if topic is None:
                error, message = ErrorCode.unknown_topic_or_partition, "unknown topic"
            else:
                entries = describe_topic_configs(broker, topic.configs, keys)
        elif resource.resource_type == BROKER_RESOURCE:
            if resource.resource_name == "":
                entries = _describe_cluster_default(broker, keys)
            elif resource.resource_name != str(broker.broker_id):
                error, message = ErrorCode.invalid_request, "unknown broker"
            else:
                entries = _describe_broker_configs(broker, keys)
        elif resource.resource_type == BROKER_LOGGER_RESOURCE:
            if resource.resource_name != str(broker.broker_id):
                error, message = ErrorCode.invalid_request, _unexpected_broker(broker, resource)
            else:
                entries = [ConfigEntry(name, level, False,
                                       ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG,
                                       ConfigType.STRING, "", ())
                           for name, level in logger_configs.describe(keys)]
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


def _incremental_changes(current: Mapping[str, str], configs, definitions: Mapping[str, ConfigDef]
                         ) -> tuple[dict[str, str], list[str]]:
    set_values: dict[str, str] = {}
    deleted: list[str] = []
    for change in configs:
        op = change.config_operation
        if op == _SET:
            set_values[change.name] = change.value or ""
        elif op == _DELETE:
            deleted.append(change.name)
        elif op in (_APPEND, _SUBTRACT):
            definition = definitions.get(change.name)
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
    unknown = [name for name in deleted if name not in definitions]
    if unknown:
        raise ConfigError(f"unknown config {unknown[0]!r}")
    return set_values, deleted


async def _alter(broker: Broker, request: Request, key: ApiKey, incremental: bool):
    version = request.version
    response_cls = nested(key, version, "AlterConfigsResourceResponse")
    responses = []
    for resource in request.body.resources:
        error, message = ErrorCode.none, None
        try:
            denied = _denied(broker, request, resource, Operation.ALTER_CONFIGS)
            if denied is not None:
                raise ControllerError(*denied)
            if resource.resource_type == TOPIC_RESOURCE:
                await _alter_topic(broker, resource, incremental, request.body.validate_only)
            elif resource.resource_type == BROKER_RESOURCE:
                await _alter_broker(broker, resource, incremental, request.body.validate_only)
            elif resource.resource_type == BROKER_LOGGER_RESOURCE and incremental:
                if resource.resource_name != str(broker.broker_id):
                    raise ControllerError(ErrorCode.invalid_request,
                                          _unexpected_broker(broker, resource))
                logger_configs.alter(((c.config_operation, c.name, c.value)
                                      for c in resource.configs), request.body.validate_only)
            else:
                raise ControllerError(ErrorCode.invalid_request,
                                      "only topic and broker configs can be altered")
        except ConfigError as exc:
            error, message = ErrorCode.invalid_config, str(exc)
        except ControllerError as exc:
            error, message = exc.error, str(exc)
        responses.append(build(response_cls, error_code=error, error_message=message,
                               resource_type=resource.resource_type,
                               resource_name=resource.resource_name))
    return build(response_schema(key, version), throttle_time=_NO_THROTTLE,
                 responses=tuple(responses))


def _changes(current: Mapping[str, str], resource, incremental: bool,
             definitions: Mapping[str, ConfigDef]) -> tuple[dict[str, str], list[str]]:
    """What to set and what to delete: AlterConfigs sets what it names (and the rest
    goes back to its default); IncrementalAlterConfigs says per config."""
    if incremental:
        return _incremental_changes(current, resource.configs, definitions)
    return {c.name: c.value or "" for c in resource.configs}, []


async def _alter_topic(broker: Broker, resource, incremental: bool, validate_only: bool) -> None:
    topic = broker.image.topics.get(resource.resource_name)
    if topic is None:
        raise ControllerError(ErrorCode.unknown_topic_or_partition, "unknown topic")
    set_values, deleted = _changes(topic.configs, resource, incremental, TOPIC_CONFIGS)
    await broker.controller.alter_topic_configs(topic.name, set_values, deleted,
                                                validate_only=validate_only,
                                                replace=not incremental)


async def _alter_broker(broker: Broker, resource, incremental: bool, validate_only: bool
                        ) -> None:
    """This broker's dynamic configs (named by its id), or the cluster's (the empty
    name); another broker's are that broker's to change, as in Kafka."""
    name = resource.resource_name
    if name == "":
        entity = DEFAULT_BROKER_CONFIGS
    elif name == str(broker.broker_id):
        entity = name
    else:
        raise ControllerError(ErrorCode.invalid_request,
                              f"Unexpected broker id, expected {broker.broker_id} or empty "
                              f"string, but received {name}")
    set_values, deleted = _changes(broker.image.broker_configs.get(entity, {}), resource,
                                   incremental, BROKER_CONFIGS)
    changed = (*set_values, *deleted)
    key_stores = any(is_key_store_config(name) for name in changed)
    if key_stores or any(is_sasl_config(name) for name in changed):
        _check_listener_settings(
            broker, entity, changed_broker_configs(broker.image, entity, set_values, deleted,
                                                   replace=not incremental),
            "key store settings" if key_stores else "SASL settings")
    await broker.controller.alter_broker_configs(entity, set_values, deleted,
                                                 validate_only=validate_only,
                                                 replace=not incremental)


def _check_listener_settings(broker: Broker, entity: str, configs: Mapping[str, str],
                             what: str) -> None:
    """A broker's own key stores and SASL settings only (Kafka's per-broker listener
    configs), and only ones every listener can serve with: its TLS context and SASL
    mechanisms are built from them first, as Kafka checks a new SSL factory before
    taking it."""
    if entity == DEFAULT_BROKER_CONFIGS:
        raise ControllerError(ErrorCode.invalid_request,
                              "Cannot update these configs at default cluster level, broker id "
                              f"must be specified: {what}")
    trial = broker.config.with_dynamic(configs)
    for listener in broker.listeners:
        try:
            if listener.protocol.tls:
                tls.server_context(trial, listener.name, listener.protocol.sasl)
            if listener.protocol.sasl:
                listener_sasl(trial, listener.name, lambda user, mechanism: None)
        except ConfigError as exc:
            raise ControllerError(ErrorCode.invalid_config,
                                  f"listener {listener.name}: {exc}") from None


def _unexpected_broker(broker: Broker, resource: Any) -> str:
    return (f"Unexpected broker id, expected {broker.broker_id}, but received "
            f"{resource.resource_name}")


async def handle_incremental_alter(broker: Broker, request: Request):
    return await _alter(broker, request, ApiKey.INCREMENTAL_ALTER_CONFIGS, incremental=True)


async def handle_alter(broker: Broker, request: Request):
    return await _alter(broker, request, ApiKey.ALTER_CONFIGS, incremental=False)
