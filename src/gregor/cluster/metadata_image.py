"""MetadataImage: brokers, controller, topics, their ids, partition states and configs.

A single node keeps it in one JSON file in the first log directory, replaced
atomically on change, and is its own only broker and controller. In a cluster it
lives in ZooKeeper, and each broker's image is the copy its metadata listener
keeps up to date from there (``path`` is then None: nothing is stored locally).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gregor.cluster.partition_state import PartitionState, Reassignment
from gregor.cluster.znodes import BrokerRegistration
from gregor.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from gregor.security.quota_entities import QuotaConfigs

METADATA_FILE = "gregor-metadata.json"
# The cluster's default in ``broker_configs`` (and ZooKeeper's /config/brokers), as Kafka
# names it; a broker's own are under its id.
DEFAULT_BROKER_CONFIGS = "<default>"


@dataclass
class TopicMetadata:
    name: str
    topic_id: str
    partitions: list[PartitionState]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)


@dataclass
class MetadataImage:
    path: Path | None
    cluster_id: str
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    next_producer_id: int = 1000
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    controller_id: int = -1
    # Brokers in a controlled shutdown (a cluster only): not eligible for any ISR.
    shutting_down: frozenset[int] = frozenset()
    # Dynamic broker configs: the cluster's default, and each broker's by its id.
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # Users' entity configs by user name (Kafka's /config/users): SCRAM credentials.
    user_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # Client quotas by entity (Kafka's /config/users, /config/clients and their defaults).
    client_quotas: QuotaConfigs = field(default_factory=QuotaConfigs)
    # The ACLs every broker enforces (Kafka's /kafka-acl and /kafka-acl-extended).
    acls: set[AclBinding] = field(default_factory=set)
    # Partitions being reassigned (a cluster only), as their topics' nodes say: what the
    # controller drives and ListPartitionReassignments lists, without a walk of every
    # partition.
    reassigning: dict[tuple[str, int], Reassignment] = field(default_factory=dict)
    # Replicas on live brokers' failed log directories (a cluster only, KIP-112): topic
    # -> partition index -> broker ids; replaced whole on change.
    offline_replicas: dict[str, dict[int, frozenset[int]]] = field(default_factory=dict)

    @classmethod
    def load(cls, log_dir: Path) -> MetadataImage:
        path = log_dir / METADATA_FILE
        if not path.exists():
            image = cls(path, cluster_id=new_cluster_id())
            image.save()
            return image
        raw = json.loads(path.read_text())
        topics = {
            name: TopicMetadata(
                name=name, topic_id=t["topic_id"], configs=t.get("configs", {}),
                internal=t.get("internal", False),
                partitions=[_partition_state(p) for p in t["partitions"]])
            for name, t in raw["topics"].items()
        }
        return cls(path, raw["cluster_id"], topics, raw.get("next_producer_id", 1000),
                   broker_configs=raw.get("broker_configs", {}),
                   user_configs=raw.get("user_configs", {}),
                   client_quotas=QuotaConfigs(raw.get("client_quotas", {})),
                   acls={_acl(item) for item in raw.get("acls", [])})

    def save(self) -> None:
        if self.path is None:
            return
        payload = {
            "cluster_id": self.cluster_id,
            "next_producer_id": self.next_producer_id,
            "topics": {name: {k: v for k, v in asdict(t).items() if k != "name"}
                       for name, t in self.topics.items()},
            "broker_configs": self.broker_configs,
            "user_configs": self.user_configs,
            "client_quotas": self.client_quotas.entities,
            "acls": sorted(([a.resource_type, a.resource_name, a.pattern_type, a.principal,
                             a.host, a.operation, a.permission] for a in self.acls), key=str),
        }
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as handle:
            json.dump(payload, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    def topic_id(self, topic: str) -> str:
        """The topic's id, or "" for a topic not known (a state change names it so, as
        Kafka's ZooKeeper layout allows)."""
        known = self.topics.get(topic)
        return "" if known is None else known.topic_id

    def partition(self, topic: str, index: int) -> PartitionState | None:
        """The partition's state, or None if no such topic has such a partition: the one
        answer to "does it exist?" that requests naming partitions must give first."""
        meta = self.topics.get(topic)
        if meta is None or not 0 <= index < len(meta.partitions):
            return None
        return meta.partitions[index]

    def dynamic_broker_configs(self, broker_id: int) -> tuple[dict[str, str], dict[str, str]]:
        """The cluster's default dynamic configs and ``broker_id``'s own."""
        return (self.broker_configs.get(DEFAULT_BROKER_CONFIGS, {}),
                self.broker_configs.get(str(broker_id), {}))

    def allocate_producer_id(self) -> int:
        producer_id = self.next_producer_id
        self.next_producer_id += 1
        self.save()
        return producer_id


def _partition_state(raw: dict) -> PartitionState:
    return PartitionState(leader=raw["leader"], leader_epoch=raw.get("leader_epoch", 0),
                          isr=tuple(raw.get("isr") or raw["replicas"]),
                          replicas=tuple(raw["replicas"]),
                          partition_epoch=raw.get("partition_epoch", 0))


def _acl(raw: list) -> AclBinding:
    kind, name, pattern, principal, host, operation, permission = raw
    return AclBinding(ResourceType(kind), name, PatternType(pattern), principal, host,
                      Operation(operation), Permission(permission))


def new_cluster_id() -> str:
    """Kafka cluster ids are 16 random bytes in URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
