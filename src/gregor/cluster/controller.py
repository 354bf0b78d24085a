"""ClusterAdmin and the single-node controller: how handlers change cluster metadata.

Handlers create and delete topics, add partitions, change configs and hand out
producer ids through a ``ClusterAdmin``, without knowing where metadata lives. On
one node the broker is its own controller and writes its local image at once
(``SingleNodeController``); in a cluster any broker writes the request to
ZooKeeper and the elected controller carries it out (``cluster.zk_admin``). Its
methods are coroutines because in a cluster they wait on ZooKeeper.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gregor.cluster.election import AssignmentError, assign_replicas
from gregor.cluster.metadata_image import MetadataImage, TopicMetadata
from gregor.cluster.partition_state import PartitionState
from gregor.cluster.replica_manager import ReplicaManager
from gregor.cluster.topic_names import invalid_topic_reason
from gregor.config import (
    BrokerConfig,
    ConfigError,
    NotDynamicError,
    TopicConfig,
    check_dynamic,
    format_value,
    validate_dynamic,
)
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

MAX_PARTITIONS = 10_000


class ControllerError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


class ClusterAdmin(Protocol):
    image: MetadataImage

    @property
    def live_brokers(self) -> list[int]: ...

    async def create_topic(self, name: str, num_partitions: int = -1,
                           replication_factor: int = -1,
                           configs: Mapping[str, str] | None = None, *,
                           assignment: list[tuple[int, ...]] | None = None,
                           internal: bool = False,
                           validate_only: bool = False) -> TopicMetadata: ...

    async def delete_topic(self, name: str, timeout_s: float = 0.0) -> TopicMetadata:
        """Delete a topic, waiting up to ``timeout_s`` (none when not positive) until this
        broker no longer has it, as Kafka's DeleteTopics does."""
        ...

    async def create_partitions(self, name: str, count: int,
                                assignment: list[tuple[int, ...]] | None = None,
                                validate_only: bool = False) -> None: ...

    async def alter_topic_configs(self, name: str, set_values: Mapping[str, str],
                                  deleted: list[str], validate_only: bool = False,
                                  replace: bool = False) -> None: ...

    async def alter_broker_configs(self, entity: str, set_values: Mapping[str, str],
                                   deleted: list[str], validate_only: bool = False,
                                   replace: bool = False) -> None:
        """Change the dynamic broker configs of ``entity``: a broker's id, or
        :data:`DEFAULT_BROKER_CONFIGS` for the cluster's default."""
        ...

    async def allocate_producer_id(self) -> int: ...


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A validated CreateTopics entry: what to write, wherever metadata lives."""

    name: str
    replicas: list[tuple[int, ...]]  # per partition
    configs: dict[str, str]  # normalized overrides


def validate_new_topic(config: BrokerConfig, image: MetadataImage, racks: Mapping[int, str | None],
                       name: str, num_partitions: int, replication_factor: int,
                       configs: Mapping[str, str],
                       assignment: list[tuple[int, ...]] | None) -> NewTopic:
    """Check a CreateTopics entry against Kafka's rules and place its replicas on the
    live brokers ``racks`` names (or check the placement the client gave)."""
    reason = invalid_topic_reason(name)
    if reason:
        raise ControllerError(ErrorCode.invalid_topic_exception, reason)
    if name in image.topics:
        raise ControllerError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
    if assignment is not None:
        _check_assignment(assignment, racks)
        num_partitions, replication_factor = len(assignment), len(assignment[0])
    if num_partitions == -1:
        num_partitions = config["num.partitions"]
    if replication_factor == -1:
        replication_factor = config["default.replication.factor"]
    if num_partitions <= 0 or num_partitions > MAX_PARTITIONS:
        raise ControllerError(ErrorCode.invalid_partitions,
                              f"partition count must be between 1 and {MAX_PARTITIONS}")
    if replication_factor <= 0:
        raise ControllerError(ErrorCode.invalid_replication_factor,
                              "replication factor must be positive")
    try:
        normalized = {k: format_value(v) for k, v in
                      TopicConfig(config, configs).overrides.items()}
    except ConfigError as exc:
        raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
    replicas = assignment or place_replicas(num_partitions, replication_factor, racks)
    return NewTopic(name, replicas, normalized)


def place_replicas(partitions: int, replication_factor: int, racks: Mapping[int, str | None],
                   first_partition: int = 0) -> list[tuple[int, ...]]:
    try:
        return assign_replicas(partitions, replication_factor, racks,
                               first_partition=first_partition)
    except AssignmentError as exc:
        raise ControllerError(ErrorCode.invalid_replication_factor, str(exc)) from None


def _check_assignment(assignment: list[tuple[int, ...]], live: Mapping[int, object]) -> None:
    sizes = {len(replicas) for replicas in assignment}
    if len(sizes) != 1 or 0 in sizes:
        raise ControllerError(ErrorCode.invalid_replica_assignment,
                              "every partition needs the same, non-zero number of replicas")
    for replicas in assignment:
        if len(set(replicas)) != len(replicas):
            raise ControllerError(ErrorCode.invalid_replica_assignment,
                                  f"replica list {list(replicas)} names a broker twice")
        unknown = [b for b in replicas if b not in live]
        if unknown:
            raise ControllerError(ErrorCode.invalid_replica_assignment,
                                  f"unknown or offline broker(s) {unknown}")


def new_partitions(topic: TopicMetadata | None, name: str, count: int,
                   assignment: list[tuple[int, ...]] | None, racks: Mapping[int, str | None]
                   ) -> tuple[TopicMetadata, list[tuple[int, ...]]]:
    """The topic a CreatePartitions grows to ``count``, and the replicas of the partitions
    it adds: those the client gave (one list per new partition, of the topic's
    replication factor, on live brokers), or placed here."""
    if topic is None:
        raise ControllerError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
    current = len(topic.partitions)
    if count <= current:
        raise ControllerError(
            ErrorCode.invalid_partitions,
            f"topic {name!r} has {current} partitions; the new count must be larger")
    if count > MAX_PARTITIONS:
        raise ControllerError(ErrorCode.invalid_partitions,
                              f"partition count must not exceed {MAX_PARTITIONS}")
    replication_factor = len(topic.partitions[0].replicas)
    if assignment is None:
        return topic, place_replicas(count - current, replication_factor, racks,
                                     first_partition=current)
    if len(assignment) != count - current:
        raise ControllerError(
            ErrorCode.invalid_replica_assignment,
            f"adding {count - current} partition(s) needs as many replica lists, "
            f"{len(assignment)} given")
    _check_assignment(assignment, racks)
    if len(assignment[0]) != replication_factor:
        raise ControllerError(
            ErrorCode.invalid_replica_assignment,
            f"topic {name!r} has {replication_factor} replica(s) per partition, "
            f"the assignment {len(assignment[0])}")
    return topic, assignment


def changed_topic_configs(config: BrokerConfig, topic: TopicMetadata | None, name: str,
                          set_values: Mapping[str, str], deleted: list[str],
                          replace: bool) -> dict[str, str]:
    """A topic's overrides after an (Incremental)AlterConfigs, validated."""
    if topic is None:
        raise ControllerError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
    current = TopicConfig(config, {} if replace else topic.configs)
    try:
        return current.with_changes(set_values, deleted).raw_overrides()
    except ConfigError as exc:
        raise ControllerError(ErrorCode.invalid_config, str(exc)) from None


def changed_broker_configs(image: MetadataImage, entity: str, set_values: Mapping[str, str],
                           deleted: list[str], replace: bool) -> dict[str, str]:
    """An entity's dynamic broker configs after an (Incremental)AlterConfigs, validated:
    INVALID_REQUEST for a config that cannot change while brokers run (Kafka's answer),
    INVALID_CONFIG for a value refused."""
    try:
        check_dynamic(deleted)
        changes = validate_dynamic(set_values)
    except NotDynamicError as exc:
        raise ControllerError(ErrorCode.invalid_request, str(exc)) from None
    except ConfigError as exc:
        raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
    configs = {} if replace else dict(image.broker_configs.get(entity, {}))
    for name in deleted:
        configs.pop(name, None)
    return configs | changes


class SingleNodeController:
    """The broker alone: it is every partition's only replica and its own controller."""

    def __init__(self, config: BrokerConfig, image: MetadataImage,
                 replica_manager: ReplicaManager) -> None:
        self.config = config
        self.image = image
        self.replica_manager = replica_manager
        self.broker_id = config.node_id

    @property
    def live_brokers(self) -> list[int]:
        return [self.broker_id]

    @property
    def _racks(self) -> dict[int, str | None]:
        return {self.broker_id: self.config.rack}

    async def create_topic(self, name: str, num_partitions: int = -1,
                           replication_factor: int = -1,
                           configs: Mapping[str, str] | None = None, *,
                           assignment: list[tuple[int, ...]] | None = None,
                           internal: bool = False,
                           validate_only: bool = False) -> TopicMetadata:
        new = validate_new_topic(self.config, self.image, self._racks, name, num_partitions,
                                 replication_factor, configs or {}, assignment)
        topic = TopicMetadata(
            name=name, topic_id=str(uuid.uuid4()), configs=new.configs, internal=internal,
            partitions=[_led_by_first(replicas) for replicas in new.replicas])
        if validate_only:
            return topic
        self.image.topics[name] = topic
        self.image.save()
        self.replica_manager.make_partitions(topic)
        log.info("created topic %s with %d partition(s)", name, len(new.replicas))
        return topic

    async def delete_topic(self, name: str, timeout_s: float = 0.0) -> TopicMetadata:
        if not self.config["delete.topic.enable"]:
            raise ControllerError(ErrorCode.topic_deletion_disabled, "delete.topic.enable is false")
        topic = self.image.topics.get(name)
        if topic is None:
            raise ControllerError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
        del self.image.topics[name]
        self.image.save()
        self.replica_manager.remove_topic(name)
        log.info("deleted topic %s", name)
        return topic

    async def create_partitions(self, name: str, count: int,
                                assignment: list[tuple[int, ...]] | None = None,
                                validate_only: bool = False) -> None:
        topic, replicas = new_partitions(self.image.topics.get(name), name, count, assignment,
                                         self._racks)
        if validate_only:
            return
        topic.partitions.extend(_led_by_first(r) for r in replicas)
        self.image.save()
        self.replica_manager.make_partitions(topic)

    async def alter_topic_configs(self, name: str, set_values: Mapping[str, str],
                                  deleted: list[str], validate_only: bool = False,
                                  replace: bool = False) -> None:
        topic = self.image.topics.get(name)
        overrides = changed_topic_configs(self.config, topic, name, set_values, deleted, replace)
        if validate_only or topic is None:
            return
        topic.configs = overrides
        self.image.save()
        self.replica_manager.update_config(topic)

    async def alter_broker_configs(self, entity: str, set_values: Mapping[str, str],
                                   deleted: list[str], validate_only: bool = False,
                                   replace: bool = False) -> None:
        configs = changed_broker_configs(self.image, entity, set_values, deleted, replace)
        if validate_only:
            return
        self.image.broker_configs[entity] = configs
        self.image.save()
        self.replica_manager.broker_configs_changed(self.image)

    async def allocate_producer_id(self) -> int:
        return self.image.allocate_producer_id()


def _led_by_first(replicas: tuple[int, ...]) -> PartitionState:
    return PartitionState(leader=replicas[0], leader_epoch=0, isr=replicas, replicas=replicas)
