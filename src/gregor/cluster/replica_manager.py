"""ReplicaManager: the partitions this broker hosts, and the data path through them.

Produce appends through the partition leader; fetch reads below the high
watermark. Fetches that find too little data park here until an append to one
of their partitions wakes them or their deadline passes (the fetch purgatory).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from gregor.cluster.metadata_image import TopicMetadata
from gregor.cluster.partition import Partition
from gregor.config import BrokerConfig, TopicConfig
from gregor.storage.log_manager import LogManager, TopicPartition


class ReplicaManager:
    def __init__(self, config: BrokerConfig, log_manager: LogManager) -> None:
        self.config = config
        self.broker_id = config.node_id
        self.log_manager = log_manager
        self.partitions: dict[TopicPartition, Partition] = {}
        self._waiters: defaultdict[TopicPartition, set[asyncio.Event]] = defaultdict(set)

    def topic_config(self, topic: TopicMetadata) -> TopicConfig:
        return TopicConfig(self.config, topic.configs)

    def make_partitions(self, topic: TopicMetadata) -> None:
        """Open (or create) the logs of every partition of ``topic`` this broker hosts."""
        config = self.topic_config(topic)
        for index, assignment in enumerate(topic.partitions):
            tp = (topic.name, index)
            if tp in self.partitions or self.broker_id not in assignment.replicas:
                continue
            log = self.log_manager.get_or_create(topic.name, index, config)
            self.partitions[tp] = Partition(
                topic=topic.name, index=index, log=log, local_broker_id=self.broker_id,
                leader_id=assignment.leader, leader_epoch=assignment.leader_epoch,
                replicas=list(assignment.replicas), isr=list(assignment.isr or assignment.replicas),
                high_watermark=self.log_manager.high_watermarks.get(tp, 0))

    def remove_topic(self, topic: str) -> None:
        for tp in [tp for tp in self.partitions if tp[0] == topic]:
            del self.partitions[tp]
            self.log_manager.delete(*tp)
            self.notify(tp)

    def update_config(self, topic: TopicMetadata) -> None:
        config = self.topic_config(topic)
        for (name, _), partition in self.partitions.items():
            if name == topic.name:
                partition.log.config_changed(config)

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: p.high_watermark for tp, p in self.partitions.items()}

    # ----------------------------------------------------------- purgatory
    def notify(self, tp: TopicPartition) -> None:
        """Wake fetches parked on ``tp`` (new data, or the partition went away)."""
        waiters = self._waiters.pop(tp, None)
        if waiters:
            for event in waiters:
                event.set()

    async def wait_for_data(self, tps: list[TopicPartition], timeout: float) -> bool:
        """Park until one of ``tps`` gets data or ``timeout`` seconds pass; True if woken."""
        event = asyncio.Event()
        for tp in tps:
            self._waiters[tp].add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for tp in tps:
                waiters = self._waiters.get(tp)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiters[tp]
