"""Controller: the single writer of the metadata image (topics, partitions, configs).

On one node the broker is its own controller. With a cluster this role moves to
whichever broker wins the ZooKeeper election; handlers already go through it so
they will not change.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping

from gregor.cluster.metadata_image import MetadataImage, PartitionAssignment, TopicMetadata
from gregor.cluster.replica_manager import ReplicaManager
from gregor.cluster.topic_names import invalid_topic_reason
from gregor.config import BrokerConfig, ConfigError, TopicConfig, format_value
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

MAX_PARTITIONS = 10_000


class ControllerError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


class Controller:
    def __init__(self, config: BrokerConfig, image: MetadataImage,
                 replica_manager: ReplicaManager) -> None:
        self.config = config
        self.image = image
        self.replica_manager = replica_manager
        self.broker_id = config.node_id

    @property
    def live_brokers(self) -> list[int]:
        return [self.broker_id]

    def validate_new_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: Mapping[str, str]) -> tuple[int, int, dict[str, str]]:
        """Check a CreateTopics entry; return the resolved partition count, RF and configs."""
        reason = invalid_topic_reason(name)
        if reason:
            raise ControllerError(ErrorCode.invalid_topic_exception, reason)
        if name in self.image.topics:
            raise ControllerError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        if num_partitions == -1:
            num_partitions = self.config["num.partitions"]
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if num_partitions <= 0 or num_partitions > MAX_PARTITIONS:
            raise ControllerError(ErrorCode.invalid_partitions,
                                  f"partition count must be between 1 and {MAX_PARTITIONS}")
        if replication_factor <= 0:
            raise ControllerError(ErrorCode.invalid_replication_factor,
                                  "replication factor must be positive")
        if replication_factor > len(self.live_brokers):
            raise ControllerError(
                ErrorCode.invalid_replication_factor,
                f"replication factor {replication_factor} is larger than the "
                f"{len(self.live_brokers)} available broker(s)")
        try:
            TopicConfig(self.config, configs)
        except ConfigError as exc:
            raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
        return num_partitions, replication_factor, dict(configs)

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     configs: Mapping[str, str] | None = None, *, internal: bool = False,
                     validate_only: bool = False) -> TopicMetadata:
        num_partitions, replication_factor, resolved = self.validate_new_topic(
            name, num_partitions, replication_factor, configs or {})
        normalized = {k: format_value(v) for k, v in
                      TopicConfig(self.config, resolved).overrides.items()}
        topic = TopicMetadata(
            name=name, topic_id=str(uuid.uuid4()), configs=normalized, internal=internal,
            partitions=[self._assign(i) for i in range(num_partitions)])
        if validate_only:
            return topic
        self.image.topics[name] = topic
        self.image.save()
        self.replica_manager.make_partitions(topic)
        log.info("created topic %s with %d partition(s)", name, num_partitions)
        return topic

    def _assign(self, index: int) -> PartitionAssignment:
        brokers = self.live_brokers
        leader = brokers[index % len(brokers)]
        return PartitionAssignment(replicas=[leader], leader=leader, isr=[leader])

    def delete_topic(self, name: str) -> TopicMetadata:
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

    def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        topic = self.image.topics.get(name)
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
        if validate_only:
            return
        topic.partitions.extend(self._assign(i) for i in range(current, count))
        self.image.save()
        self.replica_manager.make_partitions(topic)

    def alter_topic_configs(self, name: str, set_values: Mapping[str, str],
                            deleted: list[str], validate_only: bool = False,
                            replace: bool = False) -> None:
        topic = self.image.topics.get(name)
        if topic is None:
            raise ControllerError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
        current = TopicConfig(self.config, {} if replace else topic.configs)
        try:
            updated = current.with_changes(set_values, deleted)
        except ConfigError as exc:
            raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
        if validate_only:
            return
        topic.configs = updated.raw_overrides()
        self.image.save()
        self.replica_manager.update_config(topic)
