"""ZkClusterAdmin: metadata changes asked of any broker of a cluster, written to ZooKeeper.

As Kafka's AdminZkClient does, the broker that receives CreateTopics writes the
replica assignment (and config) itself; the controller sees the new topic and
elects its first leaders. Deletions are requests under ``/admin/delete_topics``
that the controller carries out. Producer ids come in blocks claimed with a
conditional write, so they are unique across the cluster. ISR changes by a leader
are written here too, conditioned on the partition epoch its view was based on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from gregor.cluster import znodes
from gregor.cluster.controller import (
    ControllerError,
    changed_broker_configs,
    changed_topic_configs,
    new_partitions,
    validate_new_topic,
)
from gregor.cluster.metadata_image import MetadataImage, TopicMetadata
from gregor.cluster.partition_state import NO_LEADER, PartitionState
from gregor.cluster.zk_isr_writes import ZkIsrWrites
from gregor.cluster.zk_metadata import INTERNAL_TOPICS, ZkMetadataCache
from gregor.cluster.zookeeper import Create, TransactionFailed, ZooKeeperSession
from gregor.config import BrokerConfig
from gregor.protocol.errors import ErrorCode
from gregor.storage.log_manager import TopicPartition

log = logging.getLogger(__name__)

# Partitions whose replicas a topic's creation line shows: listing all 10,000 of a big
# topic made a line of 200 KB.
_SHOWN_ASSIGNMENTS = 12

PRODUCER_ID_BLOCK_SIZE = 1000
# How long CreateTopics waits for the controller to elect the new partitions' first
# leaders, so that a client producing right after it finds them led.
_LEADERS_WAIT_S = 5.0


class ZkClusterAdmin:
    def __init__(self, config: BrokerConfig, zk: ZooKeeperSession, image: MetadataImage,
                 cache: ZkMetadataCache) -> None:
        self.config = config
        self.zk = zk
        self.image = image
        self.cache = cache
        self.broker_id = config.node_id
        self._producer_ids: tuple[int, int] = (0, -1)  # next, last of the claimed block
        self._producer_id_lock = asyncio.Lock()
        self._isr_writes = ZkIsrWrites(zk, self.image.topic_id)

    @property
    def live_brokers(self) -> list[int]:
        return sorted(self.image.brokers)

    @property
    def _racks(self) -> dict[int, str | None]:
        return {b.broker_id: b.rack for b in self.image.brokers.values()}

    # -------------------------------------------------------------------- topics
    async def create_topic(self, name: str, num_partitions: int = -1,
                           replication_factor: int = -1,
                           configs: Mapping[str, str] | None = None, *,
                           assignment: list[tuple[int, ...]] | None = None,
                           internal: bool = False,
                           validate_only: bool = False) -> TopicMetadata:
        new = validate_new_topic(self.config, self.image, self._racks, name, num_partitions,
                                 replication_factor, configs or {}, assignment)
        topic_id = str(uuid.uuid4())
        topic = TopicMetadata(
            name=name, topic_id=topic_id, configs=new.configs,
            internal=internal or name in INTERNAL_TOPICS,
            partitions=[PartitionState(leader=NO_LEADER, leader_epoch=-1, isr=(), replicas=r)
                        for r in new.replicas])
        if validate_only:
            return topic
        try:
            await self.zk.multi([
                Create(znodes.topic_config_path(name), znodes.encode_topic_config(new.configs)),
                Create(znodes.topic_path(name),
                       znodes.TopicAssignment(topic_id, tuple(new.replicas)).encode()),
            ])
        except TransactionFailed as exc:
            if isinstance(exc.cause, NodeExistsError):
                raise ControllerError(ErrorCode.topic_already_exists,
                                      f"topic {name!r} already exists") from None
            raise ControllerError(ErrorCode.unknown_server_error, str(exc)) from None
        hidden = len(new.replicas) - _SHOWN_ASSIGNMENTS
        log.info("created topic %s with %d partition(s), replicas %s%s", name,
                 len(new.replicas), list(new.replicas[:_SHOWN_ASSIGNMENTS]),
                 f" and {hidden} more" if hidden > 0 else "")
        return await self._wait_for_leaders(name) or topic

    async def _wait_for_leaders(self, name: str) -> TopicMetadata | None:
        def led() -> bool:
            topic = self.image.topics.get(name)
            return topic is not None and all(p.has_leader for p in topic.partitions)
        await self.cache.wait_until(led, _LEADERS_WAIT_S)
        return self.image.topics.get(name)

    async def delete_topic(self, name: str, timeout_s: float = 0.0) -> TopicMetadata:
        if not self.config["delete.topic.enable"]:
            raise ControllerError(ErrorCode.topic_deletion_disabled, "delete.topic.enable is false")
        topic = self.image.topics.get(name)
        if topic is None:
            raise ControllerError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
        # Asked twice: it is already being deleted.
        with contextlib.suppress(NodeExistsError):
            await self.zk.create(znodes.delete_topic_path(name))
        # The controller deletes it; answered once this broker has seen that (a client
        # listing topics next must not find it), as Kafka's DelayedDeleteTopics does, or
        # REQUEST_TIMED_OUT while it goes on (at once for a timeout of 0, which
        # librdkafka's non-blocking delete takes for success, as from Kafka).
        topic_id = topic.topic_id

        def gone() -> bool:
            still = self.image.topics.get(name)
            return still is None or still.topic_id != topic_id
        if not await self.cache.wait_until(gone, timeout_s):
            raise ControllerError(ErrorCode.request_timed_out,
                                  f"topic {name!r} is being deleted, not yet gone")
        return topic

    async def create_partitions(self, name: str, count: int,
                                assignment: list[tuple[int, ...]] | None = None,
                                validate_only: bool = False) -> None:
        topic, replicas = new_partitions(self.image.topics.get(name), name, count, assignment,
                                         self._racks)
        if validate_only:
            return
        current = len(topic.partitions)
        found = await self.zk.get(znodes.topic_path(name))
        if found is None:
            raise ControllerError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
        stored = znodes.TopicAssignment.decode(found[0])
        if stored.reassigning:
            raise ControllerError(ErrorCode.reassignment_in_progress,
                                  f"topic {name!r} has partitions being reassigned")
        if len(stored.replicas) != current:
            raise ControllerError(ErrorCode.reassignment_in_progress,
                                  f"topic {name!r} is being changed by another request")
        try:
            await self.zk.set(znodes.topic_path(name), znodes.TopicAssignment(
                stored.topic_id, stored.replicas + tuple(replicas)).encode(),
                found[1].version)
        except BadVersionError:
            raise ControllerError(ErrorCode.reassignment_in_progress,
                                  f"topic {name!r} is being changed by another request") from None

    async def alter_topic_configs(self, name: str, set_values: Mapping[str, str],
                                  deleted: list[str], validate_only: bool = False,
                                  replace: bool = False) -> None:
        topic = self.image.topics.get(name)
        overrides = changed_topic_configs(self.config, topic, name, set_values, deleted, replace)
        if validate_only:
            return
        await self.zk.set(znodes.topic_config_path(name), znodes.encode_topic_config(overrides))

    async def alter_broker_configs(self, entity: str, set_values: Mapping[str, str],
                                   deleted: list[str], validate_only: bool = False,
                                   replace: bool = False) -> None:
        configs = changed_broker_configs(self.image, entity, set_values, deleted, replace)
        if validate_only:
            return
        path, data = znodes.broker_config_path(entity), znodes.encode_topic_config(configs)
        try:
            await self.zk.set(path, data)
        except NoNodeError:
            try:
                await self.zk.create(path, data, makepath=True)
            except NodeExistsError:  # another broker created it meanwhile
                await self.zk.set(path, data)

    # --------------------------------------------------------------- producer ids
    async def allocate_producer_id(self) -> int:
        async with self._producer_id_lock:
            next_id, last = self._producer_ids
            if next_id > last:
                next_id, last = await self._claim_producer_id_block()
            self._producer_ids = (next_id + 1, last)
            return next_id

    async def _claim_producer_id_block(self) -> tuple[int, int]:
        """Take the next block after the latest one claimed, conditioned on its version."""
        while True:
            found = await self.zk.get(znodes.PRODUCER_ID_BLOCK)
            if found is None:
                block = znodes.ProducerIdBlock(self.broker_id, 0, PRODUCER_ID_BLOCK_SIZE - 1)
                try:
                    await self.zk.create(znodes.PRODUCER_ID_BLOCK, block.encode())
                except NodeExistsError:
                    continue
                return block.start, block.end
            latest = znodes.ProducerIdBlock.decode(found[0])
            block = znodes.ProducerIdBlock(self.broker_id, latest.end + 1,
                                           latest.end + PRODUCER_ID_BLOCK_SIZE)
            try:
                await self.zk.set(znodes.PRODUCER_ID_BLOCK, block.encode(), found[1].version)
            except BadVersionError:
                continue  # another broker claimed that block first
            return block.start, block.end

    # ----------------------------------------------------------------------- ISR
    async def alter_isr(self, tp: TopicPartition, state: PartitionState
                        ) -> PartitionState | None:
        """A leader's new ISR, written with others gathered meanwhile (``ZkIsrWrites``)."""
        return await self._isr_writes.write(tp, state)

